package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestMessagesKeepTheirShape: a BAD_REQUEST message is "field: reason"
// items joined by "; " (SPEC.md), and text the request supplied (a member
// name, a metadata key, an event's name) cannot add an item or move the
// split: before, a member named "name; amount" read as an error about
// amount, and an unknown member of a nested object lost its path.
func TestMessagesKeepTheirShape(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		link := map[string]any{"name": "T", "amount": 5, "network": "base_sepolia",
			"merchantWalletAddresses": map[string]any{"base_sepolia": "0x52908400098527886E0F7030069857D2E4169EE7"}}
		with := func(k string, v any) map[string]any {
			out := map[string]any{}
			for a, b := range link {
				out[a] = b
			}
			out[k] = v
			return out
		}
		long := strings.Repeat("x", 501)
		for _, c := range []struct {
			name, method, path string
			body               any
			field, message     string
		}{
			{"a member named with a separator", "POST", "/api/payment-links", with("name; amount", "n"),
				`["name\u003b\u0020amount"]`, `["name\u003b\u0020amount"]: is not a known field`},
			{"an empty member name", "POST", "/api/payment-links", with("", 1), `[""]`, `[""]: is not a known field`},
			{"an unknown member of a nested object", "POST", "/api/checkout/quote",
				map[string]any{"linkId": "x", "network": "base_sepolia", "customer": map[string]any{"country": "US", "bogus": 1}},
				"customer.bogus", "customer.bogus: is not a known field"},
			{"a wallet for a network named with a separator", "POST", "/api/payment-links",
				with("merchantWalletAddresses", map[string]any{"base_sepolia": "0x52908400098527886E0F7030069857D2E4169EE7", "x; y: z": "w"}),
				`merchantWalletAddresses["x\u003b\u0020y\u003a\u0020z"]`, ""},
			{"a metadata key with a separator", "POST", "/api/customers",
				map[string]any{"email": "q@example.com", "metadata": map[string]any{"a; b": long}},
				`metadata["a\u003b\u0020b"]`, `metadata["a\u003b\u0020b"]: must be at most 500 characters`},
			{"a metadata value with a control character", "POST", "/api/customers",
				map[string]any{"email": "q@example.com", "metadata": map[string]any{"k": "a\u001b[31mb"}},
				"metadata.k", "metadata.k: must not contain control characters"},
			{"a hosted checkout's metadata key with a control character", "POST", "/api/v1/checkouts",
				map[string]any{"name": "T", "amount": 5, "network": "base_sepolia", "metadata": map[string]any{"\u0007": "v"}},
				`metadata["\a"]`, `metadata["\a"]: must not contain control characters`},
			{"an unknown event with a separator", "POST", "/api/webhooks",
				map[string]any{"url": "https://93.184.215.14/hook", "mode": "test", "events": []any{"payment.completed; x: y"}},
				"events", ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				token := m.TestKey
				if c.path == "/api/webhooks" {
					token = m.Session
				}
				r := h.do(c.method, c.path, token, c.body)
				expectField(t, r, c.field)
				// One problem each: one item.
				if strings.Contains(r.str("message"), "; ") {
					t.Fatalf("message %q splits into several items", r.str("message"))
				}
				if c.message != "" && r.str("message") != c.message {
					t.Fatalf("message %q, want %q", r.str("message"), c.message)
				}
			})
		}
		if r := h.do("POST", "/api/customers", m.TestKey, map[string]any{"email": "q@example.com", "metadata": map[string]any{"k": "line one\nline two\tend"}}); r.Status != http.StatusCreated {
			t.Fatalf("a value with a newline and a tab: %s", r.Raw)
		}
	})
}
