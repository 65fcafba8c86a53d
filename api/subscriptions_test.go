package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/subscription"
	"github.com/paygate/paygate/temporaldev"
	"github.com/paygate/paygate/webhook"
	pworker "github.com/paygate/paygate/worker"
)

func subBody(extra map[string]any) map[string]any {
	b := map[string]any{"customerEmail": "sam@example.com", "customerWalletAddress": evmB, "productName": "Pro plan",
		"amount": "19.99", "billingInterval": "month", "network": "base_sepolia"}
	for k, v := range extra {
		if v == nil {
			delete(b, k)
		} else {
			b[k] = v
		}
	}
	return b
}

// TestCreateSubscriptionValidation: every refusal of POST /api/subscriptions
// names its field; a valid request answers 201 with SPEC.md's fields (the
// workflow is started by the repairer when Temporal is not reachable).
func TestCreateSubscriptionValidation(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		for _, tc := range []struct {
			field string
			body  map[string]any
		}{
			{"customerId", subBody(map[string]any{"customerEmail": nil})},
			{"customerId", subBody(map[string]any{"customerId": models.NewID()})},
			{"customerId", subBody(map[string]any{"customerEmail": nil, "customerId": models.NewID()})},
			{"customerEmail", subBody(map[string]any{"customerEmail": "not-an-email"})},
			{"productId", subBody(map[string]any{"productId": "prod_1"})},
			{"productName", subBody(map[string]any{"productName": nil})},
			{"amount", subBody(map[string]any{"amount": nil})},
			{"amount", subBody(map[string]any{"amount": "19.999"})},
			{"amount", subBody(map[string]any{"amount": 0})},
			{"billingInterval", subBody(map[string]any{"billingInterval": "hour"})},
			{"intervalCount", subBody(map[string]any{"intervalCount": 0})},
			{"intervalCount", subBody(map[string]any{"billingInterval": "year", "intervalCount": 4})},
			{"trialDays", subBody(map[string]any{"trialDays": -1})},
			{"trialDays", subBody(map[string]any{"trialDays": 731})},
			{"network", subBody(map[string]any{"network": "base"})},
			{"network", subBody(map[string]any{"network": nil})},
			{"billingModel", subBody(map[string]any{"billingModel": "pull"})},
			{"billingModel", subBody(map[string]any{"billingModel": "invoice"})},
			{"customerWalletAddress", subBody(map[string]any{"customerWalletAddress": "0x123"})},
			{"customerWalletAddress", subBody(map[string]any{"customerWalletAddress": nil})},
			{"customerWalletAddress", subBody(map[string]any{"network": "solana_devnet"})},
			{"merchantWalletAddress", subBody(map[string]any{"merchantWalletAddress": "nope"})},
			{"ammount", subBody(map[string]any{"ammount": "1"})},
		} {
			expectField(t, h.do("POST", "/api/subscriptions", m.TestKey, tc.body), tc.field)
		}
		// A catalog product prices the periods.
		prod := h.do("POST", "/api/v1/products", m.TestKey, map[string]any{"name": "Team plan", "price": "49.00"}).data()["id"].(string)
		expectField(t, h.do("POST", "/api/subscriptions", m.TestKey, subBody(map[string]any{"productId": prod})), "productId") // and an amount
		byProduct := h.do("POST", "/api/subscriptions", m.TestKey, subBody(map[string]any{"productId": prod, "productName": nil, "amount": nil}))
		expect(t, byProduct, 201, "")
		if byProduct.data()["productName"] != "Team plan" || byProduct.data()["amount"] != 49.0 {
			t.Fatalf("subscription of a product %s", byProduct.Raw)
		}
		// A merchant without a default wallet of the network's family.
		bare := h.signup()
		expect(t, h.do("PATCH", "/api/merchant", bare.Session, map[string]any{"wallets": map[string]any{"evm": ""}}), 200, "")
		expectField(t, h.do("POST", "/api/subscriptions", bare.TestKey, subBody(nil)), "merchantWalletAddress")

		r := h.do("POST", "/api/subscriptions", m.TestKey, subBody(map[string]any{"trialDays": 14, "intervalCount": 3}))
		expect(t, r, 201, "")
		d := r.data()
		if d["status"] != "trialing" || r.decimal("data", "amount") != "19.99" || d["billingInterval"] != "month" || d["intervalCount"] != float64(3) ||
			d["customerEmail"] != "sam@example.com" || d["customerWalletAddress"] != evmB || d["merchantWalletAddress"] != evmA ||
			d["billingModel"] != "push" || d["mode"] != "test" || d["cancelAtPeriodEnd"] != false || d["customerId"] == nil ||
			d["trialEnd"] != d["currentPeriodEnd"] {
			t.Fatalf("created %s", r.Raw)
		}
		start, _ := time.Parse(time.RFC3339, d["currentPeriodStart"].(string))
		end, _ := time.Parse(time.RFC3339, d["currentPeriodEnd"].(string))
		if end.Sub(start) != 14*24*time.Hour {
			t.Fatalf("trial %s to %s", start, end)
		}
		// The same e-mail again: the same customer, no new one.
		r2 := h.do("POST", "/api/subscriptions", m.TestKey, subBody(map[string]any{"customerWalletAddress": nil}))
		expect(t, r2, 201, "")
		if r2.data()["customerId"] != d["customerId"] || r2.data()["status"] != "renewal_pending" || r2.data()["customerWalletAddress"] != evmB {
			t.Fatalf("second subscription of the customer %s", r2.Raw)
		}
		// By customer id, paying to an explicit wallet.
		r3 := h.do("POST", "/api/subscriptions", m.TestKey, subBody(map[string]any{"customerEmail": nil, "customerId": d["customerId"],
			"merchantWalletAddress": strings.ToLower(evmB), "billingInterval": "week"}))
		expect(t, r3, 201, "")
		if r3.data()["merchantWalletAddress"] != evmB {
			t.Fatalf("merchant wallet not checksummed: %s", r3.Raw)
		}
		if list := h.do("GET", "/api/subscriptions", m.TestKey, nil).list(); len(list) != 4 {
			t.Fatalf("%d listed", len(list))
		}
		if c := h.do("GET", "/api/customers", m.TestKey, nil).list(); len(c) != 1 {
			t.Fatalf("%d customers", len(c))
		}
	})
}

