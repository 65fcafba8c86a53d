package logging_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/paygate/paygate/logging"
)

var prefixes = []string{"svc_test_sk_", "svc_live_sk_", "svc_sess_", "whsec_"}

func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q", l)
		}
		out = append(out, m)
	}
	return out
}

func TestRedactsCredentialsEverywhere(t *testing.T) {
	var buf bytes.Buffer
	log := logging.NewJSON(&buf, slog.LevelDebug)
	key := "svc_test_sk_" + strings.Repeat("a1B2", 8)
	live := "svc_live_sk_" + strings.Repeat("Z9", 16)
	sess := "svc_sess_" + strings.Repeat("q", 40)
	sec := "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw+/="
	type payload struct{ Inner string }
	log.With("header", "Bearer "+live).WithGroup("g").Info("got "+key,
		"err", errors.New("bad secret "+sec),
		"nested", slog.GroupValue(slog.String("tok", sess)),
		"struct", payload{Inner: key},
		"password", "correct horse battery",
		"bytes", []byte(sess),
	)
	out := buf.String()
	for _, p := range prefixes {
		if strings.Contains(out, p) {
			t.Errorf("%s leaked: %s", p, out)
		}
	}
	for _, secret := range []string{"a1B2a1B2", "Z9Z9", "qqqq", "MfKQ9r8", "correct horse"} {
		if strings.Contains(out, secret) {
			t.Errorf("secret material %q leaked: %s", secret, out)
		}
	}
	for _, mask := range []string{"[REDACTED_TEST_KEY]", "[REDACTED_LIVE_KEY]", "[REDACTED_SESSION]", "[REDACTED_WEBHOOK_SECRET]"} {
		if !strings.Contains(out, mask) {
			t.Errorf("mask %s missing: %s", mask, out)
		}
	}
	// Ordinary values pass untouched and keep their types.
	buf.Reset()
	log.Info("plain", "n", 3, "route", "/api/payment-links/:id", "tokenAddress", "0xabc", "list", []string{"a", "b"})
	m := lines(t, &buf)[0]
	if m["n"] != 3.0 || m["route"] != "/api/payment-links/:id" || m["tokenAddress"] != "0xabc" {
		t.Fatalf("ordinary attributes changed: %v", m)
	}
	if l, ok := m["list"].([]any); !ok || len(l) != 2 {
		t.Fatalf("a slice lost its shape: %v", m["list"])
	}
}

func TestRequestIDFromContext(t *testing.T) {
	var buf bytes.Buffer
	log := logging.NewJSON(&buf, slog.LevelInfo)
	ctx := logging.WithRequestID(context.Background(), "req_123")
	log.InfoContext(ctx, "handler line")
	log.InfoContext(ctx, "explicit", "requestId", "req_123")
	log.With("requestId", "req_123").InfoContext(ctx, "with attrs")
	log.Info("no request")
	got := lines(t, &buf)
	for i, want := range []string{"req_123", "req_123", "req_123", ""} {
		id, _ := got[i]["requestId"].(string)
		if id != want {
			t.Errorf("line %d requestId %q, want %q: %v", i, id, want, got[i])
		}
	}
	// No line carries the key twice.
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if strings.Count(l, `"requestId"`) > 1 {
			t.Errorf("requestId repeated: %s", l)
		}
	}
	if logging.RequestID(context.Background()) != "" || logging.RequestID(ctx) != "req_123" {
		t.Fatal("RequestID")
	}
}

func TestScrub(t *testing.T) {
	for in, want := range map[string]string{
		"Authorization: Bearer svc_test_sk_abc-DEF_123.": "Authorization: Bearer [REDACTED_TEST_KEY]",
		"nothing here":                 "nothing here",
		"svc_other_thing":              "svc_other_thing",
		"a whsec_AAA= b svc_sess_x":    "a [REDACTED_WEBHOOK_SECRET] b [REDACTED_SESSION]",
		"hint: Bearer svc_live_sk_...": "hint: Bearer [REDACTED_LIVE_KEY]",
	} {
		if got := logging.Scrub(in); got != want {
			t.Errorf("Scrub(%q) = %q, want %q", in, got, want)
		}
	}
}
