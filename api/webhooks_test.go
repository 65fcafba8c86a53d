package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/webhook"
)

// fakeResolver maps host names to addresses without any DNS traffic.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

var testResolver = fakeResolver{
	"hooks.example.com":    {netip.MustParseAddr("93.184.216.34")},
	"internal.example.com": {netip.MustParseAddr("10.0.0.5")},
	"metadata.example.com": {netip.MustParseAddr("169.254.169.254")},
}

// fakeRetrier records the deliveries it was asked to retry.
type fakeRetrier struct {
	mu    sync.Mutex
	calls []models.WebhookDelivery
	err   error
}

func (f *fakeRetrier) RetryDelivery(_ context.Context, d *models.WebhookDelivery) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, *d)
	return f.err
}

// webhookHarness is an API with the embedded policy (loopback http allowed
// for test endpoints), the fake resolver and a fake retrier.
func webhookHarness(t *testing.T, st *models.Store, r api.DeliveryRetrier) *harness {
	return newHarness(t, st, func(d *api.Deps) {
		d.WebhookPolicy = webhook.Policy{AllowLoopbackHTTP: true, Resolver: testResolver}
		d.Deliveries = r
	})
}

func forEachWebhookStore(t *testing.T, fn func(t *testing.T, h *harness, r *fakeRetrier)) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		r := &fakeRetrier{}
		fn(t, webhookHarness(t, st, r), r)
	})
}

const hookURL = "https://hooks.example.com/paygate"

func (h *harness) endpoint(session string, body map[string]any) map[string]any {
	h.t.Helper()
	if body == nil {
		body = map[string]any{"url": hookURL, "events": []string{"checkout.completed"}, "mode": "test"}
	}
	r := h.do("POST", "/api/webhooks", session, body)
	expect(h.t, r, http.StatusCreated, "")
	return r.data()
}

// emit records an event for the merchant and returns its delivery ids.
func (h *harness) emit(merchantID string, mode models.Mode, typ string) []string {
	h.t.Helper()
	ids, err := h.store.EmitEvent(context.Background(), merchantID, mode, models.EventSpec{Type: typ, Key: typ + ":" + models.NewID(),
		Data: map[string]any{"sessionId": models.NewID(), "livemode": mode == models.ModeLive}})
	if err != nil {
		h.t.Fatal(err)
	}
	return ids
}

