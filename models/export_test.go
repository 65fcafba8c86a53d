package models

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/paygate/paygate/keyring"
)

// RewindSubscriptionsMigration takes the schema back to what migration
// 20261123_0002 left (the columns and indexes of 0004 dropped, the migration
// forgotten), so a test can run 0004 over an older database with data.
func (s *Store) RewindSubscriptionsMigration() error {
	m := s.db.Migrator()
	for _, c := range subscriptionColumns() {
		if c.indexed && m.HasIndex(c.model, c.field) {
			if err := m.DropIndex(c.model, c.field); err != nil {
				return fmt.Errorf("drop index %T.%s: %w", c.model, c.field, err)
			}
		}
		if m.HasColumn(c.model, c.field) {
			if err := m.DropColumn(c.model, c.field); err != nil {
				return fmt.Errorf("drop %T.%s: %w", c.model, c.field, err)
			}
		}
	}
	return s.db.Exec("DELETE FROM schema_migrations WHERE id = ?", "20261123_0004_subscriptions").Error
}

// HasColumnForTest reports whether the table of model has the field's column.
func (s *Store) HasColumnForTest(model any, field string) bool {
	return s.db.Migrator().HasColumn(model, field)
}

// DB exposes the store's handle to the package's own tests (raw column
// checks, rewinding a migration).
func (s *Store) DB() *gorm.DB { return s.db }

// WithSecrets returns the same store with another keyring, as a process
// started with other PAYGATE_SECRET_KEY settings would see it.
func (s *Store) WithSecrets(r *keyring.Ring) *Store {
	return &Store{db: s.db, now: s.now, secrets: r}
}

// CapturedQuery is one SQL statement a store method ran, with its values.
type CapturedQuery struct {
	SQL  string
	Vars []any
}

// CaptureQueries runs fn and returns the SELECT statements it sent through
// the store's pools.
func (s *Store) CaptureQueries(fn func()) []CapturedQuery {
	var got []CapturedQuery
	name := "capture_" + NewID()
	for _, db := range []*gorm.DB{s.db, s.reads} {
		if db == nil {
			continue
		}
		_ = db.Callback().Query().After("gorm:query").Register(name, func(d *gorm.DB) {
			got = append(got, CapturedQuery{SQL: d.Statement.SQL.String(), Vars: append([]any(nil), d.Statement.Vars...)})
		})
		defer func(db *gorm.DB) { _ = db.Callback().Query().Remove(name) }(db)
	}
	fn()
	return got
}

// CaptureStatements runs fn and returns every statement it sent through
// the store's pools (reads, writes, raw), in order; the transactions'
// BEGIN and COMMIT are not statements of gorm's and are not in it.
func (s *Store) CaptureStatements(fn func()) []string {
	var got []string
	name := "statements_" + NewID()
	for _, db := range []*gorm.DB{s.db, s.reads} {
		if db == nil {
			continue
		}
		cb := db.Callback()
		record := func(d *gorm.DB) { got = append(got, d.Statement.SQL.String()) }
		_ = cb.Create().After("gorm:create").Register(name, record)
		_ = cb.Query().After("gorm:query").Register(name, record)
		_ = cb.Update().After("gorm:update").Register(name, record)
		_ = cb.Delete().After("gorm:delete").Register(name, record)
		_ = cb.Row().After("gorm:row").Register(name, record)
		_ = cb.Raw().After("gorm:raw").Register(name, record)
		defer func() {
			_ = cb.Create().Remove(name)
			_ = cb.Query().Remove(name)
			_ = cb.Update().Remove(name)
			_ = cb.Delete().Remove(name)
			_ = cb.Row().Remove(name)
			_ = cb.Raw().Remove(name)
		}()
	}
	fn()
	return got
}

// Explain runs a captured query under EXPLAIN (ANALYZE, FORMAT JSON) on
// PostgreSQL and answers the plan with what each node actually read.
func (s *Store) Explain(q CapturedQuery) (string, error) {
	var plan string
	err := s.db.Raw("EXPLAIN (ANALYZE, FORMAT JSON) "+q.SQL, q.Vars...).Row().Scan(&plan)
	return plan, err
}

// CloneRows copies the first row of table n times on PostgreSQL, with the
// columns in set replaced by SQL expressions of g (1..n), then analyzes the
// table, so a plan is made over statistics of a table with rows.
func (s *Store) CloneRows(table string, n int, set map[string]string) error {
	var pairs []string
	for col, expr := range set {
		pairs = append(pairs, fmt.Sprintf("'%s', %s", col, expr))
	}
	q := fmt.Sprintf(`INSERT INTO %[1]s SELECT (jsonb_populate_record(NULL::%[1]s, to_jsonb(t) || jsonb_build_object(%[2]s))).*
		FROM (SELECT * FROM %[1]s LIMIT 1) t, generate_series(1, %[3]d) g`, table, strings.Join(pairs, ", "), n)
	if err := s.db.Exec(q).Error; err != nil {
		return fmt.Errorf("clone %s: %w", table, err)
	}
	return s.db.Exec("ANALYZE " + table).Error
}

// ExecRaw runs a statement on the store's database outside its repository
// methods, as another process would write (nothing is told in process).
func (s *Store) ExecRaw(q string, args ...any) error { return s.db.Exec(q, args...).Error }

// ListenerPID is the backend of the change feed's LISTEN connection.
func (f *SessionChanges) ListenerPID() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listenerPID
}

// OpenWithEarlierSQLiteDriver opens a SQLite store on the driver the store
// ran before github.com/ncruces/go-sqlite3: glebarez/go-sqlite (the
// modernc.org/sqlite translation), with the pragmas it was opened with, so a
// test can write a file as an older release did.
func OpenWithEarlierSQLiteDriver(path string, secrets *keyring.Ring) (*Store, error) {
	dsn := SQLiteFileURI(path) + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_txlock=immediate"
	db, err := gorm.Open(sqlite.Open(dsn), &gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: true,
		DisableForeignKeyConstraintWhenMigrating: true,
		NowFunc:                                  func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }})
	if err != nil {
		return nil, err
	}
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.SetMaxOpenConns(1)
	}
	return &Store{db: db, now: func() time.Time { return time.Now().UTC() }, secrets: secrets}, nil
}

// IsConstraintViolation is isConstraintViolation.
var IsConstraintViolation = isConstraintViolation

// PipelineForTest runs raw statements (SQL with ? and its values) through
// the store's pipeline.
func (s *Store) PipelineForTest(ctx context.Context, stmts ...[]any) ([]int64, error) {
	var ps []pending
	for _, st := range stmts {
		p, err := built(s.dry(ctx).Exec(st[0].(string), st[1:]...))
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return s.pipeline(ctx, ps)
}
