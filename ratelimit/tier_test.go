package ratelimit

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// matchedTiers lists the default request tiers a request counts against.
func matchedTiers(method, p string) []string {
	var out []string
	for _, t := range DefaultTiers() {
		if !t.AuthFailures && t.Match(method, cleanPath(p)) {
			out = append(out, t.Name)
		}
	}
	return out
}

func TestDefaultTierMatching(t *testing.T) {
	g, cm, cp, km, wm, rd, hp := TierGlobal, TierCheckoutMutation, TierCheckoutPoll, TierKeyManagement, TierWebhookManagement, TierRead, TierHostedPageRead
	cases := []struct {
		method, path string
		want         []string
	}{
		{"POST", "/api/transactions", []string{g}},
		{"GET", "/api/transactions", []string{g, rd}},
		{"HEAD", "/api/transactions", []string{g, rd}},
		{"POST", "/api/checkout/session", []string{g, cm}},
		{"POST", "/api/checkout/submit", []string{g, cm}},
		{"POST", "/api/checkout/quote", []string{g, cm}},
		{"POST", "/api/checkout/session/s1/cancel", []string{g, cm}},
		{"GET", "/api/checkout/links/l1", []string{g, cm, rd}},
		{"GET", "/api/checkout/session/s1", []string{g, cp, rd}},
		{"GET", "/api/checkout/session/", []string{g, cm, rd}}, // cleaned to .../session: no id, not a poll
		{"OPTIONS", "/api/checkout/session", []string{g}},
		{"POST", "/api/developer/keys", []string{g, km}},
		{"GET", "/api/developer/keys", []string{g, km, rd}},
		{"POST", "/api/developer/keys/", []string{g, km}},
		{"POST", "/api//developer/keys", []string{g, km}},
		{"POST", "/api/developer/keysx", []string{g}},
		{"GET", "/api/webhooks", []string{g, wm, rd}},
		{"POST", "/api/webhooks/deliveries/d1/retry", []string{g, wm}},
		{"PATCH", "/api/webhooks/w1", []string{g, wm}},
		{"POST", "/api/checkout/../developer/keys", []string{g, km}},
		{"POST", "/pay/l1", []string{cm}},
		{"POST", "/checkout/s1/submit", []string{cm}},
		{"POST", "/checkout/s1/cancel", []string{cm}},
		{"GET", "/pay/l1", []string{hp}},
		{"HEAD", "/pay/l1", []string{hp}},
		{"GET", "/checkout/s1", []string{hp}},
		{"GET", "/checkout/s1/qr.svg", []string{hp}},
		{"GET", "/payx", nil},
		{"GET", "/static/abc/app.css", nil},
		{"GET", "/dashboard/login", nil},
		{"GET", "/apix", nil},
		{"GET", "/healthz", nil},
		{"GET", "/api", []string{g, rd}},
		{"POST", "/api/auth/signup", []string{g, TierSignUp}},
		{"POST", "/api/auth/signup/", []string{g, TierSignUp}},
		{"POST", "/api/auth/login", []string{g}},
		{"POST", "/api/upload", []string{g, TierUpload}},
		{"GET", "/api/upload", []string{g, rd}},
	}
	for _, c := range cases {
		if got := matchedTiers(c.method, c.path); !slices.Equal(got, c.want) {
			t.Errorf("%s %s: %v, want %v", c.method, c.path, got, c.want)
		}
	}
}

func TestSubject(t *testing.T) {
	l := New(NewMemoryStore(), Config{Enabled: true}) // per address
	l64 := New(NewMemoryStore(), DefaultConfig())     // per /64
	cases := []struct {
		in, want, want64 string
		loopback         bool
	}{
		{"203.0.113.9", "203.0.113.9", "203.0.113.9", false},
		{"::ffff:203.0.113.9", "203.0.113.9", "203.0.113.9", false},
		{"2001:db8::1", "2001:db8::1", "2001:db8::/64", false},
		{"fe80::1%eth0", "fe80::1", "fe80::/64", false},
		{"127.0.0.1", "127.0.0.1", "127.0.0.1", true},
		{"127.8.9.10", "127.8.9.10", "127.8.9.10", true},
		{"::1", "::1", "::/64", true},
		{"", "unknown", "unknown", false},
		{"not-an-ip", "unknown", "unknown", false},
	}
	for _, c := range cases {
		s, lb := l.subject(c.in)
		s64, _ := l64.subject(c.in)
		if s != c.want || s64 != c.want64 || lb != c.loopback {
			t.Errorf("subject(%q) = %q/%q loopback=%v, want %q/%q %v", c.in, s, s64, lb, c.want, c.want64, c.loopback)
		}
	}
}

func TestHumanDuration(t *testing.T) {
	for d, want := range map[string]string{"10s": "10 seconds", "1m0s": "1 minute", "5m0s": "5 minutes", "1s": "1 second", "2h0m0s": "2 hours", "90s": "90 seconds", "1.5s": "1.5s"} {
		dur, _ := time.ParseDuration(d)
		if got := humanDuration(dur); got != want {
			t.Errorf("humanDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// FuzzTierMatch: matching never panics and keeps its invariants for any
// method and path a client can send.
func FuzzTierMatch(f *testing.F) {
	for _, s := range []string{"/api/checkout/session/x", "/api//webhooks/", "/api/../api/developer/keys", "", "api", "/api/checkout/session/"} {
		f.Add("GET", s)
		f.Add("POST", s)
	}
	f.Fuzz(func(t *testing.T, method, p string) {
		got := matchedTiers(method, p)
		clean := cleanPath(p)
		global := slices.Contains(got, TierGlobal)
		if global != (clean == "/api" || strings.HasPrefix(clean, "/api/")) {
			t.Fatalf("%q %q: global=%v", method, p, global)
		}
		// Outside /api only the hosted pages are limited: their form posts
		// as checkout mutations (the pages apply the limiter to them), their
		// reads as hosted page reads.
		if len(got) > 0 && !global && !(isHostedPagePost(method, clean) && slices.Equal(got, []string{TierCheckoutMutation})) &&
			!(isHostedPageRead(method, clean) && slices.Equal(got, []string{TierHostedPageRead})) {
			t.Fatalf("%q %q: narrower tier without global: %v", method, p, got)
		}
		if slices.Contains(got, TierCheckoutPoll) && (slices.Contains(got, TierCheckoutMutation) || !slices.Contains(got, TierRead)) {
			t.Fatalf("%q %q: poll must exclude mutation and imply read: %v", method, p, got)
		}
	})
}

// FuzzSubject: any client address string maps to a bounded, stable subject
// that is safe inside a Redis hash tag.
func FuzzSubject(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "::1", "fe80::1%eth0", "::ffff:10.0.0.1", "{x}", ""} {
		f.Add(s)
	}
	l := New(NewMemoryStore(), Config{Enabled: true, IPv6PrefixBits: 56})
	f.Fuzz(func(t *testing.T, ip string) {
		s, _ := l.subject(ip)
		s2, _ := l.subject(ip)
		if s != s2 || s == "" || strings.ContainsAny(s, "{}") || len(s) > 64 {
			t.Fatalf("subject(%q) = %q", ip, s)
		}
	})
}