func strList(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestWebhookEndpointLifecycle: create (secret once), list (no secret),
// patch, rotate (new secret once), delete, then 404.
func TestWebhookEndpointLifecycle(t *testing.T) {
	forEachWebhookStore(t, func(t *testing.T, h *harness, _ *fakeRetrier) {
		m := h.signup()
		ep := h.endpoint(m.Session, map[string]any{"url": hookURL, "mode": "test",
			"events": []string{"checkout.completed", "payment.completed", "checkout.completed"}})
		id, _ := ep["id"].(string)
		secret, _ := ep["secret"].(string)
		if !strings.HasPrefix(secret, "whsec_") || len(secret) < 40 {
			t.Fatalf("secret %q", secret)
		}
		if ep["url"] != hookURL || ep["active"] != true || ep["mode"] != "test" || ep["createdAt"] == nil {
			t.Fatalf("endpoint %v", ep)
		}
		if got := strings.Join(strList(ep["events"]), ","); got != "checkout.completed,payment.completed" {
			t.Fatalf("events not deduplicated in order: %s", got)
		}
		// The secret really signs: the stored endpoint has it.
		stored, err := h.store.EndpointSecret(context.Background(), id)
		if err != nil || stored != secret {
			t.Fatalf("stored secret %q %v", stored, err)
		}

		list := h.do("GET", "/api/webhooks", m.Session, nil)
		expect(t, list, 200, "")
		eps := list.data()["endpoints"].([]any)
		if len(eps) != 1 || eps[0].(map[string]any)["id"] != id {
			t.Fatalf("endpoints %v", eps)
		}
		if _, ok := eps[0].(map[string]any)["secret"]; ok || strings.Contains(list.Raw, secret) {
			t.Fatal("the list shows the secret")
		}
		if rd, ok := list.data()["recentDeliveries"].([]any); !ok || len(rd) != 0 {
			t.Fatalf("recentDeliveries %v", list.data()["recentDeliveries"])
		}
		// Live mode has its own (empty) list.
		live := h.do("GET", "/api/webhooks?mode=live", m.Session, nil)
		expect(t, live, 200, "")
		if n := len(live.data()["endpoints"].([]any)); n != 0 {
			t.Fatalf("live list has %d endpoints", n)
		}

		p := h.do("PATCH", "/api/webhooks/"+id, m.Session, map[string]any{"url": "https://hooks.example.com/v2",
			"events": []string{"checkout.failed"}, "active": false})
		expect(t, p, 200, "")
		if p.str("data", "url") != "https://hooks.example.com/v2" || p.data()["active"] != false ||
			strings.Join(strList(p.data()["events"]), ",") != "checkout.failed" {
			t.Fatalf("patched %v", p.data())
		}
		if _, ok := p.data()["secret"]; ok {
			t.Fatal("PATCH shows the secret")
		}
		// Only what was sent changes.
		p = h.do("PATCH", "/api/webhooks/"+id, m.Session, map[string]any{"active": true})
		expect(t, p, 200, "")
		if p.data()["active"] != true || p.str("data", "url") != "https://hooks.example.com/v2" {
			t.Fatalf("patched %v", p.data())
		}

		rot := h.do("POST", "/api/webhooks/"+id+"/rotate-secret", m.Session, nil)
		expect(t, rot, 200, "")
		newSecret := rot.str("data", "secret")
		if !strings.HasPrefix(newSecret, "whsec_") || newSecret == secret || rot.str("data", "id") != id {
			t.Fatalf("rotate answered %s", rot.Raw)
		}
		if stored, _ := h.store.EndpointSecret(context.Background(), id); stored != newSecret {
			t.Fatal("rotation not stored")
		}
		if _, ok := rot.data()["previousSecretExpiresAt"]; ok {
			t.Fatalf("a rotation without overlap keeps the old secret: %s", rot.Raw)
		}
		// With an overlap the replaced secret keeps signing, and the
		// endpoint says until when; a rotation without one ends it.
		for _, bad := range []any{-1, 604801, "3600", 1.5, true} {
			expectField(t, h.do("POST", "/api/webhooks/"+id+"/rotate-secret", m.Session, map[string]any{"previousSecretExpiresIn": bad}),
				"previousSecretExpiresIn")
		}
		if stored, _ := h.store.EndpointSecret(context.Background(), id); stored != newSecret {
			t.Fatal("a refused rotation changed the secret")
		}
		before := time.Now()
		kept := h.do("POST", "/api/webhooks/"+id+"/rotate-secret", m.Session, map[string]any{"previousSecretExpiresIn": 3600})
		expect(t, kept, 200, "")
		until, err := time.Parse(time.RFC3339Nano, kept.str("data", "previousSecretExpiresAt"))
		if err != nil || until.Before(before.Add(time.Hour).Add(-time.Second)) || until.After(time.Now().Add(time.Hour)) {
			t.Fatalf("kept until %q (%v), want an hour from now", kept.str("data", "previousSecretExpiresAt"), err)
		}
		listed := h.do("GET", "/api/webhooks", m.Session, nil).data()["endpoints"].([]any)[0].(map[string]any)
		if listed["previousSecretExpiresAt"] != kept.str("data", "previousSecretExpiresAt") {
			t.Fatalf("the list shows %v", listed)
		}
		if ids := h.emit(m.ID, models.ModeTest, "checkout.failed"); len(ids) != 1 {
			t.Fatalf("deliveries %v", ids)
		} else if tgt, err := h.store.DeliveryTarget(context.Background(), ids[0]); err != nil ||
			tgt.Secret != kept.str("data", "secret") || tgt.PreviousSecret != newSecret {
			t.Fatalf("signing during the overlap: %+v %v", tgt, err)
		}
		rot = h.do("POST", "/api/webhooks/"+id+"/rotate-secret", m.Session, nil)
		expect(t, rot, 200, "")
		if _, ok := rot.data()["previousSecretExpiresAt"]; ok {
			t.Fatalf("a rotation without overlap kept the replaced secret: %s", rot.Raw)
		}

		pending := h.emit(m.ID, models.ModeTest, "checkout.failed")
		if len(pending) != 1 {
			t.Fatalf("deliveries %v", pending)
		}
		del := h.do("DELETE", "/api/webhooks/"+id, m.Session, nil)
		expect(t, del, 200, "")
		if del.str("message") == "" {
			t.Fatalf("delete answered %s", del.Raw)
		}
		// Its pending delivery can never be delivered: failed, and kept.
		ev := h.do("GET", "/api/events", m.TestKey, nil)
		expect(t, ev, 200, "")
		// (Newest first: the one of the overlap's check is second.)
		if len(ev.list()) != 2 || ev.list()[0].(map[string]any)["id"] != pending[0] {
			t.Fatalf("events after the endpoint's deletion: %s", ev.Raw)
		}
		for _, d := range ev.list() {
			if d.(map[string]any)["status"] != "failed" {
				t.Fatalf("events after the endpoint's deletion: %s", ev.Raw)
			}
		}
		// Emitting after the deletion makes no delivery.
		if got := h.emit(m.ID, models.ModeTest, "checkout.failed"); len(got) != 0 {
			t.Fatalf("deleted endpoint got deliveries %v", got)
		}
		expect(t, h.do("DELETE", "/api/webhooks/"+id, m.Session, nil), 404, "NOT_FOUND")
		expect(t, h.do("PATCH", "/api/webhooks/"+id, m.Session, map[string]any{"active": true}), 404, "NOT_FOUND")
		expect(t, h.do("POST", "/api/webhooks/"+id+"/rotate-secret", m.Session, nil), 404, "NOT_FOUND")
		if n := len(h.do("GET", "/api/webhooks", m.Session, nil).data()["endpoints"].([]any)); n != 0 {
			t.Fatalf("%d endpoints after delete", n)
		}
	})
}

// TestWebhookCreateValidation: every 400 of the create route, the URL
// bounds (2047 characters pass, 2048 fail), the SSRF refusals, the live
// KYB rule and the endpoint cap.
func TestWebhookCreateValidation(t *testing.T) {
	forEachWebhookStore(t, func(t *testing.T, h *harness, _ *fakeRetrier) {
		m := h.signup()
		base := "https://hooks.example.com/"
		url2047 := base + strings.Repeat("a", 2047-len(base))
		url2048 := base + strings.Repeat("a", 2048-len(base))
		ok := func(url string, events ...string) map[string]any {
			t.Helper()
			if len(events) == 0 {
				events = []string{"payment.completed"}
			}
			return h.endpoint(m.Session, map[string]any{"url": url, "events": events, "mode": "test"})
		}
		bad := func(field string, body any) {
			t.Helper()
			expectField(t, h.do("POST", "/api/webhooks", m.Session, body), field)
		}
		if got := ok(url2047)["url"]; got != url2047 {
			t.Fatalf("2047-character url stored as %v", got)
		}
		bad("url", map[string]any{"url": url2048, "events": []string{"payment.completed"}, "mode": "test"})
		bad("url", map[string]any{"url": "http://hooks.example.com/x", "events": []string{"payment.completed"}, "mode": "test"})
		bad("url", map[string]any{"url": "ftp://hooks.example.com/x", "events": []string{"payment.completed"}, "mode": "test"})
		bad("url", map[string]any{"url": "https://10.1.2.3/x", "events": []string{"payment.completed"}, "mode": "test"})
		bad("url", map[string]any{"url": "https://internal.example.com/x", "events": []string{"payment.completed"}, "mode": "test"})
		bad("url", map[string]any{"url": "https://metadata.example.com/x", "events": []string{"payment.completed"}, "mode": "test"})
		bad("url", map[string]any{"url": "https://[::ffff:192.168.1.1]/x", "events": []string{"payment.completed"}, "mode": "test"})
		bad("url", map[string]any{"url": "https://nowhere.example.com/x", "events": []string{"payment.completed"}, "mode": "test"})
		bad("url", map[string]any{"url": "https://user:pw@hooks.example.com/x", "events": []string{"payment.completed"}, "mode": "test"})
		bad("url", map[string]any{"url": "not a url", "events": []string{"payment.completed"}, "mode": "test"})
		bad("url", map[string]any{"events": []string{"payment.completed"}, "mode": "test"})
		bad("events", map[string]any{"url": hookURL, "events": []string{}, "mode": "test"})
		bad("events", map[string]any{"url": hookURL, "mode": "test"})
		bad("events", map[string]any{"url": hookURL, "events": []string{"payment.completed", "payment.exploded"}, "mode": "test"})
		bad("events", map[string]any{"url": hookURL, "events": "payment.completed", "mode": "test"})
		bad("mode", map[string]any{"url": hookURL, "events": []string{"payment.completed"}})
		bad("mode", map[string]any{"url": hookURL, "events": []string{"payment.completed"}, "mode": "prod"})
		bad("secret", map[string]any{"url": hookURL, "events": []string{"payment.completed"}, "mode": "test", "secret": "whsec_x"})
		bad("body", `{"url":`)
		bad("body", ``)
		// Every problem is reported at once.
		r := h.do("POST", "/api/webhooks", m.Session, map[string]any{"url": "http://x", "events": []string{}, "mode": "x"})
		expectField(t, r, "events")
		expectField(t, r, "mode")

		// The embedded profile lets test endpoints use http:// to loopback;
		// live endpoints never (checked before the KYB rule).
		ok("http://127.0.0.1:9/hook")
		bad("url", map[string]any{"url": "http://127.0.0.1:9/hook", "events": []string{"payment.completed"}, "mode": "live"})
		bad("url", map[string]any{"url": "https://127.0.0.1:9/hook", "events": []string{"payment.completed"}, "mode": "live"})
		bad("url", map[string]any{"url": "http://10.0.0.1/hook", "events": []string{"payment.completed"}, "mode": "test"})

		// Every SPEC event name is accepted.
		all := ok(hookURL, api.WebhookEventTypes...)
		if len(all["events"].([]any)) != len(api.WebhookEventTypes) || len(api.WebhookEventTypes) != 14 {
			t.Fatalf("events %v", all["events"])
		}

		// Live endpoints need an approved KYB application.
		live := map[string]any{"url": hookURL, "events": []string{"payment.completed"}, "mode": "live"}
		expect(t, h.do("POST", "/api/webhooks", m.Session, live), http.StatusForbidden, "FORBIDDEN")
		h.withLive(m)
		if ep := h.endpoint(m.Session, live); ep["mode"] != "live" {
			t.Fatalf("live endpoint %v", ep)
		}

		// Credentials: none, and an API key on a dashboard route, are 401.
		expect(t, h.do("POST", "/api/webhooks", "", live), http.StatusUnauthorized, "UNAUTHORIZED")
		expect(t, h.do("POST", "/api/webhooks", m.TestKey, live), http.StatusUnauthorized, "UNAUTHORIZED")
		expect(t, h.do("GET", "/api/webhooks", m.TestKey, nil), http.StatusUnauthorized, "UNAUTHORIZED")
		expect(t, h.do("GET", "/api/webhooks", "svc_sess_nope", nil), http.StatusUnauthorized, "UNAUTHORIZED")

		// At most MaxWebhookEndpoints per mode; the other mode is separate.
		n := len(h.do("GET", "/api/webhooks", m.Session, nil).data()["endpoints"].([]any))
		for ; n < api.MaxWebhookEndpoints; n++ {
			ok(fmt.Sprintf("%s/%d", hookURL, n))
		}
		bad("mode", map[string]any{"url": hookURL + "/more", "events": []string{"payment.completed"}, "mode": "test"})
		h.endpoint(m.Session, map[string]any{"url": hookURL + "/more", "events": []string{"payment.completed"}, "mode": "live"})
	})
}

// TestWebhookEndpointsOnePerURL: a second endpoint at a URL of the mode is
// a 409, created or patched (its receiver would get every event twice,
// under two delivery ids); the other mode and other merchants are apart;
// concurrent registrations pass the limit and the URL check one at a time.
func TestWebhookEndpointsOnePerURL(t *testing.T) {
	forEachWebhookStore(t, func(t *testing.T, h *harness, _ *fakeRetrier) {
		m := h.withLive(h.signup())
		body := func(url, mode string) map[string]any {
			return map[string]any{"url": url, "events": []string{"checkout.completed"}, "mode": mode}
		}
		first := h.endpoint(m.Session, body(hookURL+"/one", "test"))
		expect(t, h.do("POST", "/api/webhooks", m.Session, body(hookURL+"/one", "test")), http.StatusConflict, "CONFLICT")
		h.endpoint(m.Session, body(hookURL+"/one", "live"))
		h.endpoint(h.signup().Session, body(hookURL+"/one", "test"))
		second := h.endpoint(m.Session, body(hookURL+"/two", "test"))
		expect(t, h.do("PATCH", "/api/webhooks/"+second["id"].(string), m.Session, map[string]any{"url": hookURL + "/one"}),
			http.StatusConflict, "CONFLICT")
		// Patching an endpoint to its own URL is no conflict.
		expect(t, h.do("PATCH", "/api/webhooks/"+first["id"].(string), m.Session, map[string]any{"url": hookURL + "/one", "active": true}),
			http.StatusOK, "")
		// Deleted, its URL is free again.
		expect(t, h.do("DELETE", "/api/webhooks/"+first["id"].(string), m.Session, nil), http.StatusOK, "")
		h.endpoint(m.Session, body(hookURL+"/one", "test"))

		// Twenty registrations at once, at twenty URLs and at one: the
		// limit and the one-per-URL rule both hold.
		other := h.signup()
		var wg sync.WaitGroup
		codes := make(chan int, 40)
		for i := range 20 {
			for _, url := range []string{fmt.Sprintf("%s/many/%d", hookURL, i), hookURL + "/same"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					codes <- h.do("POST", "/api/webhooks", other.Session, body(url, "test")).Status
				}()
			}
		}
		wg.Wait()
		close(codes)
		count := map[int]int{}
		for c := range codes {
			count[c]++
		}
		eps := h.do("GET", "/api/webhooks", other.Session, nil).data()["endpoints"].([]any)
		same := 0
		for _, e := range eps {
			if e.(map[string]any)["url"] == hookURL+"/same" {
				same++
			}
		}
		if len(eps) != api.MaxWebhookEndpoints || same != 1 || count[http.StatusCreated] != api.MaxWebhookEndpoints {
			t.Fatalf("%d endpoints (%d at the shared URL) from answers %v, want %d and 1", len(eps), same, count, api.MaxWebhookEndpoints)
		}
	})
}

