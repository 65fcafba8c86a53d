package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

// paidTransaction stores a verified transaction of a checkout session of
// 29.75 (subtotal 25.00, tax 4.75) paid by evmB to the merchant's evmA.
func (h *harness) paidTransaction(m merchant, mode models.Mode) string {
	h.t.Helper()
	ctx := context.Background()
	network := "base_sepolia"
	if mode == models.ModeLive {
		network = "base"
	}
	cs := &models.CheckoutSession{MerchantID: m.ID, Mode: mode, PaymentLinkID: models.NewID(), Network: network, WalletType: "evm",
		Subtotal: money.FromCents(2500), Tax: money.FromCents(475), ExpectedAmount: money.FromCents(2975),
		MerchantWalletAddress: evmA, TokenAddress: evmB, ExpiresAt: time.Now().Add(time.Hour)}
	if err := h.store.CreateCheckoutSession(ctx, cs); err != nil {
		h.t.Fatal(err)
	}
	tx := &models.Transaction{MerchantID: m.ID, Mode: mode, SessionID: &cs.ID, Amount: money.FromCents(2975), Token: "USDC",
		Network: network, TxHash: "0x" + strings.Repeat("7", 32) + strings.ReplaceAll(models.NewID(), "-", ""),
		WalletAddress: evmB, MerchantWalletAddress: evmA, Verification: models.VerificationVerified}
	if err := h.store.RecordTransaction(ctx, tx); err != nil {
		h.t.Fatal(err)
	}
	return tx.ID
}

