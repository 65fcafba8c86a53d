package checkout_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// A subscription's last dunning session falls due at the subscription's
// final deadline. Past its expiry, until its workflow has stored an
// outcome, voiding it is a conflict (the subscription holds and asks
// again), not "expired": the workflow may have taken the customer's hash
// an instant before the expiry, written to the row a moment later, and
// answering expired cancelled a subscription whose renewal was being paid
// (found by a review in the nineteenth part of issue 16). Once expired,
// or with its hash stored, the answer is what the store says.
func TestVoidInvoiceSessionWaitsForAnEndingSession(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, "sqlite")
	cs := hubSession(t, st)
	storetest.Exec(t, st, "UPDATE checkout_sessions SET expires_at = ? WHERE id = ?", time.Now().Add(-time.Second).UTC(), cs.ID)
	svc := &checkout.Service{Store: st}
	if status, err := svc.VoidInvoiceSession(ctx, cs.ID); !errors.Is(err, apperr.ErrConflict) || status == models.StatusExpired {
		t.Fatalf("void of a session past its expiry, outcome not stored: %q %v; want a conflict", status, err)
	}
	if _, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusExpired,
		Source: "server", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if status, err := svc.VoidInvoiceSession(ctx, cs.ID); err != nil || status != models.StatusExpired {
		t.Fatalf("void once expired: %q %v", status, err)
	}
}
