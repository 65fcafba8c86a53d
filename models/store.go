package models

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/ncruces/go-sqlite3"
	_ "github.com/ncruces/go-sqlite3/driver" // database/sql driver "sqlite3"
	sqliteunicode "github.com/ncruces/go-sqlite3/ext/unicode"
	"github.com/paygate/paygate/keyring"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Store is the handle every repository hangs off.
type Store struct {
	db *gorm.DB
	// reads serves the hot public reads (the status poll) on SQLite: a
	// pool of read-only connections beside the single writer. nil on
	// PostgreSQL, whose pool serves both.
	reads *gorm.DB
	now   func() time.Time
	// secrets seals webhook signing secrets at rest (nil: endpoints cannot
	// be created or delivered to, and migration 0005 refuses to run over
	// secrets in clear).
	secrets *keyring.Ring
	// dsn is PostgreSQL's URL (the change feed's LISTEN connection).
	dsn string
	// feed is the session change feed, once asked for.
	feed atomic.Pointer[SessionChanges]
}

// Options for Open.
type Options struct {
	// DatabaseURL selects PostgreSQL; empty means SQLite at SQLitePath.
	DatabaseURL string
	// SQLitePath is the embedded database file (created with its folder).
	SQLitePath string
	// Logger receives slow-query warnings; nil discards them.
	Logger *slog.Logger
	// Pool sizes PostgreSQL's connection pool; zero fields take
	// DefaultPool's. database/sql's own default keeps only 2 idle
	// connections, so every burst above that forks new backends.
	Pool Pool
	// Secrets seals webhook signing secrets (keyring.PurposeWebhookSecret,
	// from PAYGATE_SECRET_KEY and PAYGATE_SECRET_KEY_PREVIOUS).
	Secrets *keyring.Ring
}

// Pool is the PostgreSQL connection pool.
type Pool struct {
	MaxOpen     int           // DB_MAX_OPEN_CONNS
	MaxIdle     int           // DB_MAX_IDLE_CONNS
	MaxLifetime time.Duration // DB_CONN_MAX_LIFETIME
	MaxIdleTime time.Duration // DB_CONN_MAX_IDLE_TIME
}

// DefaultPool: 32 connections kept open and idle (no churn under steady
// load), recycled every 30 minutes, closed after 5 idle minutes.
var DefaultPool = Pool{MaxOpen: 32, MaxIdle: 32, MaxLifetime: 30 * time.Minute, MaxIdleTime: 5 * time.Minute}

func (p Pool) withDefaults() Pool {
	if p.MaxOpen <= 0 {
		p.MaxOpen = DefaultPool.MaxOpen
	}
	if p.MaxIdle <= 0 {
		p.MaxIdle = min(DefaultPool.MaxIdle, p.MaxOpen)
	}
	if p.MaxLifetime <= 0 {
		p.MaxLifetime = DefaultPool.MaxLifetime
	}
	if p.MaxIdleTime <= 0 {
		p.MaxIdleTime = DefaultPool.MaxIdleTime
	}
	return p
}

// Open connects to the store (no migration; call Migrate).
func Open(opts Options) (*Store, error) {
	cfg := &gorm.Config{
		Logger:                                   logger.Discard,
		NowFunc:                                  func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) },
		DisableForeignKeyConstraintWhenMigrating: true,
		TranslateError:                           false,
		// A single write is atomic on its own: GORM's default would wrap
		// each one in BEGIN and COMMIT, two more round trips (and on
		// SQLite another take of the write lock). The models have no
		// associations or hooks that a single Create would fan out to;
		// writes of several statements use explicit transactions.
		SkipDefaultTransaction: true,
	}
	var db *gorm.DB
	var err error
	if opts.DatabaseURL != "" {
		db, err = gorm.Open(postgres.Open(opts.DatabaseURL), cfg)
		if err == nil {
			if sqlDB, derr := db.DB(); derr == nil {
				p := opts.Pool.withDefaults()
				sqlDB.SetMaxOpenConns(p.MaxOpen)
				sqlDB.SetMaxIdleConns(p.MaxIdle)
				sqlDB.SetConnMaxLifetime(p.MaxLifetime)
				sqlDB.SetConnMaxIdleTime(p.MaxIdleTime)
			}
		}
	} else {
		path := opts.SQLitePath
		if path == "" {
			return nil, errors.New("models: SQLitePath or DatabaseURL required")
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("models: %w", err)
		}
		// WAL lets readers run beside the single writer; busy_timeout makes
		// concurrent writers wait instead of failing with SQLITE_BUSY.
		// The path is escaped for the URI: a '#' or '?' in it (a test's
		// temporary folder for a subtest "sqlite#01") would otherwise cut
		// the path short and drop the pragmas, and every such test would
		// share one file named after the cut.
		dsn := SQLiteFileURI(path) + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate"
		db, err = gorm.Open(SQLiteDialector(dsn), cfg)
		if err == nil {
			sqlDB, derr := db.DB()
			if derr == nil {
				sqlDB.SetMaxOpenConns(1)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("models: open: %w", err)
		}
		// SQLite has one writer, but in WAL mode readers run beside it:
		// the status poll reads on its own read-only connections instead of
		// queueing behind writes on the single one. The readers keep their
		// statements prepared (the driver keeps them compiled): a third of
		// a read by id was compiling its SELECT. The writer does not: most
		// of its statements run in transactions, where database/sql
		// prepares a statement again for every transaction anyway.
		reads, rerr := gorm.Open(SQLiteDialector(SQLiteFileURI(path)+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)"),
			&gorm.Config{Logger: logger.Discard, NowFunc: cfg.NowFunc, PrepareStmt: true, PrepareStmtMaxSize: sqliteStatements})
		if rerr != nil {
			_ = closeDB(db)
			return nil, fmt.Errorf("models: open readers: %w", rerr)
		}
		if sqlDB, derr := reads.DB(); derr == nil {
			sqlDB.SetMaxOpenConns(sqliteReaders)
			sqlDB.SetMaxIdleConns(sqliteReaders)
		}
		return &Store{db: db, reads: reads, now: func() time.Time { return time.Now().UTC() }, secrets: opts.Secrets}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("models: open: %w", err)
	}
	return &Store{db: db, now: func() time.Time { return time.Now().UTC() }, secrets: opts.Secrets, dsn: opts.DatabaseURL}, nil
}

