package models_test

import (
	"context"
	"fmt"
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
		// The late payer is no wallet the session declared (it declared
		// none): the merchant names the destination.
		if _, err := st.CreateRefund(ctx, models.RefundRequest{Scope: sc, TransactionID: txn.ID, InitiatedBy: "merchant", Window: time.Hour}); err == nil ||
			!strings.Contains(err.Error(), "destinationWallet") {
			t.Fatalf("a refund of an unproven payer's payment without a destination: %v", err)
		}
		r, err := st.CreateRefund(ctx, models.RefundRequest{Scope: sc, TransactionID: txn.ID, InitiatedBy: "merchant", Window: time.Hour,
			Destination: "0x00000000000000000000000000000000000000bb"})
		if err != nil {
			t.Fatal(err)
		}
		if r.TaxAmount != money.Amount(1_596_638) || r.SubtotalAmount != money.Amount(8_403_362) {
			t.Errorf("refund %s of a 10.00 underpayment: subtotal %s, tax %s; want 8.403362 and 1.596638", r.Amount, r.SubtotalAmount, r.TaxAmount)
		}
	})
}

// TestRefundOfAShortPaymentNeedsItsPayerProven: a short payment becomes an
// underpaid exception whoever sent it. One a router made for the
// customer's wallet (the wallet sent the transaction, the router's
// address moved the USDC) has the router as its payer, and a refund of it
// defaulted to the router: the merchant's USDC sent there is lost to the
// customer. A refund without a destination is refused unless the payer is
// the wallet the session declared.
func TestRefundOfAShortPaymentNeedsItsPayerProven(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "router@x.io")
		sc := models.Scope{MerchantID: m.ID, Mode: models.ModeTest}
		const merchant, customer, router = "0x00000000000000000000000000000000000000aa", "0x00000000000000000000000000000000000000cc",
			"0x00000000000000000000000000000000000000dd"
		link := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(500), Currency: "USD",
			Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC",
			WalletAddresses: models.StringMap{"base_sepolia": merchant}, MerchantWalletAddress: merchant}
		if err := st.CreatePaymentLink(ctx, link); err != nil {
			t.Fatal(err)
		}
		for i, payer := range []string{router, strings.ToUpper(customer[:2]) + customer[2:]} {
			cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: link.ID, Network: "base_sepolia",
				Subtotal: money.FromCents(500), ExpectedAmount: money.FromCents(500), WalletAddress: customer,
				MerchantWalletAddress: merchant, TokenAddress: "0xdef", ExpiresAt: time.Now().Add(time.Hour)}
			if err := st.CreateCheckoutSession(ctx, cs); err != nil {
				t.Fatal(err)
			}
			h := fmt.Sprintf("0x%064x", i+1)
			broadcastHash(t, st, cs, h)
			if _, err := st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Source: "chain", At: time.Now(),
				Status: models.StatusFailed, Reason: models.ReasonInvalidTransfer, ReceivedUnits: "4000000", Payer: payer}); err != nil {
				t.Fatal(err)
			}
			excs, _, err := st.PaymentExceptions(ctx, sc, models.ExceptionFilter{TxHash: h}, models.Page{Limit: 5})
			if err != nil || len(excs) != 1 || excs[0].Kind != models.ExceptionUnderpaid {
				t.Fatalf("exceptions of the short payment from %s: %+v %v", payer, excs, err)
			}
			_, txn, _, err := st.ResolveException(ctx, sc, excs[0].ID, models.Resolution{SessionID: cs.ID})
			if err != nil {
				t.Fatal(err)
			}
			r, err := st.CreateRefund(ctx, models.RefundRequest{Scope: sc, TransactionID: txn.ID, InitiatedBy: "merchant", Window: time.Hour})
			switch payer {
			case router:
				if err == nil || !strings.Contains(err.Error(), "destinationWallet") {
					t.Fatalf("a refund of the router's short payment without a destination: %+v %v", r, err)
				}
			default:
				if err != nil || !strings.EqualFold(r.DestinationWallet, customer) {
					t.Fatalf("a refund of the declared wallet's short payment: %+v %v", r, err)
				}
			}
		}
	})
}