// TestRefundRoutes: dashboard and API-key refunds of one transaction (a
// part, then the remainder by default), their split and fields, the
// transaction's refundedAmount and refunds, listing with filters and
// cursor, and the 400s of bad input and of more than the remainder.
func TestRefundRoutes(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		a := h.signup()
		txID := h.paidTransaction(a, models.ModeTest)

		r := h.do("POST", "/api/v1/refunds", a.Session, map[string]any{"transactionId": txID, "amount": "14.875", "reason": "damaged"})
		expect(t, r, http.StatusCreated, "")
		first := r.str("data", "id")
		if r.str("data", "status") != "pending" || r.str("data", "initiatedBy") != "merchant" || r.decimal("data", "amount") != "14.875" ||
			r.decimal("data", "subtotalAmount") != "12.50" || r.decimal("data", "taxAmount") != "2.375" || r.decimal("data", "feeReversed") != "0.00" ||
			r.str("data", "destinationWallet") != evmB || r.str("data", "sourceWallet") != evmA || r.str("data", "mode") != "test" ||
			r.str("data", "reason") != "damaged" || r.data()["txHash"] != nil || r.str("data", "amountUnits") != "14875000" ||
			r.str("data", "tokenAddress") != "0x036CbD53842c5426634e7929541eC2318f3dCF7e" || r.str("data", "network") != "base_sepolia" {
			t.Fatalf("dashboard refund %s", r.Raw)
		}
		// The API key's refund takes the remainder by default.
		r = h.do("POST", "/api/refunds", a.TestKey, map[string]any{"transactionId": txID})
		expect(t, r, http.StatusCreated, "")
		second := r.str("data", "id")
		if r.str("data", "initiatedBy") != "api" || r.decimal("data", "amount") != "14.875" || r.data()["reason"] != nil {
			t.Fatalf("API refund %s", r.Raw)
		}
		expectField(t, h.do("POST", "/api/refunds", a.TestKey, map[string]any{"transactionId": txID}), "amount")
		expectField(t, h.do("POST", "/api/refunds", a.TestKey, map[string]any{"transactionId": txID, "amount": 0.01}), "amount")

		// The transaction shows them, oldest first, and what is left.
		tx := h.do("GET", "/api/transactions/"+txID, a.TestKey, nil)
		expect(t, tx, http.StatusOK, "")
		refunds, _ := tx.data()["refunds"].([]any)
		if len(refunds) != 2 || refunds[0].(map[string]any)["id"] != first || tx.decimal("data", "refundedAmount") != "0.00" ||
			tx.decimal("data", "refundableAmount") != "0.00" {
			t.Fatalf("transaction %s", tx.Raw)
		}
		list := h.do("GET", "/api/transactions?limit=10", a.TestKey, nil)
		if items := list.list(); len(items) != 1 || len(items[0].(map[string]any)["refunds"].([]any)) != 2 {
			t.Fatalf("transaction list %s", list.Raw)
		}

		// Lists: newest first, by cursor, by status and transaction.
		page := h.do("GET", "/api/refunds?limit=1", a.TestKey, nil)
		expect(t, page, http.StatusOK, "")
		if len(page.list()) != 1 || page.Body["hasMore"] != true || page.list()[0].(map[string]any)["id"] != second {
			t.Fatalf("first page %s", page.Raw)
		}
		page = h.do("GET", "/api/v1/refunds?limit=1&starting_after="+second, a.Session, nil)
		if len(page.list()) != 1 || page.Body["hasMore"] != false || page.list()[0].(map[string]any)["id"] != first {
			t.Fatalf("second page %s", page.Raw)
		}
		if got := h.do("GET", "/api/refunds?status=succeeded", a.TestKey, nil).list(); len(got) != 0 {
			t.Fatalf("succeeded filter: %v", got)
		}
		if got := h.do("GET", "/api/refunds?transactionId="+txID+"&status=pending", a.TestKey, nil).list(); len(got) != 2 {
			t.Fatalf("transaction filter: %v", got)
		}
		expectField(t, h.do("GET", "/api/refunds?status=done", a.TestKey, nil), "status")
		expectField(t, h.do("GET", "/api/v1/refunds?mode=prod", a.Session, nil), "mode")
		expect(t, h.do("GET", "/api/v1/refunds/"+first, a.Session, nil), http.StatusOK, "")
		expect(t, h.do("GET", "/api/v1/refunds/"+first+"?mode=live", a.Session, nil), http.StatusNotFound, "NOT_FOUND")
		expect(t, h.do("GET", "/api/refunds/"+second, a.TestKey, nil), http.StatusOK, "")
		expectField(t, h.do("GET", "/api/refunds/nope", a.TestKey, nil), "id")

		// Bad input names its field.
		other := h.paidTransaction(a, models.ModeTest)
		expectField(t, h.do("POST", "/api/refunds", a.TestKey, map[string]any{}), "transactionId")
		expectField(t, h.do("POST", "/api/refunds", a.TestKey, map[string]any{"transactionId": other, "amount": "1.0000001"}), "amount")
		expectField(t, h.do("POST", "/api/refunds", a.TestKey, map[string]any{"transactionId": other, "destinationWallet": "nope"}), "destinationWallet")
		expectField(t, h.do("POST", "/api/refunds", a.TestKey, map[string]any{"transactionId": other, "destinationWallet": evmA}), "destinationWallet")
		expectField(t, h.do("POST", "/api/refunds", a.TestKey, map[string]any{"transactionId": other, "mode": "test"}), "mode")
		expectField(t, h.do("POST", "/api/refunds", a.TestKey, map[string]any{"transactionId": other, "amount": 1, "extra": 1}), "extra")
		expectField(t, h.do("POST", "/api/v1/refunds?mode=test", a.Session, map[string]any{"transactionId": other, "mode": "live"}), "mode")
		expect(t, h.do("POST", "/api/refunds", a.TestKey, map[string]any{"transactionId": models.NewID()}), http.StatusNotFound, "NOT_FOUND")
		// A destination of one's choosing.
		r = h.do("POST", "/api/refunds", a.TestKey, map[string]any{"transactionId": other, "amount": 1, "destinationWallet": "0x1111111111111111111111111111111111111111"})
		expect(t, r, http.StatusCreated, "")
		if r.str("data", "destinationWallet") != "0x1111111111111111111111111111111111111111" || r.decimal("data", "taxAmount") != "0.159663" {
			t.Fatalf("refund to another wallet %s", r.Raw)
		}
		// An API key never reaches a dashboard route; a dashboard session may
		// act on the key routes (in its ?mode), as the dashboard does.
		expect(t, h.do("POST", "/api/v1/refunds", a.TestKey, map[string]any{"transactionId": other}), http.StatusUnauthorized, "UNAUTHORIZED")
		expect(t, h.do("GET", "/api/refunds", a.Session, nil), http.StatusOK, "")
	})
}