// sqliteStatements bounds the SQLite readers' cache of prepared statements
// (a query with an IN list of another length is another statement).
const sqliteStatements = 256

// sqliteReaders is the size of SQLite's read-only pool.
const sqliteReaders = 4

func closeDB(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// SQLite's own lower() and upper() fold ASCII only, so a search for "Änne"
// (lowered in Go, compared with lower(name)) found nothing on SQLite while
// PostgreSQL found it. Every connection of the driver gets the Unicode
// versions of the driver's unicode extension (Go's strings.ToLower rules);
// LIKE stays SQLite's own, so its index optimisation is kept. No index is on
// lower() of a column, so no index was built with the other folding.
func init() {
	sqliteunicode.RegisterLike = false
	sqlite3.AutoExtension(sqliteunicode.Register)
}

// SQLiteDialector is GORM's SQLite dialect on the driver the store runs:
// github.com/ncruces/go-sqlite3, SQLite compiled to Go without cgo (wasm2go),
// registered as "sqlite3". Against the modernc.org/sqlite translation the
// store ran before (glebarez/go-sqlite), it keeps prepared statements
// compiled and spends half the system time a write (BenchmarkSQLiteDriver:
// a session's insert with its history entry, then its read by id). dsn is a
// file: URI with its query ("?..."); the SQL is GORM's SQLite dialect,
// unchanged.
//
// Times are written in the layout the earlier driver wrote, so a file written
// before reads back and SQL comparisons of times order them as before.
func SQLiteDialector(dsn string) gorm.Dialector {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return &sqlite.Dialector{DriverName: "sqlite3", DSN: dsn + sep + "_timefmt=" + url.QueryEscape(sqliteTimeLayout)}
}

// sqliteTimeLayout is how the store writes a time in SQLite.
const sqliteTimeLayout = "2006-01-02 15:04:05.999999999-07:00"

// SQLiteFileURI is the file: URI of a SQLite database file, its path
// escaped where a character would end or change it.
func SQLiteFileURI(p string) string {
	return "file:" + strings.NewReplacer("%", "%25", "#", "%23", "?", "%3f").Replace(p)
}

// Migrate moves the schema to the newest version. Migrations that encrypt
// data at rest use the store's keyring.
func (s *Store) Migrate() error {
	return Migrate(s.db.WithContext(withKeyring(context.Background(), s.secrets)))
}

// Dialect names the database ("sqlite" or "postgres").
func (s *Store) Dialect() string { return s.db.Dialector.Name() }

// Ping checks the database answers (readiness).
func (s *Store) Ping(ctx context.Context) error {
	sqlDB, err := s.db.DB()
	if err != nil {
		return err
	}
	return sqlDB.PingContext(ctx)
}

// Close releases the connections.
func (s *Store) Close() error {
	if s.reads != nil {
		_ = closeDB(s.reads)
	}
	return closeDB(s.db)
}

// SetClock replaces the store's clock (tests).
func (s *Store) SetClock(now func() time.Time) { s.now = now }

// Now is the store's clock, UTC.
func (s *Store) Now() time.Time { return s.now().UTC() }

// NewID returns a UUIDv7: ids sort in creation order, so cursors follow it.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// isUniqueViolation recognises a unique-constraint failure on either dialect.
func isUniqueViolation(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "23505"
	}
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return true
	}
	// SQLite reports constraint failures through its extended error code.
	return errors.Is(err, sqlite3.CONSTRAINT_UNIQUE) || errors.Is(err, sqlite3.CONSTRAINT_PRIMARYKEY)
}

// isConstraintViolation recognises any constraint's failure (unique, not
// null, foreign key, check) on either dialect.
func isConstraintViolation(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "23")
	}
	return errors.Is(err, sqlite3.CONSTRAINT)
}

func (s *Store) ctx(ctx context.Context) *gorm.DB { return s.db.WithContext(ctx) }

// reader is where a read outside any transaction goes: SQLite's read-only
// pool, or the one pool of PostgreSQL.
func (s *Store) reader(ctx context.Context) *gorm.DB {
	if s.reads != nil {
		return s.reads.WithContext(ctx)
	}
	return s.db.WithContext(ctx)
}
