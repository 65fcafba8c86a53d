package models_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// changeRecorder collects what a feed tells.
type changeRecorder chan string

func (r changeRecorder) tell(id string) {
	select {
	case r <- id:
	default: // a full recorder drops; the test waits for specific ids
	}
}

// await waits for id to be told (ids told in between are skipped).
func (r changeRecorder) await(t *testing.T, what, id string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-r:
			if got == id {
				return
			}
		case <-deadline:
			t.Fatalf("%s: %q was never told", what, id)
		}
	}
}

func awaitLive(t *testing.T, f *models.SessionChanges, want bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); f.Live() != want; {
		if time.Now().After(end) {
			t.Fatalf("feed live = %v, want %v", f.Live(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSessionChangeFeed: every write of a session or its history is told,
// whether it went through the store's methods (at once, in process) or
// around them, as another process writes (through the database: the
// triggers of migration 0009); PostgreSQL's listener comes back after its
// connection is killed, and says so.
func TestSessionChangeFeed(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		m := newMerchant(t, st, "feed@x.io")
		link := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(500), Currency: "USD",
			Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
			WalletAddresses: models.StringMap{"base_sepolia": "0xabc"}, MerchantWalletAddress: "0xabc"}
		if err := st.CreatePaymentLink(ctx, link); err != nil {
			t.Fatal(err)
		}
		feed := st.SessionChanges()
		rec := make(changeRecorder, 1024)
		feed.Subscribe(rec.tell)
		done := make(chan struct{})
		go func() { defer close(done); feed.Run(ctx) }()
		defer func() { cancel(); <-done }()
		awaitLive(t, feed, true)

		n := 0
		newSession := func() *models.CheckoutSession {
			n++
			ref := fmt.Sprintf("0x%064x", n)
			cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: link.ID, Network: "base_sepolia",
				ExpectedAmount: money.FromCents(500), MerchantWalletAddress: "0xabc", TokenAddress: "0xdef", PaymentReference: &ref}
			if err := st.CreateCheckoutSession(ctx, cs); err != nil {
				t.Fatal(err)
			}
			return cs
		}
		cs := newSession()
		rec.await(t, "created", cs.ID)
		if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(),
			Status: models.StatusWalletReady, Source: "client", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		rec.await(t, "transition", cs.ID)
		if _, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusExpired,
			Source: "timer", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		rec.await(t, "outcome", cs.ID)

		// Around the store's methods: only the database can tell.
		other := newSession()
		rec.await(t, "created", other.ID)
		if err := st.ExecRaw("UPDATE checkout_sessions SET failure_message = ? WHERE id = ?", "by hand", other.ID); err != nil {
			t.Fatal(err)
		}
		rec.await(t, "raw update", other.ID)
		if err := st.ExecRaw("INSERT INTO checkout_session_events (id, session_id, status, source, chain, created_at) VALUES (?, ?, ?, ?, ?, ?)",
			models.NewID(), other.ID, models.StatusWalletConnecting, "client", "", time.Now().UTC()); err != nil {
			t.Fatal(err)
		}
		rec.await(t, "raw history entry", other.ID)

		if st.Dialect() != "postgres" {
			// SQLite: a reader starting over an emptied change table begins
			// at the sequence's high-water mark, not at the rows left.
			cancel()
			<-done
			if err := st.ExecRaw("DELETE FROM session_changes"); err != nil {
				t.Fatal(err)
			}
			ctx2, cancel2 := context.WithCancel(context.Background())
			done2 := make(chan struct{})
			go func() { defer close(done2); feed.Run(ctx2) }()
			defer func() { cancel2(); <-done2 }()
			awaitLive(t, feed, true)
			if err := st.ExecRaw("UPDATE checkout_sessions SET failure_message = ? WHERE id = ?", "after emptying", other.ID); err != nil {
				t.Fatal(err)
			}
			rec.await(t, "update after the table was emptied", other.ID)
			return
		}
		// The listener's connection dies: everything is forgotten, the
		// feed is not live until it listens again, then it tells again.
		pid := feed.ListenerPID()
		if err := st.ExecRaw("SELECT pg_terminate_backend(?)", pid); err != nil {
			t.Fatal(err)
		}
		rec.await(t, "connection lost", "")
		for end := time.Now().Add(10 * time.Second); feed.ListenerPID() == pid || !feed.Live(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("the listener did not come back")
			}
		}
		if err := st.ExecRaw("UPDATE checkout_sessions SET failure_message = ? WHERE id = ?", "again", other.ID); err != nil {
			t.Fatal(err)
		}
		rec.await(t, "update after the listener came back", other.ID)
	})
}
