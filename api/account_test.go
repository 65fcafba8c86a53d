package api_test

import (
	"strings"
	"testing"
)

func TestSignupLoginLogout(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		body := map[string]any{"email": "Owner@Shop.example", "password": "123456789012", "businessName": "Shop"}
		r := h.do("POST", "/api/auth/signup", "", body)
		expect(t, r, 201, "")
		d := r.data()
		if !strings.HasPrefix(r.str("data", "sessionToken"), "svc_sess_") || !strings.HasPrefix(r.str("data", "testKey", "fullKey"), "svc_test_sk_") {
			t.Fatalf("signup data %v", d)
		}
		if r.str("data", "merchant", "email") != "owner@shop.example" || r.str("data", "merchant", "kybStatus") != "none" {
			t.Fatalf("merchant %v", d["merchant"])
		}
		expect(t, h.do("POST", "/api/auth/signup", "", body), 409, "CONFLICT")

		// Bounds: password 11 characters is refused, 12 accepted (above).
		short := map[string]any{"email": "x@shop.example", "password": "12345678901", "businessName": "S"}
		expectField(t, h.do("POST", "/api/auth/signup", "", short), "password")
		expectField(t, h.do("POST", "/api/auth/signup", "", map[string]any{"email": "not-an-email", "password": "123456789012", "businessName": "S"}), "email")
		expectField(t, h.do("POST", "/api/auth/signup", "", map[string]any{"email": "y@shop.example", "password": "123456789012"}), "businessName")
		expectField(t, h.do("POST", "/api/auth/signup", "", "{"), "body")
		expectField(t, h.do("POST", "/api/auth/signup", "", ""), "body")

		r = h.do("POST", "/api/auth/login", "", map[string]any{"email": "owner@shop.example", "password": "123456789012"})
		expect(t, r, 200, "")
		sess := r.str("data", "sessionToken")
		if sess == "" || r.str("data", "expiresAt") == "" || r.str("data", "merchant", "id") == "" {
			t.Fatalf("login %s", r.Raw)
		}
		expect(t, h.do("POST", "/api/auth/login", "", map[string]any{"email": "owner@shop.example", "password": "wrong-password!"}), 401, "UNAUTHORIZED")
		expect(t, h.do("POST", "/api/auth/login", "", map[string]any{"email": "nobody@shop.example", "password": "wrong-password!"}), 401, "UNAUTHORIZED")
		expectField(t, h.do("POST", "/api/auth/login", "", map[string]any{"email": "owner@shop.example"}), "password")

		expect(t, h.do("GET", "/api/merchant", sess, nil), 200, "")
		r = h.do("POST", "/api/auth/logout", sess, nil)
		expect(t, r, 200, "")
		if r.str("message") == "" {
			t.Fatal("logout must answer a message")
		}
		expect(t, h.do("GET", "/api/merchant", sess, nil), 401, "UNAUTHORIZED")
		expect(t, h.do("POST", "/api/auth/logout", sess, nil), 401, "UNAUTHORIZED")

		// Two sessions sign out with one Idempotency-Key (a key is the
		// merchant's): each is signed out, the second not answered from
		// the first's stored response.
		var two []string
		for range 2 {
			r := h.do("POST", "/api/auth/login", "", map[string]any{"email": "owner@shop.example", "password": "123456789012"})
			expect(t, r, 200, "")
			two = append(two, r.str("data", "sessionToken"))
		}
		for _, sess := range two {
			r := h.doWith("POST", "/api/auth/logout", sess, nil, map[string]string{"Idempotency-Key": "sign-out"})
			expect(t, r, 200, "")
			if r.Header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("a sign-out answered from a stored response: %v", r.Header)
			}
			expect(t, h.do("GET", "/api/merchant", sess, nil), 401, "UNAUTHORIZED")
		}
	})
}

func TestEmailBounds(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		local := strings.Repeat("a", 64)
		domain := strings.Repeat("b", 319-64-1-4) + ".com" // 319 characters in all
		ok := local + "@" + domain
		if len(ok) != 319 {
			t.Fatalf("len %d", len(ok))
		}
		expect(t, h.do("POST", "/api/customers", m.TestKey, map[string]any{"email": ok}), 201, "")
		tooLong := local + "@" + "c" + domain // 320 characters
		expectField(t, h.do("POST", "/api/customers", m.TestKey, map[string]any{"email": tooLong}), "email")
		for _, bad := range []string{"plain", "a@b", "a@@b.com", "A <a@b.com>", "a@b.com.", " "} {
			expectField(t, h.do("POST", "/api/customers", m.TestKey, map[string]any{"email": bad}), "email")
		}
	})
}

