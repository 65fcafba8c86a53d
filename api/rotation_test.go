package api_test

import (
	"testing"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/models/storetest"
)

// TestServerSecretRotation: PAYGATE_SECRET_KEY is replaced and the old one
// kept in PAYGATE_SECRET_KEY_PREVIOUS. API keys, dashboard sessions and
// quote tokens made under the old secret keep working; each credential used
// meanwhile is hashed again under the new secret, so it still works once the
// previous secret is dropped; one never used meanwhile does not.
func TestServerSecretRotation(t *testing.T) {
	const oldSecret, newSecret = "test-secret-test-secret-test-secret!", "rotated-secret-rotated-secret-rotated"
	st := storetest.Open(t, "sqlite")
	before := newHarness(t, st) // the harness's hasher uses oldSecret
	used, idle := before.signup(), before.signup()
	link := before.link(used.TestKey, nil)
	q := before.do("POST", "/api/checkout/quote", "", map[string]any{"linkId": link, "network": "base_sepolia",
		"customer": map[string]any{"country": "DE", "address": "Berlin"}})
	expect(t, q, 200, "")

	rotating := newHarness(t, st, func(d *api.Deps) {
		d.Hasher = auth.NewHasher(newSecret, oldSecret)
		d.Checkout.Hasher = d.Hasher
	})
	expect(t, rotating.do("GET", "/api/customers", used.TestKey, nil), 200, "")
	expect(t, rotating.do("GET", "/api/merchant", used.Session, nil), 200, "")
	r := rotating.do("POST", "/api/checkout/session", "", sessionRequest(link, q, evmB, "base_sepolia"))
	expect(t, r, 201, "")

	after := newHarness(t, st, func(d *api.Deps) {
		d.Hasher = auth.NewHasher(newSecret)
		d.Checkout.Hasher = d.Hasher
	})
	expect(t, after.do("GET", "/api/customers", used.TestKey, nil), 200, "")
	expect(t, after.do("GET", "/api/merchant", used.Session, nil), 200, "")
	expect(t, after.do("GET", "/api/customers", idle.TestKey, nil), 401, "UNAUTHORIZED")
	expect(t, after.do("GET", "/api/merchant", idle.Session, nil), 401, "UNAUTHORIZED")
}
