// Package storetest opens migrated, throw-away stores for tests on every
// dialect the service supports: always SQLite, and PostgreSQL when
// DATABASE_URL points at a server. With PAYGATE_REQUIRE_POSTGRES=1 (as CI
// sets it) an unreachable PostgreSQL fails the test instead of skipping it.
package storetest

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/paygate/paygate/keyring"
	"github.com/paygate/paygate/models"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Dialects lists the dialects to run a store-backed test on.
func Dialects() []string {
	if postgresURL() != "" || os.Getenv("PAYGATE_REQUIRE_POSTGRES") == "1" {
		return []string{"sqlite", "postgres"}
	}
	return []string{"sqlite"}
}

func postgresURL() string {
	if v := os.Getenv("PAYGATE_TEST_DATABASE_URL"); v != "" {
		return v
	}
	return os.Getenv("DATABASE_URL")
}

// Open returns a migrated store of the dialect, isolated from every other
// test: a new SQLite file, or a new PostgreSQL schema dropped at cleanup.
func Open(t testing.TB, dialect string) *models.Store {
	t.Helper()
	var st *models.Store
	var err error
	var where string
	switch dialect {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "paygate.db")
		where = models.SQLiteFileURI(path) + "?_pragma=busy_timeout(10000)"
		st, err = models.Open(models.Options{SQLitePath: path, Secrets: Keyring()})
	case "postgres":
		where = PostgresURL(t)
		st, err = models.Open(models.Options{DatabaseURL: where, Secrets: Keyring()})
	default:
		t.Fatalf("storetest: unknown dialect %q", dialect)
	}
	if err != nil {
		t.Fatalf("storetest: open %s: %v", dialect, err)
	}
	databases.Store(st, database{dialect, where})
	t.Cleanup(func() { databases.Delete(st); _ = st.Close() })
	if err := st.Migrate(); err != nil {
		t.Fatalf("storetest: migrate %s: %v", dialect, err)
	}
	return st
}

// databases maps each open test store to where its database is, for Exec.
var databases sync.Map // *models.Store -> database

type database struct{ dialect, where string }

// Exec runs one statement on a test store's database over a connection of
// its own, as another process would: for a scenario's set-up that no
// route offers (the bench moves a hosted checkout's end to the second it
// wants its sessions due). It answers the rows affected.
func Exec(t testing.TB, st *models.Store, query string, args ...any) int64 {
	t.Helper()
	v, ok := databases.Load(st)
	if !ok {
		t.Fatal("storetest: Exec on a store storetest did not open")
	}
	d := v.(database)
	dial := models.SQLiteDialector(d.where)
	if d.dialect == "postgres" {
		dial = postgres.Open(d.where)
	}
	db, err := gorm.Open(dial, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("storetest: open %s: %v", d.dialect, err)
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	res := db.Exec(query, args...)
	if res.Error != nil {
		t.Fatalf("storetest: %s: %v", query, res.Error)
	}
	return res.RowsAffected
}

// URL is where a test store's database is: PostgreSQL's URL, with the
// store's schema, or SQLite's file URI.
func URL(t testing.TB, st *models.Store) string {
	t.Helper()
	v, ok := databases.Load(st)
	if !ok {
		t.Fatal("storetest: URL of a store storetest did not open")
	}
	return v.(database).where
}

// Secret is the server secret the test stores seal webhook secrets under.
const Secret = "storetest-server-secret-storetest-server-secret"

// Keyring is the webhook-secret keyring of the test stores.
func Keyring() *keyring.Ring {
	r, err := keyring.New(keyring.PurposeWebhookSecret, Secret)
	if err != nil {
		panic(err)
	}
	return r
}

// PostgresURL creates a fresh schema on the test PostgreSQL server, drops
// it at cleanup, and returns a URL whose search_path is that schema (for
// child processes too). Unreachable: the test fails when
// PAYGATE_REQUIRE_POSTGRES=1 and is skipped otherwise.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := postgresURL()
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		if os.Getenv("PAYGATE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("storetest: PostgreSQL is required (PAYGATE_REQUIRE_POSTGRES=1) but %s is unreachable: %v", redact(base), err)
		}
		t.Skipf("storetest: PostgreSQL unreachable at %s: %v", redact(base), err)
	}
	defer conn.Close(ctx)
	schema := "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:20]
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("storetest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, base); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			c.Close(ctx)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// ForEach runs fn as a subtest on every dialect with a fresh store.
func ForEach(t *testing.T, fn func(t *testing.T, st *models.Store)) {
	for _, d := range Dialects() {
		t.Run(d, func(t *testing.T) { fn(t, Open(t, d)) })
	}
}