// TestWebhookPatchValidation: the 400s and 404s of PATCH, and the mode's
// URL policy applied to a new URL.
func TestWebhookPatchValidation(t *testing.T) {
	forEachWebhookStore(t, func(t *testing.T, h *harness, _ *fakeRetrier) {
		m := h.withLive(h.signup())
		id := h.endpoint(m.Session, nil)["id"].(string)
		liveID := h.endpoint(m.Session, map[string]any{"url": hookURL, "events": []string{"payment.completed"}, "mode": "live"})["id"].(string)
		patch := func(id string, body any) resp { return h.do("PATCH", "/api/webhooks/"+id, m.Session, body) }
		expectField(t, patch(id, map[string]any{}), "body")
		expectField(t, patch(id, map[string]any{"events": []string{}}), "events")
		expectField(t, patch(id, map[string]any{"events": []string{"nope"}}), "events")
		expectField(t, patch(id, map[string]any{"url": "https://10.0.0.1/x"}), "url")
		expectField(t, patch(id, map[string]any{"url": ""}), "url")
		expectField(t, patch(id, map[string]any{"active": "yes"}), "active")
		expectField(t, patch(id, map[string]any{"mode": "live"}), "mode")
		expectField(t, patch(id, map[string]any{"secret": "whsec_x"}), "secret")
		expectField(t, patch("not-a-uuid", map[string]any{"active": true}), "id")
		expect(t, patch(models.NewID(), map[string]any{"active": true}), 404, "NOT_FOUND")
		// Loopback http is fine for a test endpoint, never for a live one.
		expect(t, patch(id, map[string]any{"url": "http://127.0.0.1:8/x"}), 200, "")
		expectField(t, patch(liveID, map[string]any{"url": "http://127.0.0.1:8/x"}), "url")
		// Nothing changed by the refused requests.
		ep, _ := h.store.WebhookEndpoint(context.Background(), m.ID, liveID)
		if ep.URL != hookURL || !ep.Active {
			t.Fatalf("live endpoint changed: %+v", ep)
		}
		expectField(t, h.do("DELETE", "/api/webhooks/x", m.Session, nil), "id")
		expectField(t, h.do("POST", "/api/webhooks/x/rotate-secret", m.Session, nil), "id")
		expect(t, h.do("DELETE", "/api/webhooks/"+id, m.TestKey, nil), 401, "UNAUTHORIZED")
	})
}

