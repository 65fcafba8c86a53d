package models_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// TestRefundOfAResolvedUnderpayment: an underpaid transfer (10.00 of
// 29.75 = 25.00 + 4.75 tax) resolved into its session is refunded in full:
// its tax part is the session's share of what arrived, 4.75 × 10.00 /
// 29.75 = 1.596638 (it reported the session's whole 4.75, 47.5% of the
// refund).
func TestRefundOfAResolvedUnderpayment(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "split@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		link := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(2500), Currency: "USD",
			Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
			WalletAddresses: models.StringMap{"base_sepolia": "0x00000000000000000000000000000000000000aa"}, MerchantWalletAddress: "0x00000000000000000000000000000000000000aa"}
		if err := st.CreatePaymentLink(ctx, link); err != nil {
			t.Fatal(err)
		}
		cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: link.ID, Network: "base_sepolia",
			Subtotal: money.FromCents(2500), Tax: money.FromCents(475), ExpectedAmount: money.FromCents(2975),
			MerchantWalletAddress: "0x00000000000000000000000000000000000000aa", TokenAddress: "0xdef", ExpiresAt: time.Now().Add(time.Hour)}
		if err := st.CreateCheckoutSession(ctx, cs); err != nil {
			t.Fatal(err)
		}
		if _, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Source: "server", At: time.Now(), Status: models.StatusExpired}); err != nil {
			t.Fatal(err)
		}
		h := "0x" + strings.Repeat("e", 64)
		if _, err := st.OpenException(ctx, &models.PaymentException{MerchantID: m.ID, Mode: models.ModeTest, Network: "base_sepolia", TxHash: h,
			Kind: models.ExceptionLate, Amount: money.FromCents(1000), ExpectedAmount: money.FromCents(2975),
			PayerAddress: "0x00000000000000000000000000000000000000bb", MerchantWalletAddress: cs.MerchantWalletAddress,
			SessionIDs: models.StringList{cs.ID}}); err != nil {
			t.Fatal(err)
		}
		excs, _, err := st.PaymentExceptions(ctx, sc, models.ExceptionFilter{}, models.Page{Limit: 10})
		if err != nil || len(excs) != 1 {
			t.Fatal(err, len(excs))
		}
		_, txn, _, err := st.ResolveException(ctx, sc, excs[0].ID, models.Resolution{SessionID: cs.ID})
		if err != nil {
			t.Fatal(err)
		}
		r, err := st.CreateRefund(ctx, models.RefundRequest{Scope: sc, TransactionID: txn.ID, InitiatedBy: "merchant", Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if r.TaxAmount != money.Amount(1_596_638) || r.SubtotalAmount != money.Amount(8_403_362) {
			t.Errorf("refund %s of a 10.00 underpayment: subtotal %s, tax %s; want 8.403362 and 1.596638", r.Amount, r.SubtotalAmount, r.TaxAmount)
		}
	})
}
