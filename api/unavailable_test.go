package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/refund"
	"github.com/paygate/paygate/subscription"
	"github.com/paygate/paygate/temporaldev"
	"github.com/paygate/paygate/webhook"
	pworker "github.com/paygate/paygate/worker"
)

type silentTemporalLogger struct{}

func (silentTemporalLogger) Debug(string, ...any) {}
func (silentTemporalLogger) Info(string, ...any)  {}
func (silentTemporalLogger) Warn(string, ...any)  {}
func (silentTemporalLogger) Error(string, ...any) {}

// TestUpdatesAnswer503WithoutWorkers runs the API on a real Temporal dev
// server whose checkout task queue nobody polls (the workers are down): the
// session's workflow is started, but no update can be answered. Submit, the
// wallet report, the customer's and the merchant's cancel, a refund's hash
// and a subscription's action each answer within
// the update timeout with 503 SERVICE_UNAVAILABLE in SPEC's error envelope
// and a Retry-After header (every response is checked against the OpenAPI
// document), instead of hanging until the client gives up. Once a worker
// polls, the retried submit succeeds.
func TestUpdatesAnswer503WithoutWorkers(t *testing.T) {
	ts := temporaldev.StartForTest(t)
	c, err := client.Dial(client.Options{HostPort: ts.Address(), Namespace: ts.Namespace(), Logger: silentTemporalLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	const timeout = 1500 * time.Millisecond
	queue := "nobody-polls-" + models.NewID()
	h := newHarness(t, storetest.Open(t, "sqlite"), func(d *api.Deps) {
		d.Checkout.Temporal = c
		d.Checkout.TaskQueue = queue
		d.Checkout.UpdateTimeout = timeout
		d.Refunds = &refund.Service{Store: d.Store, Temporal: c, Networks: chain.DefaultRegistry(), TaskQueue: queue,
			Window: time.Hour, NotFoundWindow: time.Hour, UpdateTimeout: timeout, Log: d.Logger}
		d.Subscriptions = &subscription.Service{Store: d.Store, Temporal: c, Networks: chain.DefaultRegistry(), TaskQueue: queue,
			UpdateTimeout: timeout, Log: d.Logger}
	})
	m := h.signup()
	link := h.link(m.TestKey, nil)
	q := h.do("POST", "/api/checkout/quote", "", map[string]any{"linkId": link, "network": "base_sepolia",
		"customer": map[string]any{"country": "DE", "address": "Berlin"}})
	expect(t, q, 200, "")
	newSession := func() string {
		r := h.do("POST", "/api/checkout/session", "", sessionRequest(link, q, evmB, "base_sepolia"))
		expect(t, r, 201, "")
		return r.str("data", "id")
	}
	id := newSession()
	// The mark is written behind the request (checkout.Service.markLater).
	var cs *models.CheckoutSession
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cs, err = h.store.CheckoutSession(t.Context(), id)
		if err == nil && cs.WorkflowStarted || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || !cs.WorkflowStarted {
		t.Fatalf("the session's workflow must be started (no worker needed for that): %+v %v", cs, err)
	}
	// A refund's hash and a subscription's action are workflow updates too.
	txID := h.paidTransaction(m, models.ModeTest)
	rf := h.do("POST", "/api/refunds", m.TestKey, map[string]any{"transactionId": txID, "amount": "1.00"})
	expect(t, rf, 201, "")
	sub := h.do("POST", "/api/subscriptions", m.TestKey, subBody(map[string]any{"trialDays": 14}))
	expect(t, sub, 201, "")
	calls := []struct {
		name, method, path, token string
		body                      any
	}{
		{"refund submit", "POST", "/api/refunds/" + rf.str("data", "id") + "/submit", m.TestKey, map[string]any{"txHash": hash64}},
		{"subscription action", "PATCH", "/api/subscriptions", m.TestKey, map[string]any{"subscriptionId": sub.str("data", "id"), "action": "pause"}},
		{"submit", "POST", "/api/checkout/submit", "", map[string]any{"sessionId": id, "txHash": hash64}},
		{"wallet", "POST", "/api/checkout/session/" + newSession() + "/wallet", "", map[string]any{"status": "wallet_ready"}},
		{"customer cancel", "POST", "/api/checkout/session/" + newSession() + "/cancel", "", nil},
		{"merchant cancel", "POST", "/api/checkout-sessions/" + newSession() + "/cancel", m.TestKey, nil},
	}
	for _, call := range calls {
		start := time.Now()
		r := h.do(call.method, call.path, call.token, call.body)
		took := time.Since(start)
		expect(t, r, http.StatusServiceUnavailable, "SERVICE_UNAVAILABLE")
		if r.Header.Get("Retry-After") != "5" || !strings.Contains(r.str("hint"), "retry in 5 seconds") {
			t.Errorf("%s: Retry-After %q, hint %q", call.name, r.Header.Get("Retry-After"), r.str("hint"))
		}
		if took < timeout || took > timeout+5*time.Second {
			t.Errorf("%s answered after %s, want about the update timeout %s", call.name, took, timeout)
		}
	}
	// Nothing moved in the read model: the workers never ran.
	if cs, _ := h.store.CheckoutSession(t.Context(), id); cs.Status != models.StatusCreated || cs.TxHash != nil {
		t.Fatalf("session changed without workers: %s %v", cs.Status, cs.TxHash)
	}

	// The workers come back. The submit the server admitted before the 503
	// is applied; the client's retry with the same hash joins it and is
	// answered as a first submit would be (not 409 "being attached"), and
	// the history shows one broadcast.
	ws, err := pworker.New(c, pworker.Config{CheckoutQueue: queue, WebhookQueue: "webhooks-" + models.NewID(), Store: h.store,
		Verifier: pendingVerifier{}, Sender: webhook.NewSender(webhook.Policy{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := pworker.Start(ws); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pworker.Stop(ws) })
	r := h.do("POST", "/api/checkout/submit", "", map[string]any{"sessionId": id, "txHash": hash64})
	expect(t, r, http.StatusOK, "")
	if r.str("data", "status") != models.StatusBroadcast || r.str("data", "txHash") != hash64 {
		t.Fatalf("retried submit: %s", r.Raw)
	}
	hist, err := h.store.SessionHistory(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	broadcasts := 0
	for _, e := range hist {
		if e.Status == models.StatusBroadcast {
			broadcasts++
		}
	}
	if broadcasts != 1 {
		t.Fatalf("%d txn_broadcast entries, want 1: %+v", broadcasts, hist)
	}
}

// pendingVerifier never sees the transfer: the session stays broadcast.
type pendingVerifier struct{}

func (pendingVerifier) Verify(context.Context, chain.VerifyRequest) (chain.VerifyResult, error) {
	return chain.VerifyResult{Verdict: chain.VerdictPending}, nil
}