// TestWebhookActionsInMode: with ?mode= (what the dashboard's pages send)
// an endpoint or delivery of the other mode is not found: a test-mode page
// cannot rotate, disable, delete, test or resend anything live. The same
// calls with the right mode (or none) act.
func TestWebhookActionsInMode(t *testing.T) {
	forEachWebhookStore(t, func(t *testing.T, h *harness, _ *fakeRetrier) {
		m := h.withLive(h.signup())
		liveID := h.endpoint(m.Session, map[string]any{"url": hookURL, "events": []string{"checkout.completed"}, "mode": "live"})["id"].(string)
		delivery := h.emit(m.ID, models.ModeLive, "checkout.completed")[0]
		calls := []struct{ method, path string }{
			{"PATCH", "/api/webhooks/" + liveID},
			{"POST", "/api/webhooks/" + liveID + "/rotate-secret"},
			{"POST", "/api/webhooks/" + liveID + "/test"},
			{"POST", "/api/webhooks/deliveries/" + delivery + "/retry"},
			{"DELETE", "/api/webhooks/" + liveID},
		}
		for _, c := range calls {
			var body any
			if c.method == "PATCH" {
				body = map[string]any{"active": false}
			}
			expect(t, h.do(c.method, c.path+"?mode=test", m.Session, body), 404, "NOT_FOUND")
			expectField(t, h.do(c.method, c.path+"?mode=nope", m.Session, body), "mode")
		}
		ep, _ := h.store.WebhookEndpoint(context.Background(), m.ID, liveID)
		if !ep.Active {
			t.Fatal("a test-mode call disabled a live endpoint")
		}
		for _, c := range calls {
			var body any
			if c.method == "PATCH" {
				body = map[string]any{"active": true}
			}
			r := h.do(c.method, c.path+"?mode=live", m.Session, body)
			if r.Status >= 300 {
				t.Fatalf("%s %s?mode=live: %d %s", c.method, c.path, r.Status, r.Raw)
			}
		}
	})
}

