package models

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// A pending statement is built ahead of running (GORM's dry run, in the
// store's dialect): a hot path builds all its writes, then sends them
// together (pipeline).
type pending struct {
	sql  string
	vars []any
}

// dry builds statements without running them: every call on it answers
// the statement GORM would have sent (built).
func (s *Store) dry(ctx context.Context) *gorm.DB {
	return s.db.Session(&gorm.Session{DryRun: true, NewDB: true, Context: ctx})
}

// built is a dry-run call's statement.
func built(db *gorm.DB) (pending, error) {
	if db.Error != nil {
		return pending{}, db.Error
	}
	return pending{sql: db.Statement.SQL.String(), vars: db.Statement.Vars}, nil
}

// pipeline runs stmts as one transaction and answers each one's rows
// affected; a statement failing rolls back the whole. A caller whose
// writes depend on what it read guards them in SQL, so nothing waits on a
// round trip of its own to decide between COMMIT and ROLLBACK: its first
// statement fails unless the row is still as read, and on PostgreSQL that
// statement reads the row FOR UPDATE (a plain read sees the committed row
// and misses a writer still in its transaction; the lock waits for that
// writer and then reads the row as it committed).
//
// On PostgreSQL the statements go to the server together, one round trip
// (pgx's batch, its own implicit transaction), where a transaction of
// GORM calls takes one a statement and two for BEGIN and COMMIT: on the
// expiry storm's path each round trip is PostgreSQL CPU (issue 16). On
// SQLite they run one after another in a transaction, as the GORM calls
// would.
func (s *Store) pipeline(ctx context.Context, stmts []pending) ([]int64, error) {
	rows := make([]int64, len(stmts))
	if s.Dialect() != "postgres" {
		err := s.ctx(ctx).Transaction(func(tx *gorm.DB) error {
			for i, st := range stmts {
				res, err := tx.Statement.ConnPool.ExecContext(ctx, st.sql, st.vars...)
				if err != nil {
					return err
				}
				if rows[i], err = res.RowsAffected(); err != nil {
					return err
				}
			}
			return nil
		})
		return rows, err
	}
	sqlDB, err := s.db.DB()
	if err != nil {
		return nil, err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("models: pipeline on a %T connection", dc)
		}
		b := &pgx.Batch{}
		for _, st := range stmts {
			b.Queue(st.sql, st.vars...)
		}
		// One Sync ends the batch: committed, or rolled back whole by its
		// failing statement.
		return readBatch(c.Conn().SendBatch(ctx, b), rows)
	})
	return rows, err
}

// readBatch reads a batch's results into rows and closes it.
func readBatch(br pgx.BatchResults, rows []int64) error {
	for i := range rows {
		tag, err := br.Exec()
		if err != nil {
			return errors.Join(err, br.Close())
		}
		rows[i] = tag.RowsAffected()
	}
	return br.Close()
}
