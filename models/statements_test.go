package models_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestStatementsPerLifecycle counts the statements of an expired session's
// store work, from its outcome to its delivery answered, and on PostgreSQL
// its round trips (through a loopback proxy that counts what the client
// sends): the expiry storm is bound by them (issue 16's PostgreSQL storm).
// A statement or a round trip added to this path shows here first.
func TestStatementsPerLifecycle(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		f := newLinkFixture(t, st, "count@example.com", "checkout.expired")
		finish, deliver := expireAndDeliver(t, st, f.session("0x"+strings.Repeat("3", 64)).ID)
		// The outcome: the session read with its endpoints (a payment's
		// link is read on the general path only), then its history entry
		// (guarded by the session's row), its status, the event and the
		// delivery written together. The delivery: its target, its read
		// model and the attempt row.
		want := map[string][]string{
			"expiry":   {"SELECT checkout_sessions", "INSERT checkout_session_events", "UPDATE checkout_sessions", "INSERT events", "INSERT webhook_deliveries"},
			"delivery": {"SELECT webhook_endpoints", "UPDATE webhook_deliveries", "INSERT delivery_attempts"},
		}
		for name, got := range map[string][]string{"expiry": finish, "delivery": deliver} {
			var short []string
			for _, q := range got {
				short = append(short, shortStatement(q))
			}
			if strings.Join(short, ", ") != strings.Join(want[name], ", ") {
				t.Errorf("%s: %d statements\n got: %s\nwant: %s", name, len(got), strings.Join(short, ", "), strings.Join(want[name], ", "))
			}
		}
		if st.Dialect() != "postgres" {
			return
		}
		// Round trips: the expiry's read, then its writes sent together
		// (their own transaction); the delivery's read, then its two
		// writes sent together. A transaction of GORM calls took 8 and 5:
		// one a statement, BEGIN and COMMIT; the sixteenth part's
		// pipeline 4 and 2 (two reads, and COMMIT apart).
		proxy, sent := countingProxy(t, storetest.URL(t, st))
		via, err := models.Open(models.Options{DatabaseURL: proxy, Secrets: storetest.Keyring()})
		if err != nil {
			t.Fatal(err)
		}
		defer via.Close()
		// The first lifecycle opens the connection and has its statements
		// described (each a round trip of its own, once a connection).
		expireAndDeliver(t, via, f.session("0x"+strings.Repeat("4", 64)).ID)
		cs := f.session("0x" + strings.Repeat("5", 64))
		ctx := context.Background()
		before := sent()
		res, err := via.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusExpired,
			Source: "server", At: time.Now()})
		if err != nil || len(res.Deliveries) != 1 {
			t.Fatalf("finish: %v %v", res, err)
		}
		expiry := sent() - before
		before = sent()
		if _, err := via.DeliveryTarget(ctx, res.Deliveries[0]); err != nil {
			t.Fatal(err)
		}
		if err := via.RecordDeliveryAttempt(ctx, models.AttemptRecord{DeliveryID: res.Deliveries[0], Attempt: 1, ResponseStatus: 200,
			At: time.Now(), Status: models.DeliveryDelivered}); err != nil {
			t.Fatal(err)
		}
		if delivery := sent() - before; expiry != 2 || delivery != 2 {
			t.Errorf("round trips: expiry %d, delivery %d; want 2 and 2", expiry, delivery)
		}
		if got, err := st.CheckoutSession(ctx, cs.ID); err != nil || got.Status != models.StatusExpired {
			t.Fatalf("session after: %+v %v", got, err)
		}
	})
}

// expireAndDeliver expires a session and records its one delivery as
// answered, and answers the statements of each.
func expireAndDeliver(t *testing.T, st *models.Store, sessionID string) (finish, deliver []string) {
	t.Helper()
	ctx := context.Background()
	var res models.FinishResult
	finish = st.CaptureStatements(func() {
		var err error
		res, err = st.FinishSession(ctx, models.Outcome{SessionID: sessionID, EntryID: models.NewID(), Status: models.StatusExpired,
			Source: "server", At: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
	})
	if len(res.Deliveries) != 1 {
		t.Fatalf("deliveries %v", res.Deliveries)
	}
	deliver = st.CaptureStatements(func() {
		if _, err := st.DeliveryTarget(ctx, res.Deliveries[0]); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordDeliveryAttempt(ctx, models.AttemptRecord{DeliveryID: res.Deliveries[0], Attempt: 1, ResponseStatus: 200,
			At: time.Now(), Status: models.DeliveryDelivered}); err != nil {
			t.Fatal(err)
		}
	})
	return finish, deliver
}

// countingProxy forwards a loopback port to the PostgreSQL server of
// dbURL and counts the client's sends (each a read on the proxy: a client
// waiting for its answer before it sends again is one round trip a
// send). It answers dbURL through the proxy and the count so far.
func countingProxy(t *testing.T, dbURL string) (string, func() int64) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var sends atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				_ = client.Close()
				continue
			}
			wg.Add(2)
			go func() { // client to server, counted
				defer wg.Done()
				defer server.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := client.Read(buf)
					if n > 0 {
						sends.Add(1)
						if _, werr := server.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				defer client.Close()
				_, _ = io.Copy(client, server)
			}()
		}
	}()
	u.Host = ln.Addr().String()
	return u.String(), sends.Load
}

var (
	statementGroup = regexp.MustCompile(`\([^()]*\)`)
	statementTable = regexp.MustCompile(`(?i)^\s*(SELECT|INSERT|UPDATE|DELETE)\b(?:.*?\b(?:FROM|INTO)\s+|\s+)([a-z_]+)`)
)

// shortStatement names a statement by its verb and its table (the one
// outside any parenthesis: not a subquery's).
func shortStatement(q string) string {
	q = strings.NewReplacer("`", "", `"`, "").Replace(q)
	for {
		outer := statementGroup.ReplaceAllString(q, "")
		if outer == q {
			break
		}
		q = outer
	}
	m := statementTable.FindStringSubmatch(q)
	if m == nil {
		return q
	}
	return strings.ToUpper(m[1]) + " " + m[2]
}

// TestChainCursors: a stored scan cursor only moves forward (two workers
// store theirs), per network and kind.
func TestChainCursors(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		if got, err := st.ChainCursorOf(ctx, "base", "references"); err != nil || got != 0 {
			t.Fatalf("none stored: %d %v", got, err)
		}
		for _, b := range []uint64{10, 5, 20} {
			if err := st.SaveChainCursor(ctx, "base", "references", b); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.SaveChainCursor(ctx, "base", "transfers", 7); err != nil {
			t.Fatal(err)
		}
		if got, _ := st.ChainCursorOf(ctx, "base", "references"); got != 20 {
			t.Fatalf("references cursor %d, want 20", got)
		}
		if got, _ := st.ChainCursorOf(ctx, "base", "transfers"); got != 7 {
			t.Fatalf("transfers cursor %d, want 7", got)
		}
	})
}