// TestWebhookListRecentDeliveries: recentDeliveries are the mode's newest
// 50, newest first, without payload, responseStatus or lastAttemptAt.
func TestWebhookListRecentDeliveries(t *testing.T) {
	forEachWebhookStore(t, func(t *testing.T, h *harness, _ *fakeRetrier) {
		m := h.withLive(h.signup())
		epID := h.endpoint(m.Session, map[string]any{"url": hookURL, "events": []string{"checkout.completed", "payment.completed"}, "mode": "test"})["id"].(string)
		h.endpoint(m.Session, map[string]any{"url": hookURL, "events": []string{"checkout.completed"}, "mode": "live"})
		var ids []string
		for i := 0; i < 27; i++ {
			ids = append(ids, h.emit(m.ID, models.ModeTest, "checkout.completed")...)
			ids = append(ids, h.emit(m.ID, models.ModeTest, "payment.completed")...)
		}
		liveIDs := h.emit(m.ID, models.ModeLive, "checkout.completed")
		// Not subscribed: no delivery.
		if got := h.emit(m.ID, models.ModeTest, "checkout.failed"); len(got) != 0 {
			t.Fatalf("unsubscribed event made deliveries %v", got)
		}
		code := 500
		if err := h.store.RecordDeliveryAttempt(context.Background(), models.AttemptRecord{DeliveryID: ids[len(ids)-1], Attempt: 1,
			ResponseStatus: code, At: time.Now(), Status: models.DeliveryPending, Error: "HTTP 500"}); err != nil {
			t.Fatal(err)
		}
		r := h.do("GET", "/api/webhooks?mode=test", m.Session, nil)
		expect(t, r, 200, "")
		rd := r.data()["recentDeliveries"].([]any)
		if len(rd) != api.RecentDeliveriesShown {
			t.Fatalf("%d recent deliveries, want %d", len(rd), api.RecentDeliveriesShown)
		}
		first := rd[0].(map[string]any)
		if first["id"] != ids[len(ids)-1] || first["endpointId"] != epID || first["event"] != "payment.completed" ||
			first["status"] != "pending" || first["attempts"] != 1.0 || first["createdAt"] == nil {
			t.Fatalf("newest delivery %v", first)
		}
		for _, f := range []string{"payload", "responseStatus", "lastAttemptAt"} {
			if _, ok := first[f]; ok {
				t.Fatalf("recentDeliveries carry %s: %v", f, first)
			}
		}
		for i := 1; i < len(rd); i++ {
			if rd[i-1].(map[string]any)["id"].(string) <= rd[i].(map[string]any)["id"].(string) {
				t.Fatal("recentDeliveries not newest first")
			}
		}
		lr := h.do("GET", "/api/webhooks?mode=live", m.Session, nil).data()["recentDeliveries"].([]any)
		if len(lr) != 1 || lr[0].(map[string]any)["id"] != liveIDs[0] {
			t.Fatalf("live recentDeliveries %v", lr)
		}
		expectField(t, h.do("GET", "/api/webhooks?mode=prod", m.Session, nil), "mode")
	})
}

