package subscription

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// voider voids sessions in the store, as the checkout service does for
// sessions without a broadcast.
type voider struct {
	st     *models.Store
	voided []string
}

func (v *voider) OpenInvoiceSession(context.Context, activities.InvoiceSessionRequest) (activities.InvoiceSession, error) {
	return activities.InvoiceSession{}, errors.New("not used")
}

func (v *voider) InvoiceSessionStatus(ctx context.Context, id string) (string, error) {
	cs, err := v.st.CheckoutSession(ctx, id)
	if err != nil {
		return "", err
	}
	return cs.Status, nil
}

func (v *voider) VoidInvoiceSession(ctx context.Context, id string) (string, error) {
	cs, err := v.st.CheckoutSession(ctx, id)
	if err != nil {
		return "", err
	}
	if models.TerminalStatus(cs.Status) {
		return cs.Status, nil
	}
	if cs.TxHash != nil {
		return cs.Status, apperr.Conflict("a payment of this session is being confirmed")
	}
	if _, err := v.st.FinishSession(ctx, models.Outcome{SessionID: id, EntryID: models.NewID(), Status: models.StatusCancelled,
		Source: "merchant", At: time.Now()}); err != nil {
		return "", err
	}
	v.voided = append(v.voided, id)
	return models.StatusCancelled, nil
}

// TestCancelStoppedVoidsEverySession: a subscription whose workflow an
// operator terminated, canceled, has every open invoice session voided,
// the older ones too (before, only the latest: an older dunning window's
// session stayed payable, and its payment was recorded for a canceled
// subscription); while one of them holds a transfer the cancel is a 409
// and nothing is voided (found by an audit helper).
func TestCancelStoppedVoidsEverySession(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := &models.Merchant{Email: "stopped@x.io", PasswordHash: "x", BusinessName: "Shop"}
		if _, err := st.CreateMerchant(ctx, m, &models.DashboardSession{TokenHash: "s-stopped"},
			models.NewKey{Hash: "k-stopped", Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
			t.Fatal(err)
		}
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		newSub := func() (*models.Subscription, []*models.CheckoutSession) {
			sub := &models.Subscription{MerchantID: m.ID, Mode: models.ModeTest, Status: models.SubPastDue, Network: "base_sepolia",
				BillingModel: "push", Amount: money.FromCents(500), BillingInterval: "month"}
			if err := st.CreateSubscription(ctx, sub); err != nil {
				t.Fatal(err)
			}
			l := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "Club", Amount: money.FromCents(500), Currency: "USD",
				Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC", Active: true,
				WalletAddresses: models.StringMap{"base_sepolia": "0xabc"}, MerchantWalletAddress: "0xabc", SubscriptionID: &sub.ID}
			if err := st.CreatePaymentLink(ctx, l); err != nil {
				t.Fatal(err)
			}
			var sessions []*models.CheckoutSession
			for range 2 {
				ref := fmt.Sprintf("0x%064x", time.Now().UnixNano())
				cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: l.ID, Network: "base_sepolia",
					ExpectedAmount: money.FromCents(500), MerchantWalletAddress: "0xabc", TokenAddress: "0xdef", PaymentReference: &ref,
					SubscriptionID: &sub.ID, ExpiresAt: time.Now().Add(time.Hour)}
				if err := st.CreateCheckoutSession(ctx, cs); err != nil {
					t.Fatal(err)
				}
				sessions = append(sessions, cs)
			}
			latest := sessions[1].ID
			storetest.Exec(t, st, "UPDATE subscriptions SET latest_session_id = ? WHERE id = ?", latest, sub.ID)
			return sub, sessions
		}
		v := &voider{st: st}
		svc := &Service{Store: st, Sessions: v}

		sub, sessions := newSub()
		got, err := svc.cancelStopped(ctx, sc, sub.ID)
		if err != nil || got.Status != models.SubCanceled || len(v.voided) != 2 {
			t.Fatalf("cancel: %+v %v; voided %v", got, err, v.voided)
		}
		for _, cs := range sessions {
			if now, _ := st.CheckoutSession(ctx, cs.ID); now.Status != models.StatusCancelled {
				t.Fatalf("session %s is %s after the cancel", cs.ID, now.Status)
			}
		}

		// The older session's transfer is on its way: 409, nothing voided.
		v.voided = nil
		sub, sessions = newSub()
		if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: sessions[0].ID, EntryID: models.NewID(),
			Status: models.StatusBroadcast, Source: "client", TxHash: "0x" + strings.Repeat("a", 64), At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.cancelStopped(ctx, sc, sub.ID); !errors.Is(err, apperr.ErrConflict) || len(v.voided) != 0 {
			t.Fatalf("cancel with an older session's payment on its way: %v; voided %v", err, v.voided)
		}
		if now, _ := st.Subscription(ctx, sc, sub.ID); now.Status == models.SubCanceled {
			t.Fatal("canceled with a payment on its way")
		}
	})
}
