package ratelimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// tierCase drives one request shape that a tier governs, and the tier it hits.
type tierCase struct {
	tier   string
	method string
	path   string
	limit  int
	window time.Duration
}

var tierCases = []tierCase{
	{TierGlobal, http.MethodPost, "/api/things", 100, 10 * time.Second},
	{TierCheckoutMutation, http.MethodPost, "/api/checkout/session", 10, time.Minute},
	{TierCheckoutMutation, http.MethodGet, "/api/checkout/links/l1", 10, time.Minute},
	{TierCheckoutPoll, http.MethodGet, "/api/checkout/session/s1", 30, time.Minute},
	{TierKeyManagement, http.MethodPost, "/api/developer/keys", 5, time.Minute},
	{TierWebhookManagement, http.MethodDelete, "/api/webhooks/w1", 10, time.Minute},
	{TierRead, http.MethodGet, "/api/things", 30, 10 * time.Second},
	{TierSignUp, http.MethodPost, "/api/auth/signup", 10, time.Hour},
	{TierUpload, http.MethodPost, "/api/upload", 30, time.Hour},
}

// TestTierBoundaryConcurrent: for every tier, a burst of 3N concurrent
// requests from one address gets exactly N through; the next one is 429; it
// stays 429 until one millisecond before the window frees, and passes at the
// instant it does.
func TestTierBoundaryConcurrent(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() Store) {
		for i, tc := range tierCases {
			t.Run(fmt.Sprintf("%s/%s_%s", tc.tier, tc.method, tc.path[5:]), func(t *testing.T) {
				clock := newClock()
				lim := New(open(), testConfig(), WithClock(clock.Now))
				srv := server(t, newEngine(t, lim, []string{"127.0.0.1"}))
				ip := fmt.Sprintf("198.51.100.%d", i+1)

				got := burst(t, []*httptest.Server{srv}, tc.method, tc.path, ip, 3*tc.limit)
				if got[http.StatusOK] != tc.limit || got[http.StatusTooManyRequests] != 2*tc.limit {
					t.Fatalf("burst of %d: got %v, want %d×200 and %d×429", 3*tc.limit, got, tc.limit, 2*tc.limit)
				}
				r := call(t, srv, tc.method, tc.path, ip)
				if r.code != http.StatusTooManyRequests {
					t.Fatalf("request N+1: status %d, want 429", r.code)
				}
				if h := r.header.Get("X-RateLimit-Limit"); h != strconv.Itoa(tc.limit) {
					t.Errorf("429 X-RateLimit-Limit = %q, want %d (tier %s)", h, tc.limit, tc.tier)
				}
				wantReset := t0.Add(tc.window).UnixMilli()
				if h := r.header.Get("X-RateLimit-Reset"); h != strconv.FormatInt(wantReset, 10) {
					t.Errorf("429 X-RateLimit-Reset = %q, want %d", h, wantReset)
				}

				clock.Set(t0.Add(tc.window - time.Millisecond))
				r = call(t, srv, tc.method, tc.path, ip)
				if r.code != http.StatusTooManyRequests {
					t.Fatalf("1ms before the window slides: status %d, want 429", r.code)
				}
				if r.header.Get("Retry-After") != "1" {
					t.Errorf("Retry-After 1ms before reset = %q, want 1", r.header.Get("Retry-After"))
				}
				clock.Set(t0.Add(tc.window))
				got = burst(t, []*httptest.Server{srv}, tc.method, tc.path, ip, 2*tc.limit)
				if got[http.StatusOK] != tc.limit {
					t.Fatalf("after the window slid: got %v, want %d×200", got, tc.limit)
				}
			})
		}
	})
}

