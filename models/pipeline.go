package models

import (
	"context"
	"database/sql/driver"
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

// errKept: keep refused the pipeline's rows, and its transaction rolled
// back.
var errKept = errors.New("models: pipeline rolled back")

// pipeline runs stmts as one transaction and answers each one's rows
// affected. With keep, the transaction commits only when keep accepts
// those rows; otherwise it rolls back and pipeline answers errKept.
//
// On PostgreSQL the statements go to the server together, one round trip
// (pgx's batch: with keep, BEGIN goes with them and COMMIT or ROLLBACK is
// one more; without, the batch is its own implicit transaction), where a
// transaction of GORM calls takes one a statement and two for BEGIN and
// COMMIT: on the expiry storm's path each round trip is PostgreSQL CPU
// (issue 16). On SQLite they run one after another in a transaction, as
// the GORM calls would.
func (s *Store) pipeline(ctx context.Context, stmts []pending, keep func(rows []int64) bool) ([]int64, error) {
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
			if keep != nil && !keep(rows) {
				return errKept
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
		pc := c.Conn()
		b := &pgx.Batch{}
		if keep != nil {
			b.Queue("BEGIN")
		}
		for _, st := range stmts {
			b.Queue(st.sql, st.vars...)
		}
		err := readBatch(pc.SendBatch(ctx, b), keep != nil, rows)
		if keep == nil {
			// The batch was its own transaction: committed, or rolled
			// back whole by its failing statement.
			return err
		}
		end := "COMMIT"
		if err != nil || !keep(rows) {
			end = "ROLLBACK"
		}
		if _, xerr := pc.Exec(ctx, end); xerr != nil {
			// The connection is in a transaction nothing will end: drop
			// it (database/sql would too, on its next use).
			return errors.Join(err, xerr, driver.ErrBadConn)
		}
		if err == nil && end == "ROLLBACK" {
			err = errKept
		}
		return err
	})
	return rows, err
}

// readBatch reads a batch's results into rows (skipping BEGIN's with
// begun) and closes it.
func readBatch(br pgx.BatchResults, begun bool, rows []int64) error {
	if begun {
		if _, err := br.Exec(); err != nil {
			return errors.Join(err, br.Close())
		}
	}
	for i := range rows {
		tag, err := br.Exec()
		if err != nil {
			return errors.Join(err, br.Close())
		}
		rows[i] = tag.RowsAffected()
	}
	return br.Close()
}
