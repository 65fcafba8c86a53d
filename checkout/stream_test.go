package checkout_test

import (
	"context"
	"testing"
	"time"

	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// hubSession stores a merchant and an open session of it.
func hubSession(t *testing.T, st *models.Store) *models.CheckoutSession {
	t.Helper()
	ctx := context.Background()
	m := &models.Merchant{Email: "hub@x.io", PasswordHash: "x", BusinessName: "Hub"}
	if _, err := st.CreateMerchant(ctx, m, &models.DashboardSession{TokenHash: "s"}, models.NewKey{Hash: "k", Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: models.NewID(), Network: "base_sepolia",
		ExpectedAmount: money.FromCents(100), MerchantWalletAddress: "0xabc", TokenAddress: "0xdef", ExpiresAt: time.Now().Add(time.Hour)}
	if err := st.CreateCheckoutSession(ctx, cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

// Fifty clients watching one session share one reader: the store is read
// about once per interval, not once per client.
func TestStatusHubSharesOneReader(t *testing.T) {
	st := storetest.Open(t, "sqlite")
	cs := hubSession(t, st)
	hub := &checkout.StatusHub{Service: &checkout.Service{Store: st}, Interval: 50 * time.Millisecond}
	var cancels []func()
	for range 50 {
		ch, cancel := hub.Subscribe(cs.ID)
		cancels = append(cancels, cancel)
		select {
		case s := <-ch:
			if s.Status != models.StatusCreated {
				t.Fatalf("snapshot %+v", s)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no snapshot")
		}
	}
	time.Sleep(500 * time.Millisecond)
	for _, c := range cancels {
		c()
	}
	if reads := hub.Reads(); reads > 20 {
		t.Fatalf("%d store reads for 50 clients over ~0.5 s at a 50 ms interval: the reader is not shared", reads)
	}
}

// A hub following the store's change feed shows a write at once, not at
// its next interval (an hour here).
func TestStatusHubFollowsChanges(t *testing.T) {
	st := storetest.Open(t, "sqlite")
	ctx, cancelFeed := context.WithCancel(context.Background())
	defer cancelFeed()
	cs := hubSession(t, st)
	feed := st.SessionChanges()
	go feed.Run(ctx)
	hub := &checkout.StatusHub{Service: &checkout.Service{Store: st}, Interval: time.Hour}
	hub.Follow(feed)
	ch, cancel := hub.Subscribe(cs.ID)
	defer cancel()
	next := func() checkout.Snapshot {
		select {
		case s := <-ch:
			return s
		case <-time.After(5 * time.Second):
			t.Fatal("no snapshot within 5 s (the interval is an hour)")
			return checkout.Snapshot{}
		}
	}
	if s := next(); s.Status != models.StatusCreated {
		t.Fatalf("first snapshot %+v", s)
	}
	if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(),
		Status: models.StatusWalletReady, Source: "client", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if s := next(); s.Status != models.StatusWalletReady {
		t.Fatalf("after the write: %+v", s)
	}
}