// TestWebhookRetryRoute: the retry route hands the delivery (with its
// attempts) to the retrier; 404 for a missing one, 409 when its endpoint is
// deleted or disabled, 500 when the retrier fails or is not configured.
func TestWebhookRetryRoute(t *testing.T) {
	forEachWebhookStore(t, func(t *testing.T, h *harness, fr *fakeRetrier) {
		m := h.signup()
		epID := h.endpoint(m.Session, nil)["id"].(string)
		id := h.emit(m.ID, models.ModeTest, "checkout.completed")[0]
		for a := 1; a <= 8; a++ {
			st := models.DeliveryPending
			if a == 8 {
				st = models.DeliveryFailed
			}
			if err := h.store.RecordDeliveryAttempt(context.Background(), models.AttemptRecord{DeliveryID: id, Attempt: a,
				ResponseStatus: 503, At: time.Now(), Status: st, Error: "HTTP 503"}); err != nil {
				t.Fatal(err)
			}
		}
		r := h.do("POST", "/api/webhooks/deliveries/"+id+"/retry", m.Session, nil)
		expect(t, r, 200, "")
		if r.str("data", "id") != id || r.str("data", "status") != "failed" || r.data()["attempts"] != 8.0 {
			t.Fatalf("retry answered %s", r.Raw)
		}
		if len(fr.calls) != 1 || fr.calls[0].ID != id || fr.calls[0].Attempts != 8 {
			t.Fatalf("retrier calls %+v", fr.calls)
		}
		expectField(t, h.do("POST", "/api/webhooks/deliveries/nope/retry", m.Session, nil), "id")
		expect(t, h.do("POST", "/api/webhooks/deliveries/"+models.NewID()+"/retry", m.Session, nil), 404, "NOT_FOUND")
		expect(t, h.do("POST", "/api/webhooks/deliveries/"+id+"/retry", m.TestKey, nil), 401, "UNAUTHORIZED")
		expect(t, h.do("POST", "/api/webhooks/deliveries/"+id+"/retry", "", nil), 401, "UNAUTHORIZED")

		expect(t, h.do("PATCH", "/api/webhooks/"+epID, m.Session, map[string]any{"active": false}), 200, "")
		expect(t, h.do("POST", "/api/webhooks/deliveries/"+id+"/retry", m.Session, nil), 409, "CONFLICT")
		expect(t, h.do("PATCH", "/api/webhooks/"+epID, m.Session, map[string]any{"active": true}), 200, "")

		fr.err = errors.New("temporal unavailable")
		r = h.do("POST", "/api/webhooks/deliveries/"+id+"/retry", m.Session, nil)
		expect(t, r, 500, "INTERNAL_ERROR")
		if strings.Contains(r.Raw, "temporal unavailable") {
			t.Fatalf("internal detail leaked: %s", r.Raw)
		}
		fr.err = nil

		expect(t, h.do("DELETE", "/api/webhooks/"+epID, m.Session, nil), 200, "")
		expect(t, h.do("POST", "/api/webhooks/deliveries/"+id+"/retry", m.Session, nil), 409, "CONFLICT")
		if len(fr.calls) != 2 {
			t.Fatalf("retrier called %d times, want 2 (refusals must not reach it)", len(fr.calls))
		}
	})
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		h := webhookHarness(t, st, nil)
		m := h.signup()
		h.endpoint(m.Session, nil)
		id := h.emit(m.ID, models.ModeTest, "checkout.completed")[0]
		expect(t, h.do("POST", "/api/webhooks/deliveries/"+id+"/retry", m.Session, nil), 500, "INTERNAL_ERROR")
	})
}