// TestPollTierOutlivesReadTier: the checkout poll is under both the read tier
// (30/10 s) and the poll tier (30/min); when the read window has slid, the
// poll tier still refuses, and the 429 reports the poll tier.
func TestPollTierOutlivesReadTier(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() Store) {
		clock := newClock()
		lim := New(open(), testConfig(), WithClock(clock.Now))
		srv := server(t, newEngine(t, lim, []string{"127.0.0.1"}))
		const ip = "198.51.100.50"
		for i := 0; i < 30; i++ {
			if r := call(t, srv, "GET", "/api/checkout/session/s1", ip); r.code != 200 {
				t.Fatalf("poll %d: %d", i+1, r.code)
			}
		}
		clock.Advance(10 * time.Second)
		r := call(t, srv, "GET", "/api/checkout/session/s1", ip)
		if r.code != 429 {
			t.Fatalf("31st poll after 10 s: %d, want 429", r.code)
		}
		if r.header.Get("Retry-After") != "50" || r.header.Get("X-RateLimit-Limit") != "30" ||
			r.header.Get("X-RateLimit-Reset") != strconv.FormatInt(t0.Add(time.Minute).UnixMilli(), 10) {
			t.Errorf("headers = %v, want the poll tier (Retry-After 50)", r.header)
		}
		// Other reads are free again: the read window slid.
		if r := call(t, srv, "GET", "/api/things", ip); r.code != 200 {
			t.Fatalf("plain read after the read window slid: %d", r.code)
		}
	})
}

// TestRefusedRequestConsumesNoOtherTier: 5 key-management requests pass, 50
// more are refused by that tier; none of the 50 counted against the global
// tier, which still admits exactly 95 more.
func TestRefusedRequestConsumesNoOtherTier(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() Store) {
		clock := newClock()
		lim := New(open(), testConfig(), WithClock(clock.Now))
		srv := server(t, newEngine(t, lim, []string{"127.0.0.1"}))
		srvs := []*httptest.Server{srv}
		const ip = "198.51.100.60"
		if got := burst(t, srvs, "POST", "/api/developer/keys", ip, 55); got[200] != 5 || got[429] != 50 {
			t.Fatalf("key management burst: %v", got)
		}
		if got := burst(t, srvs, "POST", "/api/things", ip, 120); got[200] != 95 || got[429] != 25 {
			t.Fatalf("global burst after refused key requests: %v, want 95×200 and 25×429", got)
		}
	})
}

// TestReplicasShareLimit: two Limiters (two API replicas, two gin engines) on
// one Redis admit exactly the limit between them, and a block recorded by one
// replica is enforced by the other.
func TestReplicasShareLimit(t *testing.T) {
	c := testRedis(t)
	prefix := testPrefix(t, c)
	clock := newClock()
	var srvs []*httptest.Server
	var lims []*Limiter
	var stores []*RedisStore
	for i := 0; i < 2; i++ {
		st := NewRedisStore(c, prefix, WithRedisTimeout(10*time.Second))
		stores = append(stores, st)
		lim := New(st, testConfig(), WithClock(clock.Now))
		lims = append(lims, lim)
		srvs = append(srvs, server(t, newEngine(t, lim, []string{"127.0.0.1"})))
	}
	for _, tc := range tierCases {
		ip := "203.0.113.10"
		t.Run(tc.tier+"_"+tc.method+tc.path, func(t *testing.T) {
			clock.Advance(time.Hour) // fresh windows for each case
			got := burst(t, srvs, tc.method, tc.path, ip, 3*tc.limit)
			if got[200] != tc.limit || got[429] != 2*tc.limit {
				t.Fatalf("burst over two replicas: %v, want %d×200", got, tc.limit)
			}
		})
	}

	clock.Advance(time.Hour)
	const attacker = "203.0.113.66"
	for i := 0; i < 10; i++ {
		if err := lims[i%2].RecordAuthFailure(context.Background(), attacker); err != nil {
			t.Fatal(err)
		}
	}
	for i, srv := range srvs {
		if r := call(t, srv, "GET", "/api/protected", attacker, "Authorization", goodKey); r.code != 401 {
			t.Errorf("replica %d: blocked address got %d, want 401", i, r.code)
		}
	}
	for i, st := range stores {
		if st.Degraded() {
			t.Errorf("replica %d fell back to memory", i)
		}
	}
}

