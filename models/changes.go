package models

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// SessionChanges tells which checkout sessions changed, so a process can
// keep what it shows of a session in memory (the status poll's cache) and
// drop it the moment the session or its history is written, by this
// process or any other.
//
// Every write reaches it through the database itself, not through the code
// that wrote: triggers on checkout_sessions and checkout_session_events
// (migration 20261123_0009). On PostgreSQL they call pg_notify, delivered at
// commit to a LISTEN connection; on SQLite they append to session_changes,
// which is read every PollInterval. Writes of this process's Store are
// also told at once, after their commit (Store.sessionsChanged), so a
// process that wrote sees its own write without waiting for the feed.
//
// A subscriber must trust what it kept only while the feed is Live: when
// the listener loses its connection or a read of the change table fails,
// every subscriber is told to forget everything (id ""), and again when
// the feed is back, since changes in between were not seen.
type SessionChanges struct {
	store *Store
	// PollInterval is how often SQLite's change table is read (default
	// 20 ms: a write of another process is seen within that).
	PollInterval time.Duration

	mu      sync.Mutex
	subs    []func(id string)
	live    bool
	running bool
	logger  *slog.Logger
	// listenerPID is the PostgreSQL backend of the LISTEN connection (0
	// when none; tests end it to check the feed recovers).
	listenerPID uint32
}

// DefaultChangePoll is SessionChanges.PollInterval's default.
const DefaultChangePoll = 20 * time.Millisecond

// sessionChangesChannel is the PostgreSQL notification channel.
const sessionChangesChannel = "paygate_session_changes"

// changeTableKeep is how many rows of SQLite's change table are kept: a
// reader further behind than that starts over (forgets everything).
const changeTableKeep = 10000

// SessionChanges returns the store's change feed (one per store). It tells
// nothing until Run is called.
func (s *Store) SessionChanges() *SessionChanges {
	if f := s.feed.Load(); f != nil {
		return f
	}
	s.feed.CompareAndSwap(nil, &SessionChanges{store: s})
	return s.feed.Load()
}

// Subscribe registers fn, called with a changed session's id, or with ""
// when everything must be forgotten (the feed went down or came back). fn
// runs on the feed's goroutine or the writer's: it must be quick.
func (f *SessionChanges) Subscribe(fn func(id string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, fn)
}

// Live reports whether every change is being seen now.
func (f *SessionChanges) Live() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live
}

func (f *SessionChanges) tell(id string) {
	f.mu.Lock()
	subs := f.subs
	f.mu.Unlock()
	for _, fn := range subs {
		fn(id)
	}
}

func (f *SessionChanges) setLive(live bool) {
	f.mu.Lock()
	changed := f.live != live
	f.live = live
	f.mu.Unlock()
	if changed {
		f.tell("")
	}
}

// SetLogger sets where the feed reports its interruptions (default
// slog.Default()).
func (f *SessionChanges) SetLogger(l *slog.Logger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logger = l
}

func (f *SessionChanges) log() *slog.Logger {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.logger != nil {
		return f.logger
	}
	return slog.Default()
}

// Run follows the database's changes until ctx ends, reconnecting after a
// failure. Only one Run per feed does anything; others return at once.
func (f *SessionChanges) Run(ctx context.Context) {
	f.mu.Lock()
	if f.running {
		f.mu.Unlock()
		return
	}
	f.running = true
	f.mu.Unlock()
	defer func() {
		f.setLive(false)
		f.mu.Lock()
		f.running = false
		f.mu.Unlock()
	}()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		var err error
		if f.store.Dialect() == "postgres" {
			err = f.listen(ctx)
		} else {
			err = f.poll(ctx)
		}
		f.setLive(false)
		if ctx.Err() != nil {
			return
		}
		f.log().Warn("session change feed interrupted; the status poll reads the database until it is back", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listen follows PostgreSQL's notifications on a connection of its own.
func (f *SessionChanges) listen(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, f.store.dsn)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+sessionChangesChannel); err != nil {
		return err
	}
	f.mu.Lock()
	f.listenerPID = conn.PgConn().PID()
	f.mu.Unlock()
	// Live only once LISTEN holds: what committed before is in the
	// database, and what commits after is notified.
	f.setLive(true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		f.tell(n.Payload)
	}
}

// poll reads SQLite's change table every PollInterval.
func (f *SessionChanges) poll(ctx context.Context) error {
	every := f.PollInterval
	if every <= 0 {
		every = DefaultChangePoll
	}
	// The high-water mark of the AUTOINCREMENT (not MAX(seq): the table may
	// have been emptied), so the next row read is the next written.
	var cursor int64
	if err := f.store.reader(ctx).Raw("SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'session_changes'), 0)").
		Scan(&cursor).Error; err != nil {
		return err
	}
	f.setLive(true)
	tick := time.NewTicker(every)
	defer tick.Stop()
	pruned := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		var rows []struct {
			Seq       int64
			SessionID string
		}
		if err := f.store.reader(ctx).Raw("SELECT seq, session_id FROM session_changes WHERE seq > ? ORDER BY seq LIMIT ?",
			cursor, changeTableKeep).Scan(&rows).Error; err != nil {
			return err
		}
		if len(rows) > 0 && rows[0].Seq != cursor+1 {
			// Rows this reader never saw were pruned: start over.
			return errors.New("models: session changes pruned past the reader")
		}
		for _, r := range rows {
			f.tell(r.SessionID)
			cursor = r.Seq
		}
		if time.Since(pruned) > time.Minute {
			pruned = time.Now()
			if err := f.store.ctx(ctx).Exec("DELETE FROM session_changes WHERE seq <= ?", cursor-changeTableKeep).Error; err != nil {
				f.log().Warn("session changes not pruned", "err", err)
			}
		}
	}
}

// sessionsChanged tells this process's subscribers, after a commit, of the
// sessions it wrote (the database feed tells them again, harmlessly).
func (s *Store) sessionsChanged(ids ...string) {
	f := s.feed.Load()
	if f == nil {
		return
	}
	for _, id := range ids {
		f.tell(id)
	}
}