func TestMerchantProfile(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		r := h.do("GET", "/api/merchant", m.Session, nil)
		expect(t, r, 200, "")
		if r.str("data", "wallets", "evm") != evmA || r.str("data", "wallets", "solana") != solA {
			t.Fatalf("wallets %s", r.Raw)
		}
		r = h.do("PATCH", "/api/merchant", m.Session, map[string]any{"businessName": "New Name"})
		expect(t, r, 200, "")
		if r.str("data", "businessName") != "New Name" || r.str("data", "wallets", "evm") != evmA {
			t.Fatalf("patch changed more than sent: %s", r.Raw)
		}
		expectField(t, h.do("PATCH", "/api/merchant", m.Session, map[string]any{"wallets": map[string]any{"evm": "0x1234"}}), "wallets.evm")
		// A mixed-case address with a wrong EIP-55 checksum is refused.
		expectField(t, h.do("PATCH", "/api/merchant", m.Session, map[string]any{"wallets": map[string]any{"evm": "0x52908400098527886E0F7030069857D2E4169Ee7"}}), "wallets.evm")
		expectField(t, h.do("PATCH", "/api/merchant", m.Session, map[string]any{"wallets": map[string]any{"solana": "0OIl"}}), "wallets.solana")
		expectField(t, h.do("PATCH", "/api/merchant", m.Session, map[string]any{"businessName": ""}), "businessName")
		expect(t, h.do("GET", "/api/merchant", m.TestKey, nil), 401, "UNAUTHORIZED")

		r = h.do("PATCH", "/api/merchant/logo", m.Session, map[string]any{"logoUrl": "https://cdn.example.com/logo.png"})
		expect(t, r, 200, "")
		if r.str("message") == "" {
			t.Fatal("logo answers a message")
		}
		if got := h.do("GET", "/api/merchant", m.Session, nil).str("data", "logoUrl"); got != "https://cdn.example.com/logo.png" {
			t.Fatalf("logo %q", got)
		}
		expectField(t, h.do("PATCH", "/api/merchant/logo", m.Session, map[string]any{"logoUrl": "javascript:alert(1)"}), "logoUrl")
		expectField(t, h.do("PATCH", "/api/merchant/logo", m.Session, map[string]any{}), "logoUrl")
		expect(t, h.do("PATCH", "/api/merchant/logo", "", map[string]any{"logoUrl": "https://x.example/a.png"}), 401, "UNAUTHORIZED")
	})
}

