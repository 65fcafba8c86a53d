package models_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// newHostedCheckout opens a hosted checkout of 5.00 USD on base_sepolia for
// m, with its single-use link.
func newHostedCheckout(t *testing.T, st *models.Store, m *models.Merchant, name string) (*models.HostedCheckout, *models.PaymentLink) {
	t.Helper()
	hc := &models.HostedCheckout{MerchantID: m.ID, Mode: models.ModeTest, Name: name, Amount: money.FromCents(500), Currency: "USD",
		ExpiresAt: time.Now().Add(time.Hour)}
	l := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: name, Amount: money.FromCents(500), Currency: "USD",
		Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
		WalletAddresses: models.StringMap{"base_sepolia": "0xabc"}, MerchantWalletAddress: "0xabc"}
	if err := st.CreateHostedCheckout(context.Background(), hc, l); err != nil {
		t.Fatal(err)
	}
	return hc, l
}

// TestHostedCheckoutPaidOnce: a hosted checkout is single-use. Two of its
// sessions (two tabs) both broadcast while it is open and both pay: the
// first to finish completes it; the second fails CHECKOUT_ALREADY_PAID and
// its payment is a duplicate exception naming both sessions, for the
// merchant to refund (before, both completed: two transactions and two
// checkout.completed of one checkout, and no exception). Run in turn and
// at once.
func TestHostedCheckoutPaidOnce(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		for _, together := range []bool{false, true} {
			m := newMerchant(t, st, fmt.Sprintf("once-%v@x.io", together))
			hc, l := newHostedCheckout(t, st, m, "Once")
			var sessions []*models.CheckoutSession
			for i := 1; i <= 2; i++ {
				ref := fmt.Sprintf("0x%064x", time.Now().UnixNano())
				h := fmt.Sprintf("0x%s%d", strings.Repeat(fmt.Sprint(i), 63), map[bool]int{false: 0, true: 1}[together])
				cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: l.ID, Network: "base_sepolia",
					ExpectedAmount: money.FromCents(500), MerchantWalletAddress: "0xabc", TokenAddress: "0xdef", PaymentReference: &ref,
					CheckoutID: &hc.ID, ExpiresAt: time.Now().Add(30 * time.Minute)}
				if err := st.CreateCheckoutSession(ctx, cs); err != nil {
					t.Fatal(err)
				}
				if err := st.ClaimSessionTxHash(ctx, cs.ID, "base_sepolia", h); err != nil {
					t.Fatal(err)
				}
				if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(),
					Status: models.StatusBroadcast, Source: "client", TxHash: h, At: time.Now()}); err != nil {
					t.Fatal(err)
				}
				sessions = append(sessions, cs)
			}
			results := make([]models.FinishResult, len(sessions))
			var wg sync.WaitGroup
			for i, cs := range sessions {
				finish := func() {
					res, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Source: "chain", At: time.Now(),
						Status: models.StatusComplete, ReceivedUnits: "5000000", Bound: true})
					if err != nil {
						t.Error(err)
					}
					results[i] = res
				}
				if together {
					wg.Add(1)
					go func() { defer wg.Done(); finish() }()
				} else {
					finish()
				}
			}
			wg.Wait()
			got, err := st.HostedCheckoutByID(ctx, hc.ID)
			if err != nil || got.Status != models.HostedComplete || got.SessionID == nil {
				t.Fatalf("hosted checkout %+v, %v", got, err)
			}
			winner := *got.SessionID
			for i, cs := range sessions {
				want, reason := models.StatusComplete, ""
				if cs.ID != winner {
					want, reason = models.StatusFailed, models.ReasonCheckoutPaid
				}
				if results[i].Status != want || results[i].Reason != reason {
					t.Errorf("together=%v: session %d answered %s %s, want %s %s", together, i, results[i].Status, results[i].Reason, want, reason)
				}
			}
			var txns, completed int64
			st.DB().Model(&models.Transaction{}).Where("merchant_id = ?", m.ID).Count(&txns)
			st.DB().Model(&models.Event{}).Where("merchant_id = ? AND type = ?", m.ID, "checkout.completed").Count(&completed)
			var exc []models.PaymentException
			st.DB().Where("merchant_id = ?", m.ID).Find(&exc)
			if txns != 1 || completed != 1 || len(exc) != 1 || exc[0].Kind != models.ExceptionDuplicate || len(exc[0].SessionIDs) != 2 ||
				exc[0].Amount != money.FromCents(500) {
				t.Fatalf("together=%v: %d transactions, %d checkout.completed, exceptions %+v", together, txns, completed, exc)
			}
		}
	})
}

