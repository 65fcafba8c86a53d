package models_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestPipeline: statements sent together are one transaction on either
// store. Failing at any statement, nothing of it stays, and the
// connection it ran on serves the next call (on PostgreSQL, a pool of one:
// a connection left in its transaction would hold the next write where no
// other connection sees it). A guard refusing (a NOT NULL value read by a
// subquery that finds no row) is such a failure; the guard's wait on a
// row another transaction holds is TestOutcomeWaitsForTheRowLock's.
func TestPipeline(t *testing.T) {
	for _, d := range storetest.Dialects() {
		t.Run(d, func(t *testing.T) {
			base := storetest.Open(t, d)
			st := base
			if d == "postgres" {
				one, err := models.Open(models.Options{DatabaseURL: storetest.URL(t, base), Secrets: storetest.Keyring(), Pool: models.Pool{MaxOpen: 1, MaxIdle: 1}})
				if err != nil {
					t.Fatal(err)
				}
				defer one.Close()
				st = one
			}
			ctx := context.Background()
			insert := func(id string) []any {
				return []any{"INSERT INTO checkout_session_events (id, session_id, status, source, created_at) VALUES (?, ?, ?, ?, ?)",
					id, "pipeline", "expired", "server", time.Now().UTC()}
			}
			// guarded takes its session id from the entry id itself, found
			// only if an entry of that id has the status given.
			guarded := func(id, status string) []any {
				return []any{"INSERT INTO checkout_session_events (id, session_id, status, source, created_at) VALUES (?, " +
					"(SELECT session_id FROM checkout_session_events WHERE id = ? AND status = ?), ?, ?, ?)",
					models.NewID(), id, status, "expired", "server", time.Now().UTC()}
			}
			stored := func(id string) bool {
				t.Helper()
				return storetest.Exec(t, base, "UPDATE checkout_session_events SET chain = chain WHERE id = ?", id) == 1
			}
			ids := func(n int) []string {
				var out []string
				for range n {
					out = append(out, models.NewID())
				}
				return out
			}

			// A statement failing (a duplicate key, a guard's NOT NULL)
			// after one that wrote: nothing of the pipeline stays.
			for _, failing := range []func(b []string) []any{
				func(b []string) []any { return insert(b[1]) },
				func(b []string) []any { return guarded(b[0], "cancelled") },
			} {
				b := ids(2)
				_, err := st.PipelineForTest(ctx, insert(b[0]), insert(b[1]), failing(b))
				if !models.IsConstraintViolation(err) {
					t.Fatalf("failing statement: %v", err)
				}
				if stored(b[0]) || stored(b[1]) {
					t.Fatal("a failed pipeline's rows stayed")
				}
			}
			// The next pipelines commit, seen from another connection; a
			// guard that finds its row passes.
			c := ids(3)
			if rows, err := st.PipelineForTest(ctx, insert(c[0]), insert(c[1]), guarded(c[0], "expired")); err != nil || rows[0] != 1 || rows[1] != 1 || rows[2] != 1 {
				t.Fatalf("committed: %v %v", rows, err)
			}
			if rows, err := st.PipelineForTest(ctx, insert(c[2])); err != nil || rows[0] != 1 {
				t.Fatalf("next: %v %v", rows, err)
			}
			for _, id := range c {
				if !stored(id) {
					t.Fatalf("%s not stored", id)
				}
			}
		})
	}
}

// TestConcurrentOutcomes: two outcomes of one session stored at once agree:
// one is stored, both calls answer it with the same deliveries, and there
// is one outcome in the history, one event and one delivery. Two plain
// outcomes (an expiry and a cancel) stored by transactions of reads and
// writes both read the session open on PostgreSQL and both wrote: the
// status overwritten, two contradicting events sent. A payment (the
// general path) beside an expiry (the plain path) did the same while the
// general path read the session without its row lock.
func TestConcurrentOutcomes(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newLinkFixture(t, st, "race@example.com", "checkout.expired", "checkout.cancelled", "checkout.completed")
		for i := range 40 {
			pair := []string{models.StatusExpired, models.StatusCancelled}
			if i%2 == 1 {
				pair[1] = models.StatusComplete
			}
			cs := f.session(fmt.Sprintf("0x%064x", i+1))
			var wg sync.WaitGroup
			res := make([]models.FinishResult, 2)
			errs := make([]error, 2)
			for j, status := range pair {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res[j], errs[j] = st.FinishSession(ctx, raceOutcome(cs, status, 1<<20+i))
				}()
			}
			wg.Wait()
			if errs[0] != nil || errs[1] != nil {
				t.Fatalf("round %d %v: %v %v", i, pair, errs[0], errs[1])
			}
			if res[0].Status != res[1].Status || len(res[0].Deliveries) != 1 || strings.Join(res[0].Deliveries, ",") != strings.Join(res[1].Deliveries, ",") {
				t.Fatalf("round %d %v: the calls disagree: %+v and %+v", i, pair, res[0], res[1])
			}
			got, err := st.CheckoutSession(ctx, cs.ID)
			if err != nil || got.Status != res[0].Status {
				t.Fatalf("round %d %v: stored %v (%v), answered %s", i, pair, got.Status, err, res[0].Status)
			}
			if n := storetest.Exec(t, st, "UPDATE webhook_deliveries SET attempts = attempts WHERE session_id = ?", cs.ID); n != 1 {
				t.Fatalf("round %d %v: %d deliveries, want 1", i, pair, n)
			}
			if n := storetest.Exec(t, st, "UPDATE events SET type = type WHERE type LIKE ? AND key LIKE ?", "checkout.%", "%:"+cs.ID); n != 1 {
				t.Fatalf("round %d %v: %d checkout events, want 1", i, pair, n)
			}
			if n := storetest.Exec(t, st, "UPDATE checkout_session_events SET chain = chain WHERE session_id = ? AND status IN (?, ?, ?)",
				cs.ID, models.StatusExpired, models.StatusCancelled, models.StatusComplete); n != 1 {
				t.Fatalf("round %d %v: %d outcome entries in the history, want 1", i, pair, n)
			}
		}
	})
}

