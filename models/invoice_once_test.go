package models_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestInvoicePaidOnce: of the sessions opened for one subscription invoice
// (the first, the past-due one, a reminder's) only one completes. A
// second that pays (an older session's transfer confirmed after the next
// was opened, or a customer paying both links) fails INVOICE_ALREADY_PAID
// and its payment is a duplicate exception naming both sessions, for the
// merchant to refund (before, both completed: the customer paid one
// renewal twice and nothing flagged it). A session of the next invoice
// completes as usual. The open sessions of a paid invoice are listed for
// the repairer to cancel. Run in turn and at once.
func TestInvoicePaidOnce(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		for _, together := range []bool{false, true} {
			m := newMerchant(t, st, fmt.Sprintf("inv-once-%v@x.io", together))
			sub := newSubscription(t, st, m, "payer@example.com")
			l, err := st.SubscriptionLink(ctx, sub.ID)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			open := func(invoice int) *models.CheckoutSession {
				n++
				ref := fmt.Sprintf("0x%064x", time.Now().UnixNano())
				cs := &models.CheckoutSession{ID: models.NewID(), SubscriptionID: &sub.ID, InvoiceNumber: invoice, PaymentReference: &ref,
					MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: l.ID, Network: "base_sepolia", WalletType: "evm",
					ExpectedAmount: sub.Amount, Subtotal: sub.Amount, MerchantWalletAddress: subWallet, TokenAddress: subWallet,
					ExpiresAt: time.Now().Add(time.Hour)}
				if _, _, err := st.CreateInvoiceSession(ctx, cs); err != nil {
					t.Fatal(err)
				}
				return cs
			}
			broadcast := func(cs *models.CheckoutSession) {
				h := fmt.Sprintf("0x%s%d", strings.Repeat(fmt.Sprint(n%10), 63), map[bool]int{false: 0, true: 1}[together])
				n++
				if err := st.ClaimSessionTxHash(ctx, cs.ID, "base_sepolia", h); err != nil {
					t.Fatal(err)
				}
				if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(),
					Status: models.StatusBroadcast, Source: "client", TxHash: h, At: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			pay := func(cs *models.CheckoutSession) models.FinishResult {
				res, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Source: "chain", At: time.Now(),
					Status: models.StatusComplete, ReceivedUnits: fmt.Sprint(sub.Amount.Units()), Bound: true})
				if err != nil {
					t.Error(err)
				}
				return res
			}
			// Invoice 1: the first session and the past-due one, both paid;
			// a reminder's session still open.
			first, pastDue, reminder := open(1), open(1), open(1)
			broadcast(first)
			broadcast(pastDue)
			results := make([]models.FinishResult, 2)
			var wg sync.WaitGroup
			for i, cs := range []*models.CheckoutSession{first, pastDue} {
				if together {
					wg.Add(1)
					go func() { defer wg.Done(); results[i] = pay(cs) }()
				} else {
					results[i] = pay(cs)
				}
			}
			wg.Wait()
			var winner, loser int
			switch {
			case results[0].Status == models.StatusComplete && results[1].Status == models.StatusFailed:
				winner, loser = 0, 1
			case results[1].Status == models.StatusComplete && results[0].Status == models.StatusFailed:
				winner, loser = 1, 0
			default:
				t.Fatalf("together=%v: the two payments of invoice 1 answered %+v and %+v", together, results[0], results[1])
			}
			if !together && winner != 0 {
				t.Fatalf("in turn, the first to finish completes: %+v", results)
			}
			sessions := []*models.CheckoutSession{first, pastDue}
			if r := results[loser]; r.Reason != models.ReasonInvoicePaid || r.SubscriptionID != sub.ID {
				t.Fatalf("together=%v: the second payment answered %+v", together, r)
			}
			var exc []models.PaymentException
			st.DB().Where("merchant_id = ?", m.ID).Find(&exc)
			if len(exc) != 1 || exc[0].Kind != models.ExceptionDuplicate || exc[0].Amount != sub.Amount ||
				len(exc[0].SessionIDs) != 2 || exc[0].SessionIDs[0] != sessions[loser].ID || exc[0].SessionIDs[1] != sessions[winner].ID {
				t.Fatalf("together=%v: exceptions %+v", together, exc)
			}
			// The reminder's session is for the repairer to cancel; the
			// next invoice's is not, and it completes.
			next := open(2)
			stale, err := st.OpenSessionsOfPaidInvoices(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			var listed []string
			for _, cs := range stale {
				if cs.MerchantID == m.ID {
					listed = append(listed, cs.ID)
				}
			}
			if len(listed) != 1 || listed[0] != reminder.ID {
				t.Fatalf("together=%v: open sessions of paid invoices %v, want only %s", together, listed, reminder.ID)
			}
			broadcast(next)
			if r := pay(next); r.Status != models.StatusComplete {
				t.Fatalf("together=%v: invoice 2's payment answered %+v", together, r)
			}
			var txns, completed int64
			st.DB().Model(&models.Transaction{}).Where("merchant_id = ?", m.ID).Count(&txns)
			st.DB().Model(&models.Event{}).Where("merchant_id = ? AND type = ?", m.ID, "checkout.completed").Count(&completed)
			if txns != 2 || completed != 2 {
				t.Fatalf("together=%v: %d transactions, %d checkout.completed; want one each invoice", together, txns, completed)
			}
		}
	})
}