// TestCancelDoesNotOverwriteAPaidCheckout: a session completing a hosted
// checkout between the cancel's read and its write (PostgreSQL, another
// connection) wins: the checkout stays complete and the cancel is a
// conflict. Before, the cancel wrote cancelled over the paid checkout and
// answered 200, and the merchant would not ship what the customer paid for.
func TestCancelDoesNotOverwriteAPaidCheckout(t *testing.T) {
	st := storetest.Open(t, "postgres")
	ctx := context.Background()
	m := newMerchant(t, st, "cancel-race@x.io")
	sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
	hc, _ := newHostedCheckout(t, st, m, "Race")
	var fired atomic.Bool
	if err := st.DB().Callback().Query().After("gorm:query").Register("test:complete_between", func(db *gorm.DB) {
		if db.Statement.Table == "hosted_checkouts" && fired.CompareAndSwap(false, true) {
			storetest.Exec(t, st, "UPDATE hosted_checkouts SET status = 'complete', session_id = ? WHERE id = ?", models.NewID(), hc.ID)
		}
	}); err != nil {
		t.Fatal(err)
	}
	_, err := st.CancelHostedCheckout(ctx, sc, hc.ID)
	if !fired.Load() {
		t.Fatal("the completion was not injected")
	}
	if !errors.Is(err, apperr.ErrConflict) {
		t.Errorf("cancel of a checkout paid meanwhile: %v, want a conflict", err)
	}
	now, err := st.HostedCheckoutOf(ctx, sc, hc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if now.Status != models.HostedComplete {
		t.Errorf("paid checkout stored as %q", now.Status)
	}
}

// TestCancelWithAPaymentOnItsWay: a hosted checkout one of whose sessions
// holds a broadcast transfer is not cancelled (409, nothing changed): the
// transfer completes the checkout when it confirms, so a "cancelled"
// answered meanwhile would be read as final while the customer's money
// lands. Once that session fails, the cancel goes through.
func TestCancelWithAPaymentOnItsWay(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "cancel-moving@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		hc, l := newHostedCheckout(t, st, m, "Moving")
		ref := fmt.Sprintf("0x%064x", time.Now().UnixNano())
		cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: l.ID, Network: "base_sepolia",
			ExpectedAmount: money.FromCents(500), MerchantWalletAddress: "0xabc", TokenAddress: "0xdef", PaymentReference: &ref,
			CheckoutID: &hc.ID, ExpiresAt: time.Now().Add(30 * time.Minute)}
		if err := st.CreateCheckoutSession(ctx, cs); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(),
			Status: models.StatusBroadcast, Source: "client", TxHash: "0x" + strings.Repeat("a", 64), At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.CancelHostedCheckout(ctx, sc, hc.ID); !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "being confirmed") {
			t.Fatalf("cancel with a payment on its way: %v", err)
		}
		if now, _ := st.HostedCheckoutOf(ctx, sc, hc.ID); now.Status != models.HostedOpen {
			t.Fatalf("the refused cancel left %q", now.Status)
		}
		// Past its expiry the checkout stays open while that payment is on
		// its way (it completes the checkout when it confirms; "expired"
		// would read as a lost order), and takes no new session.
		st.SetClock(func() time.Time { return hc.ExpiresAt.Add(time.Minute) })
		got, err := st.HostedCheckoutOf(ctx, sc, hc.ID)
		if list, _, lerr := st.HostedCheckouts(ctx, sc, models.Page{Limit: 10}); err != nil || lerr != nil || got.Status != models.HostedOpen ||
			len(list) != 1 || list[0].Status != models.HostedOpen {
			t.Fatalf("past its expiry with a payment on its way: %+v %v, list %+v %v", got, err, list, lerr)
		}
		late := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: l.ID, Network: "base_sepolia",
			ExpectedAmount: money.FromCents(500), MerchantWalletAddress: "0xabc", TokenAddress: "0xdef", CheckoutID: &hc.ID,
			ExpiresAt: hc.ExpiresAt.Add(time.Hour)}
		if err := st.CreateCheckoutSession(ctx, late); !errors.Is(err, apperr.ErrBadRequest) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("a session after the expiry: %v", err)
		}
		if _, err := st.CancelHostedCheckout(ctx, sc, hc.ID); !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "being confirmed") {
			t.Fatalf("cancel past the expiry with a payment on its way: %v", err)
		}
		if _, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Source: "chain", At: time.Now(),
			Status: models.StatusFailed, Reason: "TX_REVERTED", Message: "reverted"}); err != nil {
			t.Fatal(err)
		}
		// The payment failed: the checkout is expired, as it would have been.
		if got, _ := st.HostedCheckoutOf(ctx, sc, hc.ID); got.Status != models.HostedExpired {
			t.Fatalf("after the payment failed past the expiry: %q", got.Status)
		}
		st.SetClock(time.Now)
		if got, err := st.CancelHostedCheckout(ctx, sc, hc.ID); err != nil || got.Status != models.HostedCancelled {
			t.Fatalf("cancel after the payment failed: %+v %v", got, err)
		}
	})
}

// TestNoSessionAfterTheCancel: a hosted checkout cancelled after the
// session's creator read it open (the service reads it, then inserts)
// takes no session: the insert reads it again under its row lock. Before,
// the session opened, payable until the repairer's next pass.
func TestNoSessionAfterTheCancel(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "after-cancel@x.io")
		hc, l := newHostedCheckout(t, st, m, "Late")
		if _, err := st.CancelHostedCheckout(ctx, models.Scope{MerchantID: m.ID, Mode: models.ModeTest}, hc.ID); err != nil {
			t.Fatal(err)
		}
		ref := fmt.Sprintf("0x%064x", time.Now().UnixNano())
		cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: l.ID, Network: "base_sepolia",
			ExpectedAmount: money.FromCents(500), MerchantWalletAddress: "0xabc", TokenAddress: "0xdef", PaymentReference: &ref,
			CheckoutID: &hc.ID, ExpiresAt: time.Now().Add(30 * time.Minute)}
		if err := st.CreateCheckoutSession(ctx, cs); !errors.Is(err, apperr.ErrBadRequest) || !strings.Contains(err.Error(), "cancelled") {
			t.Fatalf("a session of a cancelled checkout: %v", err)
		}
		if open, err := st.OpenSessionsOfLink(ctx, l.ID); err != nil || len(open) != 0 {
			t.Fatalf("sessions of the link: %+v %v", open, err)
		}
	})
}