// TestWebhookEventsList: GET /api/events shapes, filters, bounds and
// pagination, scoped by the key's mode.
func TestWebhookEventsList(t *testing.T) {
	forEachWebhookStore(t, func(t *testing.T, h *harness, _ *fakeRetrier) {
		m := h.withLive(h.signup())
		other := h.signup()
		h.endpoint(m.Session, map[string]any{"url": hookURL, "mode": "test", "events": api.WebhookEventTypes})
		h.endpoint(m.Session, map[string]any{"url": hookURL, "mode": "live", "events": []string{"payment.completed"}})
		h.endpoint(other.Session, map[string]any{"url": hookURL, "mode": "test", "events": []string{"payment.completed"}})

		// Deliveries created at known times: day d holds one of each kind.
		ctx := context.Background()
		t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		kinds := []string{"checkout.completed", "payment.completed", "checkout.failed", "payment.failed"}
		var all []string // creation order
		const days = 10
		for d := 0; d < days; d++ {
			at := t0.Add(time.Duration(d) * 24 * time.Hour)
			h.store.SetClock(func() time.Time { return at })
			for _, k := range kinds {
				all = append(all, h.emit(m.ID, models.ModeTest, k)...)
			}
		}
		h.store.SetClock(time.Now)
		liveIDs := h.emit(m.ID, models.ModeLive, "payment.completed")
		h.emit(other.ID, models.ModeTest, "payment.completed")
		if len(all) != days*len(kinds) {
			t.Fatalf("%d deliveries", len(all))
		}
		// The first is delivered after a 500 then a 200; the second failed.
		rec := func(id string, n, code int, status string) {
			if err := h.store.RecordDeliveryAttempt(ctx, models.AttemptRecord{DeliveryID: id, Attempt: n, ResponseStatus: code,
				At: t0.Add(time.Duration(n) * time.Minute), Status: status}); err != nil {
				t.Fatal(err)
			}
		}
		rec(all[0], 1, 500, models.DeliveryPending)
		rec(all[0], 2, 204, models.DeliveryDelivered)
		rec(all[1], 1, 0, models.DeliveryFailed)

		get := func(q string) resp {
			t.Helper()
			return h.do("GET", "/api/events"+q, m.TestKey, nil)
		}
		ids := func(r resp) []string {
			var out []string
			for _, x := range r.list() {
				out = append(out, x.(map[string]any)["id"].(string))
			}
			return out
		}

		r := get("")
		expect(t, r, 200, "")
		if len(r.list()) != 25 || r.Body["hasMore"] != true {
			t.Fatalf("default page: %d items, hasMore %v", len(r.list()), r.Body["hasMore"])
		}
		if ids(r)[0] != all[len(all)-1] {
			t.Fatal("not newest first")
		}
		// Full record shape.
		r = get("?limit=100")
		expect(t, r, 200, "")
		if len(r.list()) != len(all) || r.Body["hasMore"] != false {
			t.Fatalf("limit=100: %d items, hasMore %v", len(r.list()), r.Body["hasMore"])
		}
		byID := map[string]map[string]any{}
		for _, x := range r.list() {
			byID[x.(map[string]any)["id"].(string)] = x.(map[string]any)
		}
		d0 := byID[all[0]]
		if d0["status"] != "delivered" || d0["attempts"] != 2.0 || d0["responseStatus"] != 204.0 ||
			d0["lastAttemptAt"] != "2026-03-01T12:02:00.000Z" || d0["createdAt"] != "2026-03-01T12:00:00.000Z" ||
			d0["event"] != "checkout.completed" || d0["endpointId"] == "" {
			t.Fatalf("delivered record %v", d0)
		}
		pl, ok := d0["payload"].(map[string]any)
		if !ok || pl["event"] != "checkout.completed" || pl["webhookDeliveryId"] != all[0] || pl["timestamp"] != "2026-03-01T12:00:00.000Z" {
			t.Fatalf("payload %v", d0["payload"])
		}
		if data, ok := pl["data"].(map[string]any); !ok || data["livemode"] != false {
			t.Fatalf("payload data %v", pl["data"])
		}
		d1 := byID[all[1]]
		if d1["status"] != "failed" || d1["responseStatus"] != nil || d1["attempts"] != 1.0 {
			t.Fatalf("failed record %v", d1)
		}
		fresh := byID[all[5]]
		for _, f := range []string{"responseStatus", "lastAttemptAt"} {
			if v, present := fresh[f]; !present || v != nil {
				t.Fatalf("a record without attempts must carry %s: null, got %v", f, fresh)
			}
		}

		// limit bounds.
		r = get("?limit=1")
		expect(t, r, 200, "")
		if len(r.list()) != 1 || r.Body["hasMore"] != true {
			t.Fatalf("limit=1: %s", r.Raw)
		}
		for _, q := range []string{"?limit=0", "?limit=101", "?limit=-1", "?limit=abc", "?limit=1.5"} {
			expectField(t, get(q), "limit")
		}
		// starting_after walks every page once, in order.
		var walked []string
		cursor := ""
		for pages := 0; ; pages++ {
			q := "?limit=7"
			if cursor != "" {
				q += "&starting_after=" + cursor
			}
			r := get(q)
			expect(t, r, 200, "")
			page := ids(r)
			walked = append(walked, page...)
			if r.Body["hasMore"] != true {
				if len(page) == 0 || pages != (len(all)-1)/7 {
					t.Fatalf("last page %d has %d items", pages, len(page))
				}
				break
			}
			cursor = page[len(page)-1]
		}
		if len(walked) != len(all) {
			t.Fatalf("walked %d of %d", len(walked), len(all))
		}
		for i, id := range walked {
			if id != all[len(all)-1-i] {
				t.Fatalf("page walk out of order at %d", i)
			}
		}
		r = get("?limit=3&starting_after=" + all[3])
		if got := ids(r); len(got) != 3 || got[0] != all[2] || r.Body["hasMore"] != false {
			t.Fatalf("after the 4th: %v", got)
		}
		expectField(t, get("?starting_after=42"), "starting_after")

		// Filters.
		r = get("?event=payment.failed&limit=100")
		if len(r.list()) != days {
			t.Fatalf("event filter: %d", len(r.list()))
		}
		for _, x := range r.list() {
			if x.(map[string]any)["event"] != "payment.failed" {
				t.Fatal("event filter leaked")
			}
		}
		if got := ids(get("?status=delivered")); len(got) != 1 || got[0] != all[0] {
			t.Fatalf("status=delivered: %v", got)
		}
		if got := ids(get("?status=failed&event=payment.completed")); len(got) != 1 || got[0] != all[1] {
			t.Fatalf("status=failed: %v", got)
		}
		if n := len(get("?status=pending&limit=100").list()); n != len(all)-2 {
			t.Fatalf("status=pending: %d", n)
		}
		// since/until are exclusive bounds on createdAt.
		since, until := t0.Add(24*time.Hour).Format(time.RFC3339), t0.Add(4*24*time.Hour).Format(time.RFC3339)
		got := ids(get("?limit=100&since=" + since + "&until=" + until))
		if len(got) != 2*len(kinds) || got[0] != all[4*len(kinds)-1] || got[len(got)-1] != all[2*len(kinds)] {
			t.Fatalf("since/until: %d items", len(got))
		}
		if n := len(get("?limit=100&since=" + t0.Add(-time.Second).Format(time.RFC3339Nano)).list()); n != len(all) {
			t.Fatalf("since before all: %d", n)
		}
		if n := len(get("?limit=100&until=2026-03-02").list()); n != len(kinds) {
			t.Fatalf("until a date: %d", n)
		}
		if n := len(get("?event=checkout.completed&since=2026-03-05T00:00:00%2B02:00&limit=100").list()); n != 6 {
			t.Fatalf("since with offset: %d", n)
		}
		expectField(t, get("?event=payment.exploded"), "event")
		expectField(t, get("?status=sent"), "status")
		expectField(t, get("?since=yesterday"), "since")
		expectField(t, get("?until=2026-13-01T00:00:00Z"), "until")
		expectField(t, get("?since="+until+"&until="+since), "until")
		r = get("?limit=0&status=x&event=y")
		for _, f := range []string{"limit", "status", "event"} {
			expectField(t, r, f)
		}
		for _, e := range api.WebhookEventTypes {
			expect(t, get("?event="+e), 200, "")
		}

		// The key's mode and merchant scope the list.
		lr := h.do("GET", "/api/events?limit=100", m.LiveKey, nil)
		expect(t, lr, 200, "")
		if got := ids(lr); len(got) != 1 || got[0] != liveIDs[0] {
			t.Fatalf("live key sees %v", got)
		}
		if n := len(h.do("GET", "/api/events?limit=100", other.TestKey, nil).list()); n != 1 {
			t.Fatalf("other merchant sees %d", n)
		}
		// A cursor of another merchant reveals nothing of theirs.
		if got := ids(h.do("GET", "/api/events?starting_after="+models.NewID(), other.TestKey, nil)); len(got) != 1 {
			t.Fatalf("other merchant with a cursor: %v", got)
		}
		// Credentials.
		expect(t, h.do("GET", "/api/events", "", nil), 401, "UNAUTHORIZED")
		expect(t, h.do("GET", "/api/events", "svc_sess_"+strings.Repeat("x", 40), nil), 401, "UNAUTHORIZED")
		// A dashboard session reads the events of the mode it names.
		if n := len(h.do("GET", "/api/events?mode=test&limit=100", other.Session, nil).list()); n != 1 {
			t.Fatalf("other merchant's session sees %d", n)
		}
		expect(t, h.do("GET", "/api/events", "svc_test_sk_"+strings.Repeat("x", 40), nil), 401, "UNAUTHORIZED")
	})
}