// TestBruteForceBlock: ten failed authentications from one address block it
// (even with a valid key) with SPEC's 401 until the oldest failure leaves the
// five-minute window; other addresses are untouched.
func TestBruteForceBlock(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() Store) {
		clock := newClock()
		lim := New(open(), testConfig(), WithClock(clock.Now))
		srv := server(t, newEngine(t, lim, []string{"127.0.0.1"}))
		const attacker, bystander = "192.0.2.1", "192.0.2.2"

		// Failures one second apart: t0, t0+1s, ..., t0+9s.
		for i := 0; i < 10; i++ {
			r := call(t, srv, "GET", "/api/protected", attacker, "Authorization", "Bearer svc_test_sk_wrong")
			if r.code != 401 || r.body != `{"code":"UNAUTHORIZED","message":"invalid or revoked API key","status":"error"}` {
				t.Fatalf("failure %d: %d %s (should reach the auth check)", i+1, r.code, r.body)
			}
			clock.Advance(time.Second)
		}
		// Now t0+10s: blocked until t0+5m (the first failure leaves the window).
		r := call(t, srv, "GET", "/api/protected", attacker, "Authorization", goodKey)
		want := `{"status":"error","message":"too many failed authentication attempts from this address; try again in 290 seconds","code":"UNAUTHORIZED"}`
		if r.code != 401 || r.body != want {
			t.Fatalf("blocked request: %d %s\nwant 401 %s", r.code, r.body, want)
		}
		if r.header.Get("Retry-After") != "290" ||
			r.header.Get("X-RateLimit-Reset") != strconv.FormatInt(t0.Add(5*time.Minute).UnixMilli(), 10) {
			t.Errorf("blocked headers: %v", r.header)
		}
		// Every route is refused, not only authenticated ones.
		if r := call(t, srv, "POST", "/api/checkout/session", attacker); r.code != 401 {
			t.Errorf("blocked address on a public route: %d", r.code)
		}
		if r := call(t, srv, "GET", "/api/protected", bystander, "Authorization", goodKey); r.code != 200 {
			t.Errorf("other address: %d, want 200", r.code)
		}

		clock.Set(t0.Add(5*time.Minute - time.Millisecond))
		if r := call(t, srv, "GET", "/api/protected", attacker, "Authorization", goodKey); r.code != 401 {
			t.Fatalf("1ms before the block ends: %d", r.code)
		}
		clock.Set(t0.Add(5 * time.Minute))
		if r := call(t, srv, "GET", "/api/protected", attacker, "Authorization", goodKey); r.code != 200 {
			t.Fatalf("block over: %d %s", r.code, r.body)
		}
		// Nine failures remain in the window: one more blocks again, until
		// the second failure (t0+1s) leaves it.
		call(t, srv, "GET", "/api/protected", attacker)
		r = call(t, srv, "GET", "/api/protected", attacker, "Authorization", goodKey)
		if r.code != 401 || r.header.Get("Retry-After") != "1" {
			t.Fatalf("re-blocked: %d Retry-After %q", r.code, r.header.Get("Retry-After"))
		}
		clock.Set(t0.Add(5*time.Minute + time.Second))
		if r := call(t, srv, "GET", "/api/protected", attacker, "Authorization", goodKey); r.code != 200 {
			t.Fatalf("after the second failure left the window: %d", r.code)
		}
	})
}

// TestBlockedRequestsConsumeNothing: requests refused by the block are not
// counted against any tier.
func TestBlockedRequestsConsumeNothing(t *testing.T) {
	clock := newClock()
	lim := New(NewMemoryStore(), testConfig(), WithClock(clock.Now))
	srv := server(t, newEngine(t, lim, []string{"127.0.0.1"}))
	const ip = "192.0.2.9"
	for i := 0; i < 10; i++ {
		_ = lim.RecordAuthFailure(context.Background(), ip)
	}
	for i := 0; i < 50; i++ {
		if r := call(t, srv, "POST", "/api/developer/keys", ip); r.code != 401 {
			t.Fatalf("blocked: %d", r.code)
		}
	}
	clock.Advance(5 * time.Minute)
	if got := burst(t, []*httptest.Server{srv}, "POST", "/api/developer/keys", ip, 10); got[200] != 5 {
		t.Fatalf("after the block: %v, want the full 5", got)
	}
}