// TestSubscriptionsOnTemporal runs the routes against a real Temporal dev
// server and the workers: every PATCH answer is the workflow's, and the read
// model says the same; a subscription without a trial gets its first
// invoice's checkout session; the Web UI's search attributes find it.
func TestSubscriptionsOnTemporal(t *testing.T) {
	srv := temporaldev.StartForTest(t)
	c, err := client.Dial(client.Options{HostPort: srv.Address(), Namespace: srv.Namespace(), Logger: quietTemporal{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	st := storetest.Open(t, "sqlite")
	queue := "subs-" + models.NewID()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := &checkout.Service{Store: st, Temporal: c, Networks: chain.DefaultRegistry(), TaskQueue: queue, Lifetime: 30 * time.Minute,
		NotFoundWindow: time.Hour, Log: log}
	ws, err := pworker.New(c, pworker.Config{CheckoutQueue: queue, WebhookQueue: queue + "-webhooks", Store: st,
		Verifier: chain.NewMultiVerifier(chain.DefaultRegistry()), Sender: webhook.NewSender(webhook.Policy{AllowLoopbackHTTP: true}),
		Sessions: svc, PublicBaseURL: "https://pay.example"})
	if err != nil {
		t.Fatal(err)
	}
	if err := pworker.Start(ws); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pworker.Stop(ws) })
	subs := &subscription.Service{Store: st, Temporal: c, Networks: chain.DefaultRegistry(), TaskQueue: queue, Log: log}
	h := newHarness(t, st, func(d *api.Deps) { d.Subscriptions = subs; svc.Hasher = d.Hasher; d.Checkout = svc })
	m := h.signup()
	// A receiver on loopback for every event, so the events list holds the
	// payloads (checked against their schemas at the end).
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	if err := st.CreateWebhookEndpoint(context.Background(), &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest,
		URL: hook.URL, Events: models.StringList{"*"}, Secret: "whsec_dGVzdC1zZWNyZXQtdGVzdC1zZWNyZXQ=", Active: true}); err != nil {
		t.Fatal(err)
	}

	r := h.do("POST", "/api/subscriptions", m.TestKey, subBody(map[string]any{"trialDays": 14}))
	expect(t, r, 201, "")
	id := r.str("data", "id")
	patch := func(action string) resp {
		return h.do("PATCH", "/api/subscriptions", m.TestKey, map[string]any{"subscriptionId": id, "action": action})
	}
	get := func() map[string]any { return h.do("GET", "/api/subscriptions/"+id, m.TestKey, nil).data() }
	agree := func(r resp) map[string]any {
		t.Helper()
		expect(t, r, 200, "")
		g := get()
		if g["status"] != r.data()["status"] || g["cancelAtPeriodEnd"] != r.data()["cancelAtPeriodEnd"] || r.data()["subscriptionId"] != id {
			t.Fatalf("answer %s, read model %v", r.Raw, g)
		}
		return g
	}

	g := agree(patch("pause"))
	if g["status"] != "paused" || g["pausedAt"] == nil {
		t.Fatalf("paused %v", g)
	}
	expectField(t, patch("pause"), "action")
	endBefore := r.str("data", "currentPeriodEnd")
	g = agree(patch("resume"))
	if g["status"] != "trialing" || g["pausedAt"] != nil || g["currentPeriodEnd"] == endBefore || g["trialEnd"] != g["currentPeriodEnd"] {
		t.Fatalf("resumed %v (end was %s)", g, endBefore)
	}
	g = agree(patch("cancel"))
	if g["status"] != "trialing" || g["cancelAtPeriodEnd"] != true {
		t.Fatalf("cancel %v", g)
	}
	g = agree(patch("cancel_now"))
	if g["status"] != "canceled" || g["canceledAt"] == nil || g["cancelReason"] != "requested" {
		t.Fatalf("cancel_now %v", g)
	}
	expectField(t, patch("resume"), "action")
	// Cancelling a canceled subscription again answers it as it is.
	if again := patch("cancel"); again.Status != 200 || again.str("data", "status") != "canceled" {
		t.Fatalf("cancel again: %d %s", again.Status, again.Raw)
	}

	// Without a trial the first invoice is due at once: its session is an
	// ordinary checkout session of the subscription's amount.
	r = h.do("POST", "/api/subscriptions", m.TestKey, subBody(map[string]any{"amount": "7.50"}))
	expect(t, r, 201, "")
	id = r.str("data", "id")
	var sessionID string
	deadline := time.Now().Add(20 * time.Second)
	for sessionID == "" {
		if s, _ := get()["latestCheckoutSessionId"].(string); s != "" {
			sessionID = s
		} else if time.Now().After(deadline) {
			t.Fatalf("no invoice session: %v", get())
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	sess := h.do("GET", "/api/checkout/session/"+sessionID, "", nil)
	expect(t, sess, 200, "")
	if s := sess.data()["session"].(map[string]any); s["expectedAmount"] != 7.5 || s["status"] != "payment_session_created" ||
		s["walletAddress"] != evmB || s["paymentReference"] == nil {
		t.Fatalf("invoice session %s", sess.Raw)
	}
	// The link pricing it is not the merchant's to see.
	if links := h.do("GET", "/api/payment-links", m.TestKey, nil).list(); len(links) != 0 {
		t.Fatalf("links %v", links)
	}
	// cancel while the renewal is due: the period is over, it ends now,
	// and the invoice's session is voided.
	g = agree(patch("cancel"))
	if g["status"] != "canceled" || g["cancelAtPeriodEnd"] != true {
		t.Fatalf("cancel while due %v", g)
	}
	waitFor(t, 10*time.Second, func() bool {
		s := h.do("GET", "/api/checkout/session/"+sessionID, "", nil).data()["session"].(map[string]any)
		return s["status"] == "cancelled"
	})

	// A subscription whose workflow did not start (Temporal was down when
	// it was created) is started by the repairer, from its row.
	offline := &subscription.Service{Store: st, Networks: chain.DefaultRegistry(), TaskQueue: queue, Log: log}
	orphan, err := offline.Create(context.Background(), subscription.CreateRequest{Scope: models.Scope{MerchantID: m.ID, Mode: models.ModeTest},
		CustomerEmail: "orphan@example.com", CustomerWalletAddress: evmB, ProductName: "Pro", Amount: 500000, BillingInterval: "week",
		IntervalCount: 1, TrialDays: 3, Network: "base_sepolia", BillingModel: models.BillingPush})
	if err != nil || orphan.WorkflowStarted {
		t.Fatalf("offline create %+v %v", orphan, err)
	}
	if n, err := subs.RepairOnce(context.Background(), 0); err != nil || n != 1 {
		t.Fatalf("repair: %d %v", n, err)
	}
	if n, _ := subs.RepairOnce(context.Background(), 0); n != 0 {
		t.Fatalf("second repair started %d", n)
	}
	id = orphan.ID
	if g := agree(patch("cancel")); g["status"] != "trialing" || g["cancelAtPeriodEnd"] != true {
		t.Fatalf("repaired subscription's cancel %v", g)
	}

	// Every subscription.* payload matches its schema in the document.
	seen := map[string]int{}
	for _, x := range h.do("GET", "/api/events?limit=100", m.TestKey, nil).list() {
		d := x.(map[string]any)
		typ := d["event"].(string)
		if !strings.HasPrefix(typ, "subscription.") {
			continue
		}
		seen[typ]++
		validateEventData(t, typ, d["payload"].(map[string]any)["data"])
	}
	for _, typ := range []string{"subscription.created", "subscription.updated", "subscription.renewal_due", "subscription.canceled"} {
		if seen[typ] == 0 {
			t.Errorf("no %s among %v", typ, seen)
		}
	}

	// Searchable in the Web UI by status, merchant and customer.
	q := fmt.Sprintf(`SubscriptionStatus="canceled" AND MerchantId=%q AND CustomerId=%q`, m.ID, r.str("data", "customerId"))
	waitFor(t, 20*time.Second, func() bool {
		res, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: q})
		return err == nil && len(res.Executions) == 2
	})
}

