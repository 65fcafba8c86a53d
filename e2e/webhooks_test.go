package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/webhook"
	pworker "github.com/paygate/paygate/worker"
	"github.com/paygate/paygate/workflows"
)

// received is one POST that reached a receiver.
type received struct {
	ID        string // webhook-id header
	Event     string
	Payload   map[string]any
	VerifyErr error
	Status    int       // what the receiver answered
	At        time.Time // when it answered
}

// receiver is a merchant's webhook endpoint on loopback (plain http, which
// the embedded policy allows). answer decides each request's status; it may
// block (n counts requests from 0).
type receiver struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	secret  string
	got     []received
	answer  func(n int, r *http.Request) int
	arrived chan int
}

func newReceiver(t *testing.T, answer func(n int, r *http.Request) int) *receiver {
	rc := &receiver{t: t, answer: answer, arrived: make(chan int, 10000)}
	if rc.answer == nil {
		rc.answer = func(int, *http.Request) int { return http.StatusOK }
	}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) url() string { return rc.srv.URL + "/hooks/paygate" }

func (rc *receiver) setSecret(s string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.secret = s
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	n := len(rc.got)
	secret := rc.secret
	rc.got = append(rc.got, received{}) // reserve the slot
	rc.mu.Unlock()
	rc.arrived <- n

	rec := received{ID: r.Header.Get(webhook.HeaderID)}
	rec.VerifyErr = webhook.Verify(secret, r.Header, body, webhook.DefaultTolerance, time.Now())
	if err := json.Unmarshal(body, &rec.Payload); err == nil {
		rec.Event, _ = rec.Payload["event"].(string)
	}
	rec.Status = rc.answer(n, r)
	rec.At = time.Now()
	w.WriteHeader(rec.Status)
	rc.mu.Lock()
	rc.got[n] = rec
	rc.mu.Unlock()
}

// snapshot returns the requests answered so far.
func (rc *receiver) snapshot() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []received
	for _, r := range rc.got {
		if r.Status != 0 {
			out = append(out, r)
		}
	}
	return out
}