// TestHeaders checks X-RateLimit-* on admitted and refused requests, and the
// exact 429 body.
func TestHeaders(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() Store) {
		clock := newClock()
		lim := New(open(), testConfig(), WithClock(clock.Now))
		srv := server(t, newEngine(t, lim, []string{"127.0.0.1"}))
		ms := func(d time.Duration) string { return strconv.FormatInt(t0.Add(d).UnixMilli(), 10) }
		check := func(r response, code int, limit, remaining, reset string) {
			t.Helper()
			if r.code != code {
				t.Fatalf("status %d, want %d (%s)", r.code, code, r.body)
			}
			got := [3]string{r.header.Get("X-RateLimit-Limit"), r.header.Get("X-RateLimit-Remaining"), r.header.Get("X-RateLimit-Reset")}
			if want := [3]string{limit, remaining, reset}; got != want {
				t.Errorf("Limit/Remaining/Reset = %v, want %v", got, want)
			}
		}

		// GET under /api: global 99 left, read 29 left: read is reported.
		check(call(t, srv, "GET", "/api/things", "192.0.2.20"), 200, "30", "29", ms(10*time.Second))
		clock.Advance(1500 * time.Millisecond)
		check(call(t, srv, "GET", "/api/things", "192.0.2.20"), 200, "30", "28", ms(10*time.Second))
		// POST: only global.
		clock.Set(t0)
		check(call(t, srv, "POST", "/api/things", "192.0.2.21"), 200, "100", "99", ms(10*time.Second))
		// Key management: 4 left of 5 beats 99 of 100.
		check(call(t, srv, "POST", "/api/developer/keys", "192.0.2.22"), 200, "5", "4", ms(time.Minute))
		// Poll: read and poll both 29 left; the poll frees later, so it is reported.
		check(call(t, srv, "GET", "/api/checkout/session/s1", "192.0.2.23"), 200, "30", "29", ms(time.Minute))

		// The sixth key request at t0+2.5s is refused until t0+60s.
		for i := 0; i < 4; i++ {
			call(t, srv, "POST", "/api/developer/keys", "192.0.2.22")
		}
		clock.Set(t0.Add(2500 * time.Millisecond))
		r := call(t, srv, "POST", "/api/developer/keys", "192.0.2.22")
		check(r, 429, "5", "0", ms(time.Minute))
		if r.header.Get("Retry-After") != "58" { // 57.5 s, rounded up
			t.Errorf("Retry-After = %q, want 58", r.header.Get("Retry-After"))
		}
		want := `{"status":"error","message":"rate limit exceeded: 5 requests per 1 minute; try again in 58 seconds","code":"RATE_LIMITED","retryAfter":58}`
		if r.body != want {
			t.Errorf("429 body:\n got %s\nwant %s", r.body, want)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
			t.Errorf("Content-Type %q", ct)
		}
	})
}

// TestLoopbackExemption: loopback callers are exempt by default (no limits, no
// headers, no block) and limited when ExemptLoopback is off. A proxy on
// loopback does not exempt the client it forwards for.
func TestLoopbackExemption(t *testing.T) {
	for _, exempt := range []bool{true, false} {
		t.Run(fmt.Sprintf("exempt=%v", exempt), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ExemptLoopback = exempt
			lim := New(NewMemoryStore(), cfg, WithClock(newClock().Now))
			srv := server(t, newEngine(t, lim, nil)) // no trusted proxies: client is 127.0.0.1
			for _, ip := range []string{"127.0.0.1", "::1", "::ffff:127.0.0.1"} {
				_ = lim.RecordAuthFailure(context.Background(), ip)
			}
			got := burst(t, []*httptest.Server{srv}, "POST", "/api/developer/keys", "", 20)
			r := call(t, srv, "POST", "/api/things", "")
			if exempt {
				if got[200] != 20 || r.code != 200 || r.header.Get("X-RateLimit-Limit") != "" {
					t.Fatalf("exempt loopback: burst %v, then %d with headers %v", got, r.code, r.header)
				}
			} else if got[200] != 5 || got[429] != 15 {
				t.Fatalf("limited loopback: burst %v, want 5×200", got)
			}
		})
	}
	t.Run("forwarded client of a loopback proxy is not exempt", func(t *testing.T) {
		lim := New(NewMemoryStore(), DefaultConfig(), WithClock(newClock().Now))
		srv := server(t, newEngine(t, lim, []string{"127.0.0.1"}))
		if got := burst(t, []*httptest.Server{srv}, "POST", "/api/developer/keys", "203.0.113.1", 8); got[200] != 5 {
			t.Fatalf("forwarded client: %v, want 5×200", got)
		}
	})
}

