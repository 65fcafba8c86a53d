package models_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestFinishSessionRetriedAfterCommit: the FinishSession activity retried
// after its commit (its worker was SIGKILLed before reporting, as the chaos
// suite does) answers what was stored: the same status and the same
// deliveries, with no second event, delivery, transaction or customer count.
// It used to fail forever with "record not found" (the event look-up kept
// the fresh event id as a condition), leaving the workflow stuck and its
// deliveries undispatched.
func TestFinishSessionRetriedAfterCommit(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		f := newLinkFixture(t, st, "retry@example.com", "checkout.expired", "checkout.completed", "payment.completed")
		m, newSession := f.m, f.session
		twice := func(o models.Outcome) {
			t.Helper()
			first, err := st.FinishSession(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			again, err := st.FinishSession(ctx, o)
			if err != nil {
				t.Fatalf("FinishSession retried after its commit: %v", err)
			}
			if again.Status != first.Status || len(first.Deliveries) == 0 || !slices.Equal(again.Deliveries, first.Deliveries) {
				t.Fatalf("retry answered %+v, first %+v", again, first)
			}
		}

		expired := newSession("0x" + strings.Repeat("1", 64))
		twice(models.Outcome{SessionID: expired.ID, EntryID: models.NewID(), Status: models.StatusExpired, Source: "server", At: time.Now()})

		paid := newSession("0x" + strings.Repeat("2", 64))
		hash := "0x" + strings.Repeat("ab", 32)
		if err := st.ClaimSessionTxHash(ctx, paid.ID, "base_sepolia", hash); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: paid.ID, EntryID: models.NewID(),
			Status: models.StatusBroadcast, Source: "client", TxHash: hash, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		twice(models.Outcome{SessionID: paid.ID, EntryID: models.NewID(), Status: models.StatusComplete, Source: "chain",
			ReceivedUnits: "5000000", Bound: true, At: time.Now()})

		ds, _, err := st.WebhookDeliveries(ctx, models.Scope{MerchantID: m.ID, Mode: models.ModeTest}, models.DeliveryFilter{}, models.Page{Limit: 100})
		if err != nil || len(ds) != 3 {
			t.Fatalf("deliveries %d (%v), want 3: one expired, one completed, one payment", len(ds), err)
		}
		txs, _, err := st.Transactions(ctx, models.Scope{MerchantID: m.ID, Mode: models.ModeTest}, models.TransactionFilter{}, models.Page{Limit: 10})
		if err != nil || len(txs) != 1 {
			t.Fatalf("transactions %d (%v), want 1", len(txs), err)
		}
		cs, _, err := st.Customers(ctx, models.Scope{MerchantID: m.ID, Mode: models.ModeTest}, models.Page{Limit: 10})
		if err != nil || len(cs) != 1 || cs[0].TransactionCount != 1 {
			t.Fatalf("customers %+v (%v): one, counted once", cs, err)
		}
	})
}