// waitFor polls until ok holds for the answered requests.
func (rc *receiver) waitFor(what string, within time.Duration, ok func([]received) bool) []received {
	rc.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := rc.snapshot()
		if ok(got) {
			return got
		}
		if time.Now().After(deadline) {
			rc.t.Fatalf("receiver: %s not reached within %s; got %d requests: %+v", what, within, len(got), got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func delivered2xx(got []received) map[string][]received {
	out := map[string][]received{}
	for _, r := range got {
		if r.Status >= 200 && r.Status < 300 {
			out[r.ID] = append(out[r.ID], r)
		}
	}
	return out
}

// webhookEndpoint registers the receiver through the API and gives it the secret.
func (s *stack) webhookEndpoint(session string, rc *receiver, events ...string) string {
	s.t.Helper()
	d := s.call("POST", "/api/webhooks", session, map[string]any{"url": rc.url(), "events": events, "mode": "test"}, 201)
	rc.setSecret(d["secret"].(string))
	return d["id"].(string)
}

// delivery reads one delivery record through GET /api/events.
func (s *stack) delivery(key, id string) map[string]any {
	s.t.Helper()
	body := s.call("GET", "/api/events?limit=100", key, nil, 200)
	for _, x := range body["data"].([]any) {
		if d := x.(map[string]any); d["id"] == id {
			return d
		}
	}
	s.t.Fatalf("delivery %s not in GET /api/events", id)
	return nil
}

// waitDelivery polls GET /api/events until the delivery reaches status.
func (s *stack) waitDelivery(key, id, status string, within time.Duration) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		d := s.delivery(key, id)
		if d["status"] == status {
			return d
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("delivery %s is %v after %s, want %s: %v", id, d["status"], within, status, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// emit records an event the way the checkout does and starts its deliveries.
func (s *stack) emit(merchantID, typ string) []string {
	s.t.Helper()
	ids, err := s.tryEmit(merchantID, typ)
	if err != nil {
		s.t.Fatal(err)
	}
	return ids
}

// tryEmit is emit for goroutines other than the test's: it reports instead
// of failing the test.
func (s *stack) tryEmit(merchantID, typ string) ([]string, error) {
	ctx := context.Background()
	ids, err := s.store.EmitEvent(ctx, merchantID, models.ModeTest, models.EventSpec{Type: typ, Key: typ + ":" + models.NewID(),
		Data: map[string]any{"refundId": models.NewID(), "livemode": false}})
	if err != nil {
		return nil, err
	}
	if err := (pworker.Dispatcher{Client: s.temporal, Queue: s.webhookQueue}).Dispatch(ctx, ids); err != nil {
		return nil, err
	}
	return ids, nil
}

func (s *stack) merchantID(session string) string {
	return s.call("GET", "/api/merchant", session, nil, 200)["id"].(string)
}

// pay completes a checkout on link: session, submit, verified at once as
// the page's payments are, bound to the session by its authorization (the
// link's other sessions declare the same wallet: a plain transfer would
// be contested by them).
func (s *stack) pay(v *scriptedVerifier, key, link string, n int) string {
	s.t.Helper()
	id, _ := s.openSession(key, link, "")
	h := fmt.Sprintf("0x%064x", 0x7eb000+n)
	v.set(h, chain.VerifyResult{Seen: true, Verdict: chain.VerdictComplete, Confirmations: 2, Required: 2,
		ReceivedUnits: "29750000", Payer: "0x8617E340B3D01FA5F11F306F4090FD50E238070D", Bound: true})
	s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": id, "txHash": h}, 200)
	return id
}

// TestWebhookCheckoutDelivered: a completed checkout reaches the merchant's
// receiver exactly once with checkout.completed and once with
// payment.completed, signed the Standard Webhooks way, with webhook-id equal
// to the envelope's webhookDeliveryId; the events list shows both delivered.
func TestWebhookCheckoutDelivered(t *testing.T) {
	v := &scriptedVerifier{}
	s := startStack(t, stackOptions{verifier: v})
	key, session := s.merchant()
	rc := newReceiver(t, nil)
	epID := s.webhookEndpoint(session, rc, "checkout.completed", "payment.completed")
	// An endpoint of another event only gets nothing.
	other := newReceiver(t, nil)
	s.webhookEndpoint(session, other, "checkout.failed")

	_, link := s.openSession(key, "", "25.00")
	id := s.pay(v, key, link, 1)
	s.waitStatus(id, "complete", 20*time.Second)
	got := rc.waitFor("two deliveries", 20*time.Second, func(g []received) bool { return len(g) >= 2 })
	time.Sleep(time.Second) // anything extra would arrive now
	got = rc.snapshot()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2: %+v", len(got), got)
	}
	seen := map[string]bool{}
	for _, r := range got {
		if r.VerifyErr != nil {
			t.Fatalf("%s: signature does not verify: %v", r.Event, r.VerifyErr)
		}
		if r.Status != 200 || r.ID == "" || r.Payload["webhookDeliveryId"] != r.ID {
			t.Fatalf("%s: webhook-id %q, webhookDeliveryId %v", r.Event, r.ID, r.Payload["webhookDeliveryId"])
		}
		data, _ := r.Payload["data"].(map[string]any)
		if data["sessionId"] != id || data["livemode"] != false {
			t.Fatalf("%s data %v", r.Event, data)
		}
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r.Payload["timestamp"])); err != nil {
			t.Fatalf("%s timestamp %v", r.Event, r.Payload["timestamp"])
		}
		seen[r.Event] = true
		d := s.delivery(key, r.ID)
		if d["status"] != "delivered" || d["attempts"] != 1.0 || d["responseStatus"] != 200.0 || d["endpointId"] != epID ||
			d["event"] != r.Event || d["lastAttemptAt"] == nil {
			t.Fatalf("delivery record %v", d)
		}
	}
	if !seen["checkout.completed"] || !seen["payment.completed"] {
		t.Fatalf("events %v", seen)
	}
	if n := len(other.snapshot()); n != 0 {
		t.Fatalf("unsubscribed endpoint got %d requests", n)
	}
	// A second signature check with the wrong secret fails (the check is real).
	if err := webhook.Verify("whsec_"+"d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldA==", http.Header{
		webhook.HeaderID: {got[0].ID}, webhook.HeaderTimestamp: {fmt.Sprint(time.Now().Unix())}, webhook.HeaderSignature: {"v1,AAAA"},
	}, []byte("{}"), time.Minute, time.Now()); err == nil {
		t.Fatal("verify accepted a bad signature")
	}
	// The dashboard list shows both, newest first, without payload.
	wh := s.call("GET", "/api/webhooks", session, nil, 200)
	rd := wh["recentDeliveries"].([]any)
	if len(rd) != 2 || rd[0].(map[string]any)["status"] != "delivered" || rd[0].(map[string]any)["payload"] != nil {
		t.Fatalf("recentDeliveries %v", rd)
	}
}

// TestWebhookManualRetry: a receiver that fails, then recovers, gets the
// delivery through POST /api/webhooks/deliveries/{id}/retry, both while the
// delivery workflow waits for its next scheduled attempt (retry signal) and
// after it has closed (SignalWithStart of a new one-attempt run).
func TestWebhookManualRetry(t *testing.T) {
	s := startStack(t, stackOptions{verifier: &scriptedVerifier{}})
	key, session := s.merchant()
	var mu sync.Mutex
	healthy := false
	rc := newReceiver(t, func(int, *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		if healthy {
			return http.StatusNoContent
		}
		return http.StatusServiceUnavailable
	})
	s.webhookEndpoint(session, rc, "payment.refunded")
	mid := s.merchantID(session)
	ctx := context.Background()

	// 1. The workflow is running, waiting a minute for attempt 2.
	running := s.emit(mid, "payment.refunded")[0]
	rc.waitFor("first failed attempt", 15*time.Second, func(g []received) bool { return len(g) >= 1 })
	d := s.waitDelivery(key, running, "pending", 5*time.Second)
	if d["attempts"] != 1.0 || d["responseStatus"] != 503.0 {
		t.Fatalf("after the failure: %v", d)
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	s.call("POST", "/api/webhooks/deliveries/"+running+"/retry", session, nil, 200)
	d = s.waitDelivery(key, running, "delivered", 15*time.Second)
	if d["attempts"] != 2.0 || d["responseStatus"] != 204.0 {
		t.Fatalf("after the manual retry: %v", d)
	}
	var res workflows.WebhookDeliveryResult
	if err := s.temporal.GetWorkflow(ctx, workflows.WebhookDeliveryWorkflowID(running), "").Get(ctx, &res); err != nil || res.State != "delivered" {
		t.Fatalf("workflow result %+v %v", res, err)
	}

	// 2. The workflow has closed (terminated here, as an operator might, in
	// place of waiting ~42 h for the 8th failure): the retry starts a new run.
	mu.Lock()
	healthy = false
	mu.Unlock()
	closed := s.emit(mid, "payment.refunded")[0]
	// Terminate only once the failed attempt is recorded, as a closed
	// workflow always has it recorded (the activity records before it returns).
	deadline := time.Now().Add(15 * time.Second)
	for d = s.delivery(key, closed); d["attempts"] != 1.0; d = s.delivery(key, closed) {
		if time.Now().After(deadline) {
			t.Fatalf("first attempt of the second delivery not recorded: %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d["status"] != "pending" || d["responseStatus"] != 503.0 {
		t.Fatalf("second delivery after its failure: %v", d)
	}
	if err := s.temporal.TerminateWorkflow(ctx, workflows.WebhookDeliveryWorkflowID(closed), "", "test: close the workflow"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	r := s.call("POST", "/api/webhooks/deliveries/"+closed+"/retry", session, nil, 200)
	if r["id"] != closed {
		t.Fatalf("retry answered %v", r)
	}
	d = s.waitDelivery(key, closed, "delivered", 15*time.Second)
	if d["attempts"] != 2.0 {
		t.Fatalf("after the retry of a closed workflow: %v", d)
	}
	// The same webhook-id on every attempt, and every one verifies.
	for _, g := range rc.snapshot() {
		if g.VerifyErr != nil || (g.ID != running && g.ID != closed) {
			t.Fatalf("request %+v", g)
		}
	}
	if n := len(delivered2xx(rc.snapshot())); n != 2 {
		t.Fatalf("%d deliveries succeeded, want 2", n)
	}
	// Another merchant cannot retry it.
	_, otherSession := s.merchant()
	s.call("POST", "/api/webhooks/deliveries/"+closed+"/retry", otherSession, nil, 404)
}

// TestWebhookSurvivesWorkerRestart: the worker is stopped while the
// receiver holds the first attempt open; a new worker on the same queues
// takes over and the delivery still ends delivered, counted once.
func TestWebhookSurvivesWorkerRestart(t *testing.T) {
	s := startStack(t, stackOptions{verifier: &scriptedVerifier{}})
	key, session := s.merchant()
	release := make(chan struct{})
	rc := newReceiver(t, func(n int, r *http.Request) int {
		if n == 0 {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	s.webhookEndpoint(session, rc, "payment.refunded")
	id := s.emit(s.merchantID(session), "payment.refunded")[0]
	select {
	case <-rc.arrived:
	case <-time.After(15 * time.Second):
		t.Fatal("the first attempt never arrived")
	}
	start := time.Now()
	pworker.Stop(s.workers)
	stopped := time.Since(start)
	ws, err := pworker.New(s.temporal, pworker.Config{CheckoutQueue: s.checkoutQueue, WebhookQueue: s.webhookQueue, Store: s.store,
		Verifier: s.verifier, Sender: s.sender, Sessions: s.checkout, PublicBaseURL: "http://paygate.test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := pworker.Start(ws); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pworker.Stop(ws) })
	close(release)
	d := s.waitDelivery(key, id, "delivered", 50*time.Second)
	took := time.Since(start)
	if d["attempts"] != 1.0 || d["responseStatus"] != 200.0 {
		t.Fatalf("delivery after the restart: %v", d)
	}
	got := rc.snapshot()
	for _, g := range got {
		if g.ID != id || g.VerifyErr != nil {
			t.Fatalf("request %+v", g)
		}
	}
	if n := len(delivered2xx(got)[id]); n != 1 {
		t.Fatalf("%d successful requests, want 1", n)
	}
	t.Logf("worker stopped in %s mid-attempt; delivered %s after the stop (%d requests reached the receiver, same webhook-id)",
		stopped.Round(time.Millisecond), took.Round(time.Millisecond), len(got))
}

// TestWebhookDeliveryFigures measures (no timed assertions): the time from
// a session's completion (the event timestamp, written in the completing
// transaction) to the receiver's 2xx over 20 sessions, and deliveries per
// second to a local receiver.
func TestWebhookDeliveryFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	v := &scriptedVerifier{}
	s := startStack(t, stackOptions{verifier: v})
	key, session := s.merchant()
	rc := newReceiver(t, nil)
	s.webhookEndpoint(session, rc, "checkout.completed")
	_, link := s.openSession(key, "", "25.00")

	const sessions = 20
	var lat []time.Duration
	for i := 0; i < sessions; i++ {
		id := s.pay(v, key, link, i)
		got := rc.waitFor("checkout.completed of "+id, 20*time.Second, func(g []received) bool {
			for _, r := range g {
				if d, _ := r.Payload["data"].(map[string]any); d["sessionId"] == id {
					return true
				}
			}
			return false
		})
		for _, r := range got {
			if d, _ := r.Payload["data"].(map[string]any); d["sessionId"] == id {
				at, err := time.Parse(time.RFC3339Nano, r.Payload["timestamp"].(string))
				if err != nil {
					t.Fatal(err)
				}
				lat = append(lat, r.At.Sub(at))
			}
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("completion -> receiver 2xx over %d sessions: median %s, p90 %s, max %s, min %s", len(lat),
		lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*9/10].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), lat[0].Round(time.Millisecond))

	// Throughput: N events recorded, then dispatched by 8 goroutines.
	const n = 300
	bulk := newReceiver(t, nil)
	s.webhookEndpoint(session, bulk, "payment.refunded")
	mid := s.merchantID(session)
	ctx := context.Background()
	var ids []string
	for i := 0; i < n; i++ {
		got, err := s.store.EmitEvent(ctx, mid, models.ModeTest, models.EventSpec{Type: "payment.refunded", Key: fmt.Sprintf("bulk:%d:%s", i, models.NewID()),
			Data: map[string]any{"refundId": models.NewID(), "livemode": false}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < len(ids); i += 8 {
				if err := (pworker.Dispatcher{Client: s.temporal, Queue: s.webhookQueue}).Dispatch(ctx, ids[i:i+1]); err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	dispatched := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	bulk.waitFor(fmt.Sprintf("%d deliveries", n), 120*time.Second, func(g []received) bool { return len(delivered2xx(g)) >= n })
	took := time.Since(start)
	// The read model catches up right after the receiver's answers.
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows, _, err := s.store.WebhookDeliveries(ctx, models.Scope{MerchantID: mid, Mode: models.ModeTest},
			models.DeliveryFilter{Event: "payment.refunded", Status: models.DeliveryDelivered}, models.Page{Limit: n})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d recorded delivered", len(rows), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	recorded := time.Since(start)
	t.Logf("throughput: %d deliveries to a local receiver in %s (%.0f/s; workflows started in %s; all recorded delivered after %s)",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), dispatched.Round(time.Millisecond), recorded.Round(time.Millisecond))
}
