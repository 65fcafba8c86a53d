package models_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// TestHotQueriesUseIndexes runs the store's hot reads on PostgreSQL (the
// status poll, API-key authentication, the link behind a checkout, the
// delivery target, and the periodic scans of the repairer, the delivery
// reconciler, the watcher and the refund watcher) over tables of a few thousand finished rows,
// captures the SQL they send and checks with EXPLAIN ANALYZE that each
// reads only about the rows it answers: no node may throw away more than
// maxRemoved rows it read (a sequential scan, or an index that only orders
// the rows). The plans are logged (go test -v) for the README.
func TestHotQueriesUseIndexes(t *testing.T) {
	st := storetest.Open(t, "postgres")
	ctx := context.Background()
	now := time.Now()
	id := models.NewID()

	// One real row per hot table, cloned into a few thousand, so the
	// planner weighs indexes over tables with rows and statistics.
	m := newMerchant(t, st, "explain@example.com")
	link := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "Explain", Amount: money.FromCents(100), Currency: "USD",
		Network: "base_sepolia", Networks: models.StringList{"base_sepolia"}, Token: "USDC", Active: true,
		WalletAddresses: models.StringMap{}, MerchantWalletAddress: "0x" + strings.Repeat("1", 40)}
	if err := st.CreatePaymentLink(ctx, link); err != nil {
		t.Fatal(err)
	}
	cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: link.ID, Network: "base_sepolia", WalletType: "evm",
		WalletAddress: "0x" + strings.Repeat("2", 40), ExpectedAmount: money.FromCents(100), MerchantWalletAddress: link.MerchantWalletAddress,
		TokenAddress: "0x" + strings.Repeat("3", 40), ExpiresAt: now.Add(time.Hour)}
	if err := st.CreateCheckoutSession(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordSessionTransition(ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusExpired,
		Source: "server", At: now}); err != nil {
		t.Fatal(err)
	}
	ep := &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/x",
		Events: models.StringList{"checkout.completed"}, Secret: "whsec_dGVzdA=="}
	if err := st.CreateWebhookEndpoint(ctx, ep); err != nil {
		t.Fatal(err)
	}
	if _, err := st.EmitEvent(ctx, m.ID, models.ModeTest, models.EventSpec{Type: "checkout.completed",
		Key: "checkout.completed:" + models.NewID(), Data: map[string]any{"livemode": false}}); err != nil {
		t.Fatal(err)
	}
	txn := &models.Transaction{MerchantID: m.ID, Mode: models.ModeTest, Amount: money.FromCents(100), Token: "USDC", Network: "base_sepolia",
		TxHash: "0x" + strings.Repeat("4", 64), WalletAddress: cs.WalletAddress, MerchantWalletAddress: link.MerchantWalletAddress,
		Verification: models.VerificationVerified}
	if err := st.RecordTransaction(ctx, txn); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateRefund(ctx, models.RefundRequest{Scope: models.Scope{MerchantID: m.ID, Mode: models.ModeTest}, TransactionID: txn.ID,
		Amount: money.FromCents(1), InitiatedBy: models.InitiatedByAPI, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	uuidOf := "gen_random_uuid()::text"
	for _, c := range []struct {
		table string
		set   map[string]string
	}{
		{"merchants", map[string]string{"id": uuidOf, "email": "'m' || g || '@example.com'"}},
		{"api_keys", map[string]string{"id": uuidOf, "key_hash": "md5(g::text) || md5((g + 1)::text)", "merchant_id": uuidOf}},
		{"payment_links", map[string]string{"id": uuidOf}},
		{"checkout_sessions", map[string]string{"id": uuidOf, "status": "'expired'", "workflow_started": "true"}},
		{"checkout_session_events", map[string]string{"id": uuidOf, "session_id": uuidOf}},
		{"webhook_endpoints", map[string]string{"id": uuidOf, "merchant_id": uuidOf}},
		{"webhook_deliveries", map[string]string{"id": uuidOf, "event_id": uuidOf, "status": "'delivered'"}},
		{"refunds", map[string]string{"id": uuidOf, "status": "'succeeded'"}},
	} {
		if err := st.CloneRows(c.table, 5000, c.set); err != nil {
			t.Fatal(err)
		}
	}
	calls := map[string]func(){
		"CheckoutSession":               func() { _, _ = st.CheckoutSession(ctx, id) },
		"SessionHistory":                func() { _, _ = st.SessionHistory(ctx, id) },
		"SessionByReference":            func() { _, _ = st.SessionByReference(ctx, "0x"+strings.Repeat("ab", 32)) },
		"APIKeyByHash":                  func() { _, _ = st.APIKeyByHash(ctx, strings.Repeat("f", 64)) },
		"PaymentLinkByID":               func() { _, _ = st.PaymentLinkByID(ctx, id) },
		"Merchant":                      func() { _, _ = st.Merchant(ctx, id) },
		"DeliveryTarget":                func() { _, _ = st.DeliveryTarget(ctx, id) },
		"OpenSessionsOfLink":            func() { _, _ = st.OpenSessionsOfLink(ctx, id) },
		"SessionsWithoutWorkflow":       func() { _, _ = st.SessionsWithoutWorkflow(ctx, now, 100) },
		"OverdueSessions":               func() { _, _ = st.OverdueSessions(ctx, now, now, 100) },
		"OpenSessionsOfDeletedLinks":    func() { _, _ = st.OpenSessionsOfDeletedLinks(ctx, 100) },
		"OpenSessionsOfClosedCheckouts": func() { _, _ = st.OpenSessionsOfClosedCheckouts(ctx, 100) },
		"OpenSessionsOfPaidInvoices":    func() { _, _ = st.OpenSessionsOfPaidInvoices(ctx, 100) },
		"PendingDeliveries":             func() { _, _ = st.PendingDeliveries(ctx, "", now, 100) },
		"UnattemptedDeliveries":         func() { _, _ = st.UnattemptedDeliveries(ctx, now, 100) },
		"RefundSourcesAwaitingTransfer": func() { _, _ = st.RefundSourcesAwaitingTransfer(ctx, now) },
		"RefundsAwaitingTransferFrom": func() {
			_, _ = st.RefundsAwaitingTransferFrom(ctx, "base_sepolia", link.MerchantWalletAddress, cs.WalletAddress, true, money.FromCents(1), now, 50)
		},
		"RefundHashTaken":            func() { _, _ = st.RefundHashTaken(ctx, "", "base_sepolia", "0x"+strings.Repeat("ab", 32)) },
		"RefundHashTaken (merchant)": func() { _, _ = st.RefundHashTaken(ctx, link.MerchantID, "base_sepolia", "0x"+strings.Repeat("ab", 32)) },
		"ExpiredRefundsAwaitingTransferFrom": func() {
			_, _ = st.ExpiredRefundsAwaitingTransferFrom(ctx, "base_sepolia", link.MerchantWalletAddress, cs.WalletAddress, true, money.FromCents(1), now, 50)
		},
	}
	for name, call := range calls {
		qs := st.CaptureQueries(call)
		if len(qs) == 0 {
			t.Errorf("%s: no query captured", name)
		}
		for _, q := range qs {
			if !strings.Contains(q.SQL, "$") {
				q.Vars = nil // a subquery captured on its own carries its parent's values
			}
			plan, err := st.Explain(q)
			if err != nil {
				t.Fatalf("%s: explain %s: %v", name, q.SQL, err)
			}
			var nodes []map[string]any
			if err := json.Unmarshal([]byte(plan), &nodes); err != nil {
				t.Fatal(err)
			}
			var kinds []string
			removed := 0.0
			walkPlan(nodes[0]["Plan"].(map[string]any), func(n map[string]any) {
				kind, _ := n["Node Type"].(string)
				if ix, ok := n["Index Name"].(string); ok {
					kind += " on " + ix
				}
				r, _ := n["Rows Removed by Filter"].(float64)
				rr, _ := n["Rows Removed by Index Recheck"].(float64)
				if r+rr > 0 {
					kind += fmt.Sprintf(" (%.0f rows read and dropped)", r+rr)
				}
				removed = max(removed, r+rr)
				kinds = append(kinds, kind)
			})
			t.Logf("%s: %s\n    %s", name, q.SQL, strings.Join(kinds, " > "))
			if removed > maxRemoved {
				t.Errorf("%s reads rows it does not answer: %s\n    %s", name, q.SQL, strings.Join(kinds, " > "))
			}
		}
	}
}

// maxRemoved is how many rows a node of a hot query may read and drop.
const maxRemoved = 50

func walkPlan(n map[string]any, f func(map[string]any)) {
	f(n)
	kids, _ := n["Plans"].([]any)
	for _, k := range kids {
		walkPlan(k.(map[string]any), f)
	}
}
