package api_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestPollCacheFollowsOtherProcesses: the status poll answers from memory
// while its session does not move, and shows at once what this process
// wrote and, within the feed's delay, what another process (the worker,
// with its own store on the same database) wrote.
func TestPollCacheFollowsOtherProcesses(t *testing.T) {
	for _, dialect := range storetest.Dialects() {
		t.Run(dialect, func(t *testing.T) {
			var opts models.Options
			if dialect == "postgres" {
				opts.DatabaseURL = storetest.PostgresURL(t)
			} else {
				opts.SQLitePath = filepath.Join(t.TempDir(), "paygate.db")
			}
			opts.Secrets = storetest.Keyring()
			open := func() *models.Store {
				st, err := models.Open(opts)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = st.Close() })
				return st
			}
			st := open()
			if err := st.Migrate(); err != nil {
				t.Fatal(err)
			}
			worker := open() // another process's store: its writes are told only through the database
			h := newHarness(t, st)
			for end := time.Now().Add(10 * time.Second); !st.SessionChanges().Live(); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(end) {
					t.Fatal("the change feed never went live")
				}
			}
			m := h.signup()
			cs := h.session(m, h.link(m.TestKey, nil), "poll@example.com", evmB)
			path := "/api/checkout/session/" + cs.ID
			status := func() (string, int) {
				r := h.do("GET", path, "", nil)
				if r.Status != 200 {
					t.Fatalf("poll: %d %s", r.Status, r.Raw)
				}
				s := r.data()["session"].(map[string]any)
				return s["status"].(string), len(r.data()["events"].([]any))
			}
			if s, n := status(); s != models.StatusCreated || n != 1 {
				t.Fatalf("first poll: %s with %d entries", s, n)
			}
			// The database tells the creation too, a little later (SQLite's
			// change table is read every 20 ms): let it, then fill again.
			time.Sleep(100 * time.Millisecond)
			status()
			_, before := h.srv.PollCacheStats()
			for i := 0; i < 5; i++ {
				status()
			}
			if _, after := h.srv.PollCacheStats(); after-before != 5 {
				t.Fatalf("%d of 5 polls answered from memory", after-before)
			}

			// This process writes: the next poll shows it.
			if err := st.RecordSessionTransition(context.Background(), models.Transition{SessionID: cs.ID, EntryID: models.NewID(),
				Status: models.StatusWalletConnecting, Source: "client", At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if s, n := status(); s != models.StatusWalletConnecting || n != 2 {
				t.Fatalf("poll after this process's write: %s with %d entries", s, n)
			}

			// Another process writes: the poll shows it within the feed's delay.
			if err := worker.RecordSessionTransition(context.Background(), models.Transition{SessionID: cs.ID, EntryID: models.NewID(),
				Status: models.StatusWalletReady, Source: "client", At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			for {
				s, n := status()
				if s == models.StatusWalletReady && n == 3 {
					break
				}
				if time.Since(start) > 5*time.Second {
					t.Fatalf("another process's write not shown after 5 s: %s with %d entries", s, n)
				}
				time.Sleep(2 * time.Millisecond)
			}
			t.Logf("%s: another process's write shown after %v", dialect, time.Since(start).Round(time.Millisecond))
		})
	}
}
