package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
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
	getPath := func(method, path, ip, token string) *http.Response {
		req, _ := http.NewRequest(method, h.http.URL+path, nil)
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
	get := func(ip, token string) *http.Response { return getPath("GET", "/api/customers", ip, token) }
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
	// The block holds on paths no route serves, and on a route's wrong
	// method, as on the routes.
	for _, probe := range [][2]string{{"GET", "/api/nothing-here"}, {"PUT", "/api/customers"}} {
		res = getPath(probe[0], probe[1], "203.0.113.7", m.TestKey)
		body, _ = io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 401 || !strings.Contains(string(body), "too many failed authentication attempts") {
			t.Fatalf("blocked client on %s %s: %d %s", probe[0], probe[1], res.StatusCode, body)
		}
	}
	res = get("198.51.100.9", m.TestKey)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("another client must not be blocked: %d", res.StatusCode)
	}
	for _, probe := range [][2]string{{"GET", "/api/nothing-here"}, {"PUT", "/api/customers"}} {
		res = getPath(probe[0], probe[1], "198.51.100.9", "")
		res.Body.Close()
		if want := map[string]int{"GET": 404, "PUT": 405}[probe[0]]; res.StatusCode != want || res.Header.Get("X-RateLimit-Limit") == "" {
			t.Fatalf("%s %s: %d, limit headers %q; want %d with them", probe[0], probe[1], res.StatusCode, res.Header.Get("X-RateLimit-Limit"), want)
		}
	}
	// Pages are not the API's: an unknown page path is not limited here.
	res = getPath("GET", "/nothing-here", "198.51.100.9", "")
	res.Body.Close()
	if res.Header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("a non-API path carries the API's limit headers")
	}
}

