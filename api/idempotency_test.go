package api_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paygate/paygate/keyring"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// Idempotency keys: a retried POST is answered exactly as the first time and
// creates nothing twice, also for 50 concurrent retries and across a new
// server on the same database; the same key with another body is a 422;
// failures are not remembered.
func TestIdempotencyKeys(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		key := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
		body := map[string]any{"email": "once@example.com", "name": "Once"}

		first := h.doWith("POST", "/api/customers", m.TestKey, body, key("cust-1"))
		expect(t, first, 201, "")
		again := h.doWith("POST", "/api/customers", m.TestKey, body, key("cust-1"))
		if again.Status != 201 || again.Raw != first.Raw || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %q %s", again.Status, again.Header.Get("Idempotent-Replayed"), again.Raw)
		}
		if first.Header.Get("Idempotent-Replayed") != "" {
			t.Fatal("the first answer is marked replayed")
		}
		other := h.doWith("POST", "/api/customers", m.TestKey, map[string]any{"email": "other@example.com"}, key("cust-1"))
		expect(t, other, 422, "IDEMPOTENCY_KEY_REUSED")

		// A validation failure is not stored: the corrected request runs.
		expect(t, h.doWith("POST", "/api/customers", m.TestKey, map[string]any{"email": "nope"}, key("cust-2")), 400, "BAD_REQUEST")
		expect(t, h.doWith("POST", "/api/customers", m.TestKey, map[string]any{"email": "fixed@example.com"}, key("cust-2")), 201, "")
		expect(t, h.doWith("POST", "/api/customers", m.TestKey, body, key(strings.Repeat("k", 256))), 400, "BAD_REQUEST")
		// Bytes that are no text (PostgreSQL refuses invalid UTF-8) or no
		// printable ASCII are a 400, not a 500.
		for _, bad := range []string{"k\xff\xfe", "clé", "a b"} {
			expect(t, h.doWith("POST", "/api/customers", m.TestKey, body, key(bad)), 400, "BAD_REQUEST")
		}

		// Keys are per merchant: another merchant's same key is another request.
		m2 := h.signup()
		expect(t, h.doWith("POST", "/api/customers", m2.TestKey, body, key("cust-1")), 201, "")

		// 50 concurrent identical requests create one link.
		link := map[string]any{"name": "Once", "amount": "5.00", "network": "base_sepolia"}
		var wg sync.WaitGroup
		answers := make(chan resp, 50)
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers <- h.doWith("POST", "/api/payment-links", m.TestKey, link, key("link-1"))
			}()
		}
		wg.Wait()
		close(answers)
		var created string
		counts := map[int]int{}
		for a := range answers {
			counts[a.Status]++
			if a.Status == 201 {
				if created == "" {
					created = a.Raw
				} else if a.Raw != created {
					t.Fatalf("two different answers to one key:\n%s\n%s", created, a.Raw)
				}
			} else if a.Status != 409 {
				t.Fatalf("concurrent retry answered %d %s", a.Status, a.Raw)
			}
		}
		links, err := h.store.PaymentLinks(context.Background(), models.Scope{MerchantID: m.ID, Mode: models.ModeTest}, "")
		if err != nil || len(links) != 1 {
			t.Fatalf("%d links for 50 requests with one key (%v): %v", len(links), counts, err)
		}
		t.Logf("50 concurrent requests with one key: %v (201 = answered, the first or replayed; 409 = while the first ran); 1 link created", counts)

		// A new server on the same database (a restart, another replica) replays.
		h2 := newHarness(t, h.store)
		replay := h2.doWith("POST", "/api/customers", m.TestKey, body, key("cust-1"))
		if replay.Raw != first.Raw || replay.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("after a restart: %s", replay.Raw)
		}
		// Dashboard routes take keys too: a retried key regeneration answers
		// the same new key instead of revoking the one just issued.
		k1 := h.doWith("POST", "/api/developer/keys", m.Session, map[string]any{"keyType": "test"}, key("regen-1"))
		k2 := h.doWith("POST", "/api/developer/keys", m.Session, map[string]any{"keyType": "test"}, key("regen-1"))
		if k1.Status != 201 || k2.Raw != k1.Raw {
			t.Fatalf("key regeneration replay: %d %s / %s", k1.Status, k1.Raw, k2.Raw)
		}
		newKey := k1.data()["fullKey"].(string)
		expect(t, h.do("GET", "/api/customers", newKey, nil), 200, "")
		// That answer holds the key in full, which the store otherwise keeps
		// only as a hash: it is stored sealed, and opens for the replay.
		touch := func(where string, args ...any) int64 {
			return storetest.Exec(t, h.store, "UPDATE idempotency_keys SET updated_at = updated_at WHERE "+where, args...)
		}
		if touch("response_body LIKE ?", "%"+newKey+"%") != 0 || touch("key = ? AND response_body LIKE ?", "regen-1", keyring.Version+".%") != 1 {
			t.Fatal("an answer holding an API key is stored in clear")
		}
		// An answer stored in clear (by an older binary) is replayed as it is.
		storetest.Exec(t, h.store, "UPDATE idempotency_keys SET response_body = ? WHERE key = ?", k1.Raw, "regen-1")
		if old := h.doWith("POST", "/api/developer/keys", m.Session, map[string]any{"keyType": "test"}, key("regen-1")); old.Raw != k1.Raw {
			t.Fatalf("a clear answer replayed as %s", old.Raw)
		}
		// Swept after 24 hours.
		if n, err := h.store.SweepIdempotencyKeys(context.Background(), time.Now().Add(time.Minute)); err != nil || n == 0 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		expect(t, h.doWith("POST", "/api/customers", newKey, body, key("cust-1")), 409, "CONFLICT") // e-mail exists; the key is forgotten
	})
}