// TestRefundsFeatureFlag: on in test mode by default, off in live mode (403)
// until an operator enables it; disabled turns test mode off too. The
// merchant's profile shows the flag per mode.
func TestRefundsFeatureFlag(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		a := h.withLive(h.signup())
		live := h.paidTransaction(a, models.ModeLive)
		test := h.paidTransaction(a, models.ModeTest)
		flags := func() map[string]any {
			m := h.do("GET", "/api/merchant", a.Session, nil)
			expect(t, m, http.StatusOK, "")
			f, _ := m.data()["refundsEnabled"].(map[string]any)
			return f
		}
		if f := flags(); f["test"] != true || f["live"] != false {
			t.Fatalf("default flags %v", f)
		}
		expect(t, h.do("POST", "/api/refunds", a.LiveKey, map[string]any{"transactionId": live}), http.StatusForbidden, "FORBIDDEN")
		expect(t, h.do("POST", "/api/v1/refunds?mode=live", a.Session, map[string]any{"transactionId": live}), http.StatusForbidden, "FORBIDDEN")
		expect(t, h.do("POST", "/api/v1/refunds", a.Session, map[string]any{"transactionId": live, "mode": "live"}), http.StatusForbidden, "FORBIDDEN")
		// Test mode: the live transaction is not found there.
		expect(t, h.do("POST", "/api/v1/refunds", a.Session, map[string]any{"transactionId": live}), http.StatusNotFound, "NOT_FOUND")

		if _, err := h.store.SetRefundsEnabled(ctx, a.ID, true); err != nil {
			t.Fatal(err)
		}
		if f := flags(); f["test"] != true || f["live"] != true {
			t.Fatalf("enabled flags %v", f)
		}
		r := h.do("POST", "/api/v1/refunds", a.Session, map[string]any{"transactionId": live, "mode": "live", "amount": 5})
		expect(t, r, http.StatusCreated, "")
		if r.str("data", "mode") != "live" || r.str("data", "network") != "base" ||
			r.str("data", "tokenAddress") != "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913" {
			t.Fatalf("live refund %s", r.Raw)
		}
		// A pending refund holds its amount in the settlement balance.
		bal := h.do("GET", "/api/settlements/balance", a.Session, nil)
		expect(t, bal, http.StatusOK, "")
		b := bal.list()[0].(map[string]any)
		if b["collected"] != 29.75 || b["refundsPending"] != 5.0 || b["refunded"] != 0.0 || b["available"] != 24.75 {
			t.Fatalf("balance %s", bal.Raw)
		}

		if _, err := h.store.SetRefundsEnabled(ctx, a.ID, false); err != nil {
			t.Fatal(err)
		}
		if f := flags(); f["test"] != false || f["live"] != false {
			t.Fatalf("disabled flags %v", f)
		}
		r = h.do("POST", "/api/refunds", a.TestKey, map[string]any{"transactionId": test})
		expect(t, r, http.StatusForbidden, "FORBIDDEN")
		if !strings.Contains(r.str("hint"), "paygate refunds enable") {
			t.Fatalf("hint %s", r.Raw)
		}
	})
}

// TestRefundSubmitRoute: the read model answers what is decided without a
// workflow: a malformed hash is a 400, the same hash again is answered as
// the first time, another hash for a succeeded refund or a refund past its
// window is a 409.
func TestRefundSubmitRoute(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		a := h.signup()
		txID := h.paidTransaction(a, models.ModeTest)
		sc := models.Scope{MerchantID: a.ID, Mode: models.ModeTest}
		r, err := h.store.CreateRefund(ctx, models.RefundRequest{Scope: sc, TransactionID: txID, Amount: money.FromCents(100),
			InitiatedBy: models.InitiatedByAPI, Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		expectField(t, h.do("POST", "/api/refunds/"+r.ID+"/submit", a.TestKey, map[string]any{"txHash": "0x12"}), "txHash")
		expectField(t, h.do("POST", "/api/refunds/"+r.ID+"/submit", a.TestKey, map[string]any{}), "txHash")
		if err := h.store.SubmitRefundTx(ctx, r.ID, hash64, time.Now()); err != nil {
			t.Fatal(err)
		}
		same := h.do("POST", "/api/v1/refunds/"+r.ID+"/submit", a.Session, map[string]any{"txHash": strings.ToUpper(hash64[2:])})
		expect(t, same, http.StatusOK, "")
		if same.str("data", "status") != "submitted" || same.str("data", "txHash") != hash64 || same.data()["submittedAt"] == nil {
			t.Fatalf("same hash again %s", same.Raw)
		}
		// Another hash for a submitted refund is a replacement, the
		// workflow's to decide; for a succeeded one the read model refuses.
		if _, err := h.store.FinishRefund(ctx, models.RefundOutcome{RefundID: r.ID, Status: models.RefundSucceeded, TxHash: hash64, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		expect(t, h.do("POST", "/api/refunds/"+r.ID+"/submit", a.TestKey, map[string]any{"txHash": "0x" + strings.Repeat("d", 64)}),
			http.StatusConflict, "CONFLICT")

		late, err := h.store.CreateRefund(ctx, models.RefundRequest{Scope: sc, TransactionID: txID, Amount: money.FromCents(100),
			InitiatedBy: models.InitiatedByAPI, Window: time.Nanosecond})
		if err != nil {
			t.Fatal(err)
		}
		r2 := h.do("POST", "/api/refunds/"+late.ID+"/submit", a.TestKey, map[string]any{"txHash": "0x" + strings.Repeat("e", 64)})
		expect(t, r2, http.StatusConflict, "CONFLICT")
		if !strings.Contains(r2.str("message"), "window") {
			t.Fatalf("late submit %s", r2.Raw)
		}
	})
}