// TestLoginLimitedPerAccount: wrong passwords for one merchant from ten
// addresses (each under the address block) lock the account: the right
// password from an eleventh address is refused with SPEC's 401 envelope and
// the rate-limit headers, while another merchant signs in from that address.
// IPv6 clients count per /64: ten bad keys from ten addresses of one /64
// block a fresh address of it, not a neighbouring /64.
func TestLoginLimitedPerAccount(t *testing.T) {
	h := signInLimitedHarness(t)
	ann, bob := h.signup(), h.signup()
	send := func(method, path, ip, token string, body any) resp {
		t.Helper()
		req, _ := http.NewRequest(method, h.http.URL+path, nil)
		if body != nil {
			b, _ := json.Marshal(body)
			req, _ = http.NewRequest(method, h.http.URL+path, bytes.NewReader(b))
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("X-Forwarded-For", ip)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := h.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		validateResponse(t, req, res.StatusCode, res.Header, raw)
		out := resp{Status: res.StatusCode, Raw: string(raw), Header: res.Header}
		_ = json.Unmarshal(raw, &out.Body)
		return out
	}
	login := func(ip, email, password string) resp {
		return send("POST", "/api/auth/login", ip, "", map[string]any{"email": email, "password": password})
	}
	for i := 0; i < 10; i++ {
		expect(t, login(fmt.Sprintf("198.51.100.%d", i+1), ann.Email, "wrong password!"), 401, "UNAUTHORIZED")
	}
	r := login("203.0.113.77", strings.ToUpper(ann.Email), "correct horse battery")
	expect(t, r, 401, "UNAUTHORIZED")
	if !strings.Contains(r.str("message"), "too many failed sign-in attempts for this account") ||
		r.Header.Get("Retry-After") == "" || r.Header.Get("X-RateLimit-Limit") != "10" || r.Header.Get("X-RateLimit-Reset") == "" {
		t.Fatalf("locked account: %s %v", r.Raw, r.Header)
	}
	expect(t, login("203.0.113.77", bob.Email, "correct horse battery"), 200, "")
	expect(t, send("GET", "/api/customers", "198.51.100.1", ann.TestKey, nil), 200, "")

	for i := 0; i < 10; i++ {
		ip := fmt.Sprintf("2001:db8:1:2:%x::1", i)
		expect(t, send("GET", "/api/customers", ip, "svc_test_sk_wrongwrongwrongwrongwrongwrongwrongwr", nil), 401, "UNAUTHORIZED")
	}
	r = send("GET", "/api/customers", "2001:db8:1:2:ffff::9", bob.TestKey, nil)
	if r.Status != 401 || !strings.Contains(r.str("message"), "too many failed authentication attempts") {
		t.Fatalf("a fresh address of the blocked /64: %d %s", r.Status, r.Raw)
	}
	expect(t, send("GET", "/api/customers", "2001:db8:1:3::1", bob.TestKey, nil), 200, "")

	// A valid key sent to a dashboard-only route is refused (401), but it is
	// no failed authentication: eleven of them do not block the address,
	// whose key keeps working on the key routes.
	for i := 0; i < 11; i++ {
		r := send("GET", "/api/settlements", "198.51.100.200", bob.TestKey, nil)
		if r.Status != 401 || !strings.Contains(r.str("message"), "takes a session token") {
			t.Fatalf("a key on a session route: %d %s", r.Status, r.Raw)
		}
	}
	expect(t, send("GET", "/api/customers", "198.51.100.200", bob.TestKey, nil), 200, "")
}

// TestParallelGuessesAtOneAccount: thirty wrong passwords for one account
// sent at once from thirty addresses get ten password checks, as ten sent
// one after another do: the rest are refused as the locked account is.
// Before, the account's count was read before any of them had been
// counted (a check takes tens of milliseconds), and nearly all of them
// were checked.
func TestParallelGuessesAtOneAccount(t *testing.T) {
	h := signInLimitedHarness(t)
	parallelGuesses(t, h.signup().Email, h)
}

// TestParallelGuessesAcrossReplicas: the same thirty guesses sent at once
// to two API replicas sharing the store and the limiter's store (Redis in
// production): still ten checked. Before, the account's turn was per
// process: the replicas checked a guess each at once, both reading the
// count before either was recorded, and more than ten were checked.
func TestParallelGuessesAcrossReplicas(t *testing.T) {
	st, shared := storetest.Open(t, "sqlite"), ratelimit.NewMemoryStore()
	replica := func() *harness {
		cfg := ratelimit.DefaultConfig()
		cfg.ExemptLoopback = false
		lim := ratelimit.New(shared, cfg)
		return newHarness(t, st, func(d *api.Deps) {
			d.Limiter, d.AuthFailures, d.Accounts = lim.Middleware(), lim, lim
			d.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		})
	}
	a, b := replica(), replica()
	parallelGuesses(t, a.signup().Email, a, b)
}

// parallelGuesses sends thirty wrong passwords for email at once, from
// thirty addresses, spread over the API replicas hs: ten are checked, the
// other twenty refused as the account's lock.
func parallelGuesses(t *testing.T, email string, hs ...*harness) {
	t.Helper()
	var wg sync.WaitGroup
	answers := make([]string, 30)
	for i := range answers {
		h := hs[i%len(hs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := json.Marshal(map[string]any{"email": email, "password": "wrong password!"})
			req, _ := http.NewRequest("POST", h.http.URL+"/api/auth/login", bytes.NewReader(b))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
			res, err := h.http.Client().Do(req)
			if err != nil {
				answers[i] = err.Error()
				return
			}
			defer res.Body.Close()
			raw, _ := io.ReadAll(res.Body)
			answers[i] = fmt.Sprintf("%d %s", res.StatusCode, raw)
		}()
	}
	wg.Wait()
	checked, locked, busy := 0, 0, 0
	for _, a := range answers {
		switch {
		case strings.HasPrefix(a, "401 ") && strings.Contains(a, "invalid email or password"):
			checked++
		case strings.HasPrefix(a, "401 ") && strings.Contains(a, "too many failed sign-in attempts for this account"):
			locked++
		case strings.HasPrefix(a, "503 ") && strings.Contains(a, "too many sign-ins are being checked"):
			// Waited passwordWait for the account's turn (a slow machine
			// under -race checks ten slowly): refused, nothing checked.
			busy++
		default:
			t.Fatalf("answer %q", a)
		}
	}
	// Never more than ten checked; all ten when none had to give up waiting.
	if checked > 10 || checked == 0 || (busy == 0 && checked != 10) {
		t.Fatalf("%d passwords checked, %d refused as locked, %d refused as busy: want at most 10 checked (10 when none is busy)", checked, locked, busy)
	}
}

// signInLimitedHarness is an API on SQLite with the default limits (the
// address block and the per-account sign-in tier), loopback not exempt,
// the client address taken from X-Forwarded-For.
func signInLimitedHarness(t *testing.T) *harness {
	t.Helper()
	cfg := ratelimit.DefaultConfig()
	cfg.ExemptLoopback = false
	lim := ratelimit.New(ratelimit.NewMemoryStore(), cfg)
	return newHarness(t, storetest.Open(t, "sqlite"), func(d *api.Deps) {
		d.Limiter = lim.Middleware()
		d.AuthFailures = lim
		d.Accounts = lim
		d.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
}