// TestTrustedProxyXFF: X-Forwarded-For picks the client only when the peer is
// a trusted proxy (engine.SetTrustedProxies); otherwise a client cannot dodge
// its limit by inventing addresses.
func TestTrustedProxyXFF(t *testing.T) {
	t.Run("trusted", func(t *testing.T) {
		lim := New(NewMemoryStore(), testConfig(), WithClock(newClock().Now))
		srv := server(t, newEngine(t, lim, []string{"127.0.0.1/32"}))
		for i := 0; i < 5; i++ {
			call(t, srv, "POST", "/api/developer/keys", "203.0.113.7")
		}
		if r := call(t, srv, "POST", "/api/developer/keys", "203.0.113.7"); r.code != 429 {
			t.Fatalf("sixth from 203.0.113.7: %d", r.code)
		}
		// The rightmost untrusted hop is the client: a spoofed left part is ignored.
		if r := call(t, srv, "POST", "/api/developer/keys", "10.9.9.9, 203.0.113.7"); r.code != 429 {
			t.Fatalf("spoofed prefix in XFF: %d, want 429", r.code)
		}
		if r := call(t, srv, "POST", "/api/developer/keys", "203.0.113.8"); r.code != 200 {
			t.Fatalf("another forwarded client: %d", r.code)
		}
	})
	t.Run("untrusted", func(t *testing.T) {
		lim := New(NewMemoryStore(), testConfig(), WithClock(newClock().Now))
		srv := server(t, newEngine(t, lim, []string{"10.0.0.1"}))
		codes := map[int]int{}
		for i := 0; i < 8; i++ {
			codes[call(t, srv, "POST", "/api/developer/keys", fmt.Sprintf("203.0.113.%d", 100+i)).code]++
		}
		if codes[200] != 5 || codes[429] != 3 {
			t.Fatalf("rotating XFF from an untrusted peer: %v, want 5×200 then 429", codes)
		}
	})
}

// TestDisabled: a disabled limiter neither limits nor records.
func TestDisabled(t *testing.T) {
	cfg := testConfig()
	cfg.Enabled = false
	lim := New(NewMemoryStore(), cfg)
	srv := server(t, newEngine(t, lim, nil))
	for i := 0; i < 20; i++ {
		_ = lim.RecordAuthFailure(context.Background(), "127.0.0.1")
	}
	if got := burst(t, []*httptest.Server{srv}, "POST", "/api/developer/keys", "", 20); got[200] != 20 {
		t.Fatalf("disabled: %v", got)
	}
}