func TestDeveloperKeys(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		// The signup key works on key routes.
		expect(t, h.do("GET", "/api/customers", m.TestKey, nil), 200, "")

		r := h.do("POST", "/api/developer/keys", m.Session, map[string]any{"keyType": "test"})
		expect(t, r, 201, "")
		newKey := r.str("data", "fullKey")
		if !strings.HasPrefix(newKey, "svc_test_sk_") || r.str("data", "keyType") != "test" ||
			r.str("data", "keyPrefix") != newKey[:16] || r.str("data", "keySuffix") != newKey[len(newKey)-4:] {
			t.Fatalf("created key %s", r.Raw)
		}
		// Regenerating revoked the signup key at once.
		old := h.do("GET", "/api/customers", m.TestKey, nil)
		expect(t, old, 401, "UNAUTHORIZED")
		if old.str("hint") == "" {
			t.Fatal("401 should carry a hint")
		}
		expect(t, h.do("GET", "/api/customers", newKey, nil), 200, "")

		// Live keys need an approved KYB application.
		expect(t, h.do("POST", "/api/developer/keys", m.Session, map[string]any{"keyType": "live"}), 403, "FORBIDDEN")
		m = h.withLive(m)
		if !strings.HasPrefix(m.LiveKey, "svc_live_sk_") {
			t.Fatalf("live key %q", m.LiveKey)
		}

		// The listing is masked: prefix and suffix only, one per type.
		r = h.do("GET", "/api/developer/keys", m.Session, nil)
		expect(t, r, 200, "")
		list := r.list()
		if len(list) != 2 {
			t.Fatalf("want 2 keys, got %s", r.Raw)
		}
		for _, it := range list {
			k := it.(map[string]any)
			if _, leaked := k["fullKey"]; leaked {
				t.Fatal("listing must not show full keys")
			}
			if strings.Contains(r.Raw, newKey) || strings.Contains(r.Raw, m.LiveKey) {
				t.Fatal("listing leaks a key")
			}
			if k["createdAt"] == nil || k["keyPrefix"] == "" || len(k["keySuffix"].(string)) != 4 {
				t.Fatalf("masked key %v", k)
			}
		}
		expectField(t, h.do("POST", "/api/developer/keys", m.Session, map[string]any{"keyType": "prod"}), "keyType")
		expectField(t, h.do("POST", "/api/developer/keys", m.Session, map[string]any{}), "keyType")
		// Keys and sessions are not interchangeable.
		expect(t, h.do("GET", "/api/developer/keys", newKey, nil), 401, "UNAUTHORIZED")
		expect(t, h.do("POST", "/api/developer/keys", newKey, map[string]any{"keyType": "test"}), 401, "UNAUTHORIZED")
		// A session acts on KEY routes in ?mode= (test by default); live
		// needs an approved KYB application, as a live key does.
		expect(t, h.do("GET", "/api/customers", m.Session, nil), 200, "")
		expect(t, h.do("GET", "/api/customers?mode=test", m.Session, nil), 200, "")
		expect(t, h.do("GET", "/api/customers?mode=live", h.signup().Session, nil), 403, "FORBIDDEN")
		expectField(t, h.do("GET", "/api/customers?mode=prod", m.Session, nil), "mode")
		expect(t, h.do("GET", "/api/customers", "svc_sess_00000000000000000000000000000dead", nil), 401, "UNAUTHORIZED")
		expect(t, h.do("GET", "/api/customers", "svc_test_sk_doesnotexist000000000000000000000", nil), 401, "UNAUTHORIZED")
		expect(t, h.do("GET", "/api/customers", "garbage", nil), 401, "UNAUTHORIZED")
		expect(t, h.do("GET", "/api/customers", "", nil), 401, "UNAUTHORIZED")
	})
}

func TestKYB(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		expect(t, h.do("GET", "/api/kyb", m.Session, nil), 404, "NOT_FOUND")
		app := map[string]any{"businessName": "Shop LLC", "businessType": "llc", "registrationNumber": "123", "country": "us",
			"website": "https://shop.example", "contactName": "Ann", "contactEmail": "ann@shop.example", "contactRole": "CEO",
			"productDescription": "Shirts", "expectedMonthlyVolume": "10k-50k", "primaryUseCase": "ecommerce"}
		r := h.do("POST", "/api/kyb", m.Session, app)
		expect(t, r, 201, "")
		if r.str("message") == "" {
			t.Fatal("KYB submit answers a message")
		}
		expect(t, h.do("POST", "/api/kyb", m.Session, app), 409, "CONFLICT")
		r = h.do("GET", "/api/kyb", m.Session, nil)
		expect(t, r, 200, "")
		if r.str("data", "status") != "pending" || r.str("data", "country") != "US" {
			t.Fatalf("kyb %s", r.Raw)
		}
		if h.do("GET", "/api/merchant", m.Session, nil).str("data", "kybStatus") != "pending" {
			t.Fatal("merchant kybStatus must follow the application")
		}
		r = h.do("PATCH", "/api/kyb", m.Session, map[string]any{"website": "https://new.example"})
		expect(t, r, 200, "")
		if r.str("data", "website") != "https://new.example" || r.str("data", "businessName") != "Shop LLC" {
			t.Fatalf("patch %s", r.Raw)
		}
		expectField(t, h.do("PATCH", "/api/kyb", m.Session, map[string]any{"contactEmail": "nope"}), "contactEmail")
		expectField(t, h.do("PATCH", "/api/kyb", m.Session, map[string]any{"businessName": ""}), "businessName")

		other := h.signup()
		expectField(t, h.do("POST", "/api/kyb", other.Session, map[string]any{"businessName": "X"}), "businessType")
		expect(t, h.do("PATCH", "/api/kyb", other.Session, map[string]any{"website": "https://x.example"}), 404, "NOT_FOUND")

		h.withLive(other) // review happens through the store, as the operator command does
		expect(t, h.do("PATCH", "/api/kyb", other.Session, map[string]any{"website": "https://x.example"}), 409, "CONFLICT")
		expect(t, h.do("POST", "/api/kyb", m.TestKey, app), 401, "UNAUTHORIZED")
	})
}