// raceOutcome is an outcome of cs with status: an expiry or a cancel from
// the server, or the session paid in full by a bound transfer whose hash
// is made of n.
func raceOutcome(cs *models.CheckoutSession, status string, n int) models.Outcome {
	o := models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: status, Source: "server", At: time.Now()}
	if status == models.StatusComplete {
		o.Source, o.Chain, o.Bound = "chain", "base_sepolia", true
		o.PaidBy, o.Payer = fmt.Sprintf("0x%064x", n), "0x"+strings.Repeat("12", 20)
		o.ReceivedUnits = strconv.FormatInt(int64(cs.ExpectedAmount), 10)
	}
	return o
}

// TestOutcomeWaitsForTheRowLock: an outcome stored while another
// transaction holds the session's row (another outcome being stored, not
// yet committed) waits for it, then answers what it committed and writes
// nothing of its own: the plain path's guard and the general path's read
// both lock the row. Without the lock the plain path wrote its entry, event
// and delivery beside the other outcome, and the general path overwrote it.
// PostgreSQL only: SQLite's one writer runs one transaction at a time.
func TestOutcomeWaitsForTheRowLock(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		if st.Dialect() != "postgres" {
			t.Skip("SQLite has no row locks: its one writer runs one transaction at a time")
		}
		ctx := context.Background()
		f := newLinkFixture(t, st, "lock@example.com", "checkout.expired", "checkout.cancelled", "checkout.completed")
		conn, err := pgx.Connect(ctx, storetest.URL(t, st))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		for i, status := range []string{models.StatusExpired, models.StatusComplete} {
			cs := f.session(fmt.Sprintf("0x%064x", 1<<16+i))
			o := raceOutcome(cs, status, 1<<24+i)
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "UPDATE checkout_sessions SET status = $1 WHERE id = $2", models.StatusCancelled, cs.ID); err != nil {
				t.Fatal(err)
			}
			type answer struct {
				res models.FinishResult
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := st.FinishSession(ctx, o)
				done <- answer{res, err}
			}()
			// Until the call waits on this transaction's lock.
			for deadline := time.Now().Add(10 * time.Second); ; {
				var waiting int
				if err := tx.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))").Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting > 0 {
					break
				}
				select {
				case a := <-done:
					t.Fatalf("%s: answered without waiting for the row's lock: %+v %v", status, a.res, a.err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: the call never waited on the row's lock", status)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			var a answer
			select {
			case a = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no answer after the commit", status)
			}
			if a.err != nil || a.res.Status != models.StatusCancelled {
				t.Fatalf("%s: answered %+v %v; want the committed cancel", status, a.res, a.err)
			}
			if n := storetest.Exec(t, st, "UPDATE checkout_session_events SET chain = chain WHERE session_id = ? AND status <> ?", cs.ID, models.StatusCreated); n != 0 {
				t.Errorf("%s: %d history entries written after the other outcome", status, n)
			}
			if n := storetest.Exec(t, st, "UPDATE events SET type = type WHERE type = ? AND key LIKE ?", "checkout."+map[string]string{
				models.StatusExpired: "expired", models.StatusComplete: "completed"}[status], "%:"+cs.ID); n != 0 {
				t.Errorf("%s: its event was written after the other outcome", status)
			}
			if n := storetest.Exec(t, st, "UPDATE transactions SET status = status WHERE session_id = ?", cs.ID); n != 0 {
				t.Errorf("%s: a transaction was recorded for a cancelled session", status)
			}
		}
	})
}