// TestIPv6Prefix: with IPv6PrefixBits 64, addresses of one /64 share limits.
func TestIPv6Prefix(t *testing.T) {
	for _, bits := range []int{0, 64} {
		cfg := testConfig()
		cfg.IPv6PrefixBits = bits
		lim := New(NewMemoryStore(), cfg, WithClock(newClock().Now))
		srv := server(t, newEngine(t, lim, []string{"127.0.0.1"}))
		codes := map[int]int{}
		for i := 0; i < 6; i++ {
			codes[call(t, srv, "POST", "/api/developer/keys", fmt.Sprintf("2001:db8::%x", i+1)).code]++
		}
		if want := map[int]int{200: 6}; bits == 64 {
			want = map[int]int{200: 5, 429: 1}
			if fmt.Sprint(codes) != fmt.Sprint(want) {
				t.Errorf("bits=%d: %v, want %v", bits, codes, want)
			}
		} else if fmt.Sprint(codes) != fmt.Sprint(want) {
			t.Errorf("bits=%d: %v, want %v", bits, codes, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	bad := map[string]func(*Config){
		"empty name":     func(c *Config) { c.Tiers[0].Name = "" },
		"brace in name":  func(c *Config) { c.Tiers[0].Name = "a{b" },
		"duplicate":      func(c *Config) { c.Tiers[1].Name = c.Tiers[0].Name },
		"zero limit":     func(c *Config) { c.Tiers[0].Limit = 0 },
		"sub-ms window":  func(c *Config) { c.Tiers[0].Window = 1500 * time.Microsecond },
		"no match":       func(c *Config) { c.Tiers[0].Match = nil },
		"two auth tiers": func(c *Config) { c.Tiers[0].AuthFailures = true },
		"ipv6 bits":      func(c *Config) { c.IPv6PrefixBits = 129 },
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for name, mutate := range bad {
		c := DefaultConfig()
		mutate(&c)
		if c.Validate() == nil {
			t.Errorf("%s: Validate accepted it", name)
		}
	}
}

// TestPageReadsSkipManagementTiers: the dashboard's own reads (GET marked
// with PageRead in process) count against the global tier only: opening
// the webhooks or developers page a dozen times a minute is fine, as are
// more reads in ten seconds than the read tier's 30 (a page sends about
// six), while the same GETs from a client stop at the management and read
// tiers' limits, and a page's mutation (a POST, even marked) still counts.
func TestPageReadsSkipManagementTiers(t *testing.T) {
	lim := New(NewMemoryStore(), testConfig())
	e := newEngine(t, lim, nil)
	addr := "198.51.100.70:1234"
	do := func(method, path string, page bool) int {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = addr
		if page {
			req = req.WithContext(PageRead(req.Context()))
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		return w.Code
	}
	for i := 0; i < 12; i++ { // 24 reads: within the read tier's 30 / 10 s
		if got := do(http.MethodGet, "/api/webhooks", true); got != http.StatusOK {
			t.Fatalf("page read %d of the webhooks list: %d", i+1, got)
		}
		if got := do(http.MethodGet, "/api/developer/keys", true); got != http.StatusOK {
			t.Fatalf("page read %d of the keys: %d", i+1, got)
		}
	}
	for i := 0; i < 5; i++ {
		if got := do(http.MethodPost, "/api/developer/keys", true); got != http.StatusOK {
			t.Fatalf("key request %d: %d", i+1, got)
		}
	}
	if got := do(http.MethodPost, "/api/developer/keys", true); got != http.StatusTooManyRequests {
		t.Fatalf("the sixth key mutation of a minute: %d, want 429", got)
	}
	for i := 0; i < 20; i++ { // 44 page reads in all: past the read tier's 30
		if got := do(http.MethodGet, "/api/things", true); got != http.StatusOK {
			t.Fatalf("page read %d of the things: %d", 25+i, got)
		}
	}
	// A client's reads stop at the read tier's 30.
	addr = "198.51.100.72:1234"
	for i := 0; i < 30; i++ {
		if got := do(http.MethodGet, "/api/things", false); got != http.StatusOK {
			t.Fatalf("client read %d: %d", i+1, got)
		}
	}
	if got := do(http.MethodGet, "/api/things", false); got != http.StatusTooManyRequests {
		t.Fatalf("the 31st client read in ten seconds: %d, want 429", got)
	}
	// A client's own reads of the webhooks list stop at ten.
	addr = "198.51.100.71:1234"
	for i := 0; i < 10; i++ {
		do(http.MethodGet, "/api/webhooks", false)
	}
	if got := do(http.MethodGet, "/api/webhooks", false); got != http.StatusTooManyRequests {
		t.Fatalf("the eleventh client read of the webhooks list: %d, want 429", got)
	}
}