// eventSchemas names the OpenAPI schema of each subscription event's data.
var eventSchemas = map[string]string{
	"subscription.created": "SubscriptionCreatedEvent", "subscription.updated": "SubscriptionUpdatedEvent",
	"subscription.renewal_due": "SubscriptionRenewalDueEvent", "subscription.past_due": "SubscriptionPastDueEvent",
	"subscription.renewed": "SubscriptionRenewedEvent", "subscription.canceled": "SubscriptionCanceledEvent",
}

// validateEventData checks an event's data against its documented schema.
func validateEventData(t *testing.T, typ string, data any) {
	t.Helper()
	doc, err := api.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	ref, ok := doc.Components.Schemas[eventSchemas[typ]]
	if !ok || ref.Value == nil {
		t.Fatalf("no schema for %s", typ)
	}
	if err := ref.Value.VisitJSON(data, openapi3.MultiErrors()); err != nil {
		t.Fatalf("%s data does not match %s: %v\n%v", typ, eventSchemas[typ], err, data)
	}
}

func waitFor(t *testing.T, within time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not reached within %s", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type quietTemporal struct{}

func (quietTemporal) Debug(string, ...any) {}
func (quietTemporal) Info(string, ...any)  {}
func (quietTemporal) Warn(string, ...any)  {}
func (quietTemporal) Error(string, ...any) {}
