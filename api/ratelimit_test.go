package api_test

import (
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/ratelimit"
)

// TestRateLimitWiring checks the limiter is mounted in front of every /api
// route and that the API reports failed authentications to it: after ten
// failures from one client, even a valid key is refused, while another
// client (told apart by X-Forwarded-For from a trusted proxy) is not.
func TestRateLimitWiring(t *testing.T) {
	st := storetest.Open(t, "sqlite")
	cfg := ratelimit.DefaultConfig()
	cfg.ExemptLoopback = false
	lim := ratelimit.New(ratelimit.NewMemoryStore(), cfg)
	h := newHarness(t, st, func(d *api.Deps) {
		d.Limiter = lim.Middleware()
		d.AuthFailures = lim
		d.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	get := func(ip, token string) *http.Response {
		req, _ := http.NewRequest("GET", h.http.URL+"/api/customers", nil)
		req.Header.Set("X-Forwarded-For", ip)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := h.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	m := h.signup() // from 127.0.0.1 itself
	res := get("203.0.113.7", m.TestKey)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("X-RateLimit-Limit") == "" {
		t.Fatalf("limited route must carry X-RateLimit-* headers: %d %v", res.StatusCode, res.Header)
	}
	reset, err := strconv.ParseInt(res.Header.Get("X-RateLimit-Reset"), 10, 64)
	if err != nil || reset < time.Now().UnixMilli() || reset > time.Now().Add(time.Hour).UnixMilli() {
		t.Fatalf("X-RateLimit-Reset must be Unix milliseconds: %q", res.Header.Get("X-RateLimit-Reset"))
	}
	for i := 0; i < 10; i++ {
		res := get("203.0.113.7", "svc_test_sk_wrongwrongwrongwrongwrongwrongwrongwr")
		res.Body.Close()
		if res.StatusCode != 401 {
			t.Fatalf("bad key %d: %d", i, res.StatusCode)
		}
	}
	res = get("203.0.113.7", m.TestKey)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 401 || !strings.Contains(string(body), "too many failed authentication attempts") || !strings.Contains(string(body), `"code":"UNAUTHORIZED"`) {
		t.Fatalf("blocked client with a valid key: %d %s", res.StatusCode, body)
	}
	res = get("198.51.100.9", m.TestKey)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("another client must not be blocked: %d", res.StatusCode)
	}
}
