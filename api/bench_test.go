package api_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/paygate/paygate/models/storetest"
)

// benchHarness is a harness whose requests skip the OpenAPI validation
// (benchmarks measure the service, not the test's checks).
func benchRequest(b *testing.B, h *harness, method, path, token string, body []byte, want int) {
	req, _ := http.NewRequest(method, h.http.URL+path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := h.http.Client().Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != want {
		b.Fatalf("%s %s: %d", method, path, res.StatusCode)
	}
}

// BenchmarkRecordTransaction: POST /api/transactions end to end over HTTP
// (auth, validation, hash claim, link and customer totals) on SQLite.
func BenchmarkRecordTransaction(b *testing.B) {
	h := newHarness(b, storetest.Open(b, "sqlite"))
	m := h.signup()
	link := h.link(m.TestKey, nil)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		body := fmt.Sprintf(`{"amount":"25.50","token":"USDC","network":"base_sepolia","txHash":"0x%064x","walletAddress":"%s","customerEmail":"c%d@example.com","paymentLinkId":"%s"}`,
			i+1, evmB, i%50, link)
		benchRequest(b, h, "POST", "/api/transactions", m.TestKey, []byte(body), 201)
	}
}

// BenchmarkListCustomers: GET /api/customers?limit=100 over 1,000 customers.
func BenchmarkListCustomers(b *testing.B) {
	h := newHarness(b, storetest.Open(b, "sqlite"))
	m := h.signup()
	for i := 0; i < 1000; i++ {
		benchRequest(b, h, "POST", "/api/customers", m.TestKey, []byte(fmt.Sprintf(`{"email":"c%04d@example.com"}`, i)), 201)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchRequest(b, h, "GET", "/api/customers?limit=100", m.TestKey, nil, 200)
	}
}

// BenchmarkPollSession: GET /api/checkout/session/{id}, the status poll of
// the hosted page and of integrations, end to end over HTTP on SQLite.
func BenchmarkPollSession(b *testing.B) {
	h := newHarness(b, storetest.Open(b, "sqlite"))
	m := h.signup()
	cs := h.session(m, h.link(m.TestKey, nil), "poll@example.com", evmB)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchRequest(b, h, "GET", "/api/checkout/session/"+cs.ID, "", nil, 200)
		}
	})
}
