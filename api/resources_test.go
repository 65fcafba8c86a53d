package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

func TestPaymentLinks(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		r := h.do("POST", "/api/payment-links", m.TestKey, map[string]any{
			"name": "T-shirt", "description": "Blue", "amount": 25.5, "network": "base_sepolia",
			"networks":                []string{"eth_sepolia", "solana_devnet"},
			"merchantWalletAddresses": map[string]string{"eth_sepolia": evmB},
		})
		expect(t, r, 201, "")
		d := r.data()
		if d["amount"] != 25.5 || d["currency"] != "USD" || d["token"] != "USDC" || d["active"] != true ||
			d["totalCollected"] != 0.0 || d["totalTransactions"] != 0.0 || d["merchantName"] != "Shop" ||
			d["merchantWalletAddress"] != evmA || d["network"] != "base_sepolia" {
			t.Fatalf("link %s", r.Raw)
		}
		if !strings.Contains(r.Raw, `"amount":25.50`) {
			t.Fatalf("amount must be printed exactly with cents: %s", r.Raw)
		}
		nets := d["networks"].([]any)
		if len(nets) != 3 || nets[0] != "base_sepolia" {
			t.Fatalf("networks %v", nets)
		}
		w := d["merchantWalletAddresses"].(map[string]any)
		if w["eth_sepolia"] != evmB || w["solana_devnet"] != solA {
			t.Fatalf("wallets %v", w)
		}
		id := d["id"].(string)

		// Amount bounds, just inside and just outside.
		for _, a := range []any{0.01, "999999999.99", 999999999.99} {
			expect(t, h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"name": "x", "amount": a, "network": "base_sepolia"}), 201, "")
		}
		for _, a := range []any{0.009, 0, -1, 1000000000, "33.999", "abc", true} {
			expectField(t, h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"name": "x", "amount": a, "network": "base_sepolia"}), "amount")
		}
		// A number with more digits than a float can hold is still exact.
		r = h.do("POST", "/api/payment-links", m.TestKey, `{"name":"x","amount":123456789.12,"network":"base_sepolia"}`)
		expect(t, r, 201, "")
		if !strings.Contains(r.Raw, `"amount":123456789.12`) {
			t.Fatalf("exact amount lost: %s", r.Raw)
		}
		expectField(t, h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"amount": 1, "network": "base_sepolia"}), "name")
		expectField(t, h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"name": strings.Repeat("n", 201), "amount": 1, "network": "base_sepolia"}), "name")
		expectField(t, h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"name": "x", "amount": 1}), "network")
		// Mode and network: a test key with a mainnet network is a 400.
		expectField(t, h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"name": "x", "amount": 1, "network": "base"}), "network")
		expectField(t, h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"name": "x", "amount": 1, "network": "base_sepolia", "networks": []string{"polygon"}}), "networks[0]")
		// A list longer than the mode's networks is one problem, not one an entry.
		many := make([]string, 10000)
		for i := range many {
			many[i] = "x"
		}
		r = h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"name": "x", "amount": 1, "network": "base_sepolia", "networks": many})
		expectField(t, r, "networks")
		if len(r.Raw) > 1000 {
			t.Fatalf("an answer of %d bytes", len(r.Raw))
		}
		wallets := map[string]string{}
		for i := range 8 {
			wallets[fmt.Sprintf("n%d", i)] = evmA
		}
		expectField(t, h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"name": "x", "amount": 1, "network": "base_sepolia",
			"merchantWalletAddresses": wallets}), "merchantWalletAddresses")
		expectField(t, h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"name": "x", "amount": 1, "network": "dogecoin"}), "network")
		expectField(t, h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"name": "x", "amount": 1, "network": "base_sepolia", "currency": "EUR"}), "currency")
		expectField(t, h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"name": "x", "amount": 1, "network": "base_sepolia", "merchantWalletAddresses": map[string]string{"base_sepolia": solA}}), "merchantWalletAddresses.base_sepolia")
		expectField(t, h.do("POST", "/api/payment-links", m.TestKey, map[string]any{"name": "x", "amount": 1, "network": "base_sepolia", "merchantWalletAddresses": map[string]string{"solana_devnet": solA}}), "merchantWalletAddresses.solana_devnet")
		expect(t, h.do("POST", "/api/payment-links", "", map[string]any{"name": "x", "amount": 1, "network": "base_sepolia"}), 401, "UNAUTHORIZED")
		// Without a default wallet for the family, the wallet is required.
		bare := h.signup()
		expect(t, h.do("PATCH", "/api/merchant", bare.Session, map[string]any{"wallets": map[string]any{"solana": ""}}), 200, "")
		expectField(t, h.do("POST", "/api/payment-links", bare.TestKey, map[string]any{"name": "x", "amount": 1, "network": "solana_devnet"}), "merchantWalletAddresses.solana_devnet")

		r = h.do("GET", "/api/payment-links/"+id, m.TestKey, nil)
		expect(t, r, 200, "")
		if r.str("data", "id") != id {
			t.Fatal(r.Raw)
		}
		// The wallet filter matches any of a link's networks.
		r = h.do("GET", "/api/payment-links?merchantWalletAddress="+evmB, m.TestKey, nil)
		expect(t, r, 200, "")
		if len(r.list()) != 1 {
			t.Fatalf("filter by %s: %s", evmB, r.Raw)
		}
		if n := len(h.do("GET", "/api/payment-links", m.TestKey, nil).list()); n != 5 {
			t.Fatalf("all links: %d", n)
		}
		if n := len(h.do("GET", "/api/payment-links?merchantWalletAddress=0x0000000000000000000000000000000000000001", m.TestKey, nil).list()); n != 0 {
			t.Fatalf("unknown wallet: %d", n)
		}

		r = h.do("PATCH", "/api/payment-links/"+id, m.TestKey, map[string]any{"active": false, "amount": "30"})
		expect(t, r, 200, "")
		if r.data()["active"] != false || r.data()["amount"] != 30.0 || r.data()["name"] != "T-shirt" {
			t.Fatalf("patch %s", r.Raw)
		}
		expectField(t, h.do("PATCH", "/api/payment-links/"+id, m.TestKey, map[string]any{"amount": 0}), "amount")
		expectField(t, h.do("PATCH", "/api/payment-links/"+id, m.TestKey, map[string]any{"active": "yes"}), "active")
		expectField(t, h.do("PATCH", "/api/payment-links/"+id, m.TestKey, map[string]any{"network": "base"}), "network")
		expectField(t, h.do("GET", "/api/payment-links/not-a-uuid", m.TestKey, nil), "id")
		expect(t, h.do("GET", "/api/payment-links/"+models.NewID(), m.TestKey, nil), 404, "NOT_FOUND")

		// DELETE is a dashboard route.
		expect(t, h.do("DELETE", "/api/payment-links/"+id, m.TestKey, nil), 401, "UNAUTHORIZED")
		r = h.do("DELETE", "/api/payment-links/"+id, m.Session, nil)
		expect(t, r, 200, "")
		if r.str("message") == "" {
			t.Fatal("delete answers a message")
		}
		expect(t, h.do("GET", "/api/payment-links/"+id, m.TestKey, nil), 404, "NOT_FOUND")
		expect(t, h.do("DELETE", "/api/payment-links/"+id, m.Session, nil), 404, "NOT_FOUND")
	})
}

func TestLiveModeLinks(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.withLive(h.signup())
		live := h.link(m.LiveKey, map[string]any{"name": "x", "amount": 1, "network": "base", "networks": []string{"polygon", "solana"}})
		expectField(t, h.do("POST", "/api/payment-links", m.LiveKey, map[string]any{"name": "x", "amount": 1, "network": "base_sepolia"}), "network")
		// The other mode's resource is 404, and lists never mix modes.
		expect(t, h.do("GET", "/api/payment-links/"+live, m.TestKey, nil), 404, "NOT_FOUND")
		if n := len(h.do("GET", "/api/payment-links", m.TestKey, nil).list()); n != 0 {
			t.Fatalf("test key lists %d live links", n)
		}
		expect(t, h.do("GET", "/api/payment-links/"+live, m.LiveKey, nil), 200, "")
	})
}

func TestCustomers(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		r := h.do("POST", "/api/customers", m.TestKey, map[string]any{"email": "Ann@Example.com", "name": "Ann", "country": "de",
			"metadata": map[string]string{"crm": "42"}})
		expect(t, r, 201, "")
		id := r.str("data", "id")
		if r.str("data", "email") != "ann@example.com" || r.str("data", "country") != "DE" || r.data()["totalSpent"] != 0.0 {
			t.Fatalf("customer %s", r.Raw)
		}
		expect(t, h.do("POST", "/api/customers", m.TestKey, map[string]any{"email": "ann@example.com"}), 409, "CONFLICT")
		expectField(t, h.do("POST", "/api/customers", m.TestKey, map[string]any{"name": "x"}), "email")
		// NUL cannot be stored by PostgreSQL: a clear 400, not a 500.
		expectField(t, h.do("POST", "/api/customers", m.TestKey, map[string]any{"email": "nul@example.com", "name": "a\u0000b"}), "name")
		expect(t, h.do("POST", "/api/customers", m.TestKey, map[string]any{"email": "nl@example.com", "name": "Ann\tLee"}), 201, "")
		expectField(t, h.do("POST", "/api/customers", m.TestKey, map[string]any{"email": "b@example.com", "country": "USA"}), "country")
		expectField(t, h.do("POST", "/api/customers", m.TestKey, map[string]any{"email": "b@example.com", "walletAddress": "0xnothex"}), "walletAddress")
		big := map[string]string{}
		for i := 0; i < 51; i++ {
			big[fmt.Sprint("k", i)] = "v"
		}
		expectField(t, h.do("POST", "/api/customers", m.TestKey, map[string]any{"email": "b@example.com", "metadata": big}), "metadata")

		r = h.do("GET", "/api/customers/"+id, m.TestKey, nil)
		expect(t, r, 200, "")
		if md, ok := r.data()["metadata"].(map[string]any); !ok || md["crm"] != "42" {
			t.Fatalf("single customer carries metadata: %s", r.Raw)
		}
		r = h.do("PATCH", "/api/customers/"+id, m.TestKey, map[string]any{"country": "FR", "metadata": map[string]string{"tier": "gold"}})
		expect(t, r, 200, "")
		md := r.data()["metadata"].(map[string]any)
		if r.str("data", "name") != "Ann" || r.str("data", "country") != "FR" || md["crm"] != "42" || md["tier"] != "gold" {
			t.Fatalf("patch changes only fields sent: %s", r.Raw)
		}
		r = h.do("PATCH", "/api/customers/"+id, m.TestKey, map[string]any{"metadata": map[string]string{"crm": ""}})
		if _, still := r.data()["metadata"].(map[string]any)["crm"]; still {
			t.Fatal("empty metadata value removes the key")
		}
		expectField(t, h.do("PATCH", "/api/customers/"+id, m.TestKey, map[string]any{"email": "bad"}), "email")
		expectField(t, h.do("PATCH", "/api/customers/"+id, m.TestKey, map[string]any{"unknown": 1}), "unknown")
		expect(t, h.do("PATCH", "/api/customers/"+models.NewID(), m.TestKey, map[string]any{"name": "x"}), 404, "NOT_FOUND")
		expect(t, h.do("POST", "/api/customers", m.TestKey, map[string]any{"email": "other@example.com"}), 201, "")
		expect(t, h.do("PATCH", "/api/customers/"+id, m.TestKey, map[string]any{"email": "other@example.com"}), 409, "CONFLICT")
		// The same e-mail is free in the other mode.
		m = h.withLive(m)
		expect(t, h.do("POST", "/api/customers", m.LiveKey, map[string]any{"email": "ann@example.com"}), 201, "")
		expect(t, h.do("GET", "/api/customers/"+id, m.LiveKey, nil), 404, "NOT_FOUND")
	})
}

func TestCustomerPagination(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		const n = 105
		ctx := context.Background()
		for i := 0; i < n; i++ {
			if err := h.store.CreateCustomer(ctx, &models.Customer{MerchantID: m.ID, Mode: models.ModeTest, Email: fmt.Sprintf("c%03d@example.com", i)}); err != nil {
				t.Fatal(err)
			}
		}
		r := h.do("GET", "/api/customers", m.TestKey, nil)
		expect(t, r, 200, "")
		if len(r.list()) != 25 || r.Body["hasMore"] != true {
			t.Fatalf("default page: %d hasMore=%v", len(r.list()), r.Body["hasMore"])
		}
		if _, has := r.list()[0].(map[string]any)["metadata"]; has {
			t.Fatal("list items carry no metadata")
		}
		if first := r.list()[0].(map[string]any)["email"]; first != "c104@example.com" {
			t.Fatalf("newest first, got %v", first)
		}
		r = h.do("GET", "/api/customers?limit=1", m.TestKey, nil)
		if len(r.list()) != 1 || r.Body["hasMore"] != true {
			t.Fatalf("limit=1: %s", r.Raw)
		}
		r = h.do("GET", "/api/customers?limit=100", m.TestKey, nil)
		if len(r.list()) != 100 || r.Body["hasMore"] != true {
			t.Fatalf("limit=100: %d", len(r.list()))
		}
		last := r.list()[99].(map[string]any)["id"].(string)
		r = h.do("GET", "/api/customers?limit=100&starting_after="+last, m.TestKey, nil)
		if len(r.list()) != 5 || r.Body["hasMore"] != false {
			t.Fatalf("second page: %d hasMore=%v", len(r.list()), r.Body["hasMore"])
		}
		if r.list()[4].(map[string]any)["email"] != "c000@example.com" {
			t.Fatal("pages must continue in order")
		}
		for _, bad := range []string{"0", "101", "-1", "x", "1.5"} {
			expectField(t, h.do("GET", "/api/customers?limit="+bad, m.TestKey, nil), "limit")
		}
		expectField(t, h.do("GET", "/api/customers?starting_after=nope", m.TestKey, nil), "starting_after")
		expect(t, h.do("GET", "/api/customers", "", nil), 401, "UNAUTHORIZED")
	})
}

func TestTransactions(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.withLive(h.signup())
		link := h.link(m.TestKey, nil)
		liveLink := h.link(m.LiveKey, map[string]any{"name": "x", "amount": 1, "network": "base"})
		body := func(over map[string]any) map[string]any {
			b := map[string]any{"amount": "25.50", "token": "USDC", "network": "base_sepolia", "txHash": hash64,
				"walletAddress": evmB, "customerEmail": "payer@example.com", "customerName": "Pay Er", "paymentLinkId": link}
			for k, v := range over {
				if v == nil {
					delete(b, k)
				} else {
					b[k] = v
				}
			}
			return b
		}
		r := h.do("POST", "/api/transactions", m.TestKey, body(nil))
		expect(t, r, 201, "")
		d := r.data()
		txID := d["id"].(string)
		if d["status"] != "completed" || d["amount"] != 25.5 || d["merchantWalletAddress"] != evmA || d["txHash"] != hash64 {
			t.Fatalf("transaction %s", r.Raw)
		}
		// 409 on a recorded hash, also when written in upper case or without 0x.
		expect(t, h.do("POST", "/api/transactions", m.TestKey, body(nil)), 409, "CONFLICT")
		expect(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": strings.ToUpper(hash64[2:])})), 409, "CONFLICT")
		// The link's and the customer's totals moved.
		lr := h.do("GET", "/api/payment-links/"+link, m.TestKey, nil)
		if lr.data()["totalCollected"] != 25.5 || lr.data()["totalTransactions"] != 1.0 {
			t.Fatalf("link totals %s", lr.Raw)
		}
		cl := h.do("GET", "/api/customers", m.TestKey, nil).list()
		if len(cl) != 1 || cl[0].(map[string]any)["totalSpent"] != 25.5 {
			t.Fatalf("customer created from the payment: %v", cl)
		}

		hashN := func(n int) string { return "0x" + strings.Repeat("a", n) }
		// Bounds: amount, hash, wallet, email.
		expect(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": hashN(64), "amount": "0.01"})), 201, "")
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": hashN(63)})), "txHash")
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": hashN(65)})), "txHash")
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": "0x" + strings.Repeat("g", 64)})), "txHash")
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": hashN(62) + "01", "amount": "0.009"})), "amount")
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": hashN(62) + "02", "amount": "999999999.991"})), "amount")
		expect(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": hashN(62) + "03", "amount": "999999999.99"})), 201, "")
		expect(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": hashN(62) + "04", "amount": "1.123456"})), 201, "")
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": hashN(62) + "05", "walletAddress": "0x" + strings.Repeat("a", 39)})), "walletAddress")
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": hashN(62) + "06", "customerEmail": "nope"})), "customerEmail")
		for _, f := range []string{"amount", "token", "network", "txHash", "walletAddress"} {
			expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{f: nil})), f)
		}
		// Solana needs a base58 signature and address.
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"network": "solana_devnet", "paymentLinkId": nil, "txHash": hash64})), "txHash")
		var raw [64]byte
		for i := range raw {
			raw[i] = byte(i + 1)
		}
		sig := solana.SignatureFromBytes(raw[:]).String()
		r = h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"network": "solana_devnet", "paymentLinkId": nil, "txHash": sig, "walletAddress": solA}))
		expect(t, r, 201, "")
		if r.str("data", "merchantWalletAddress") != solA || r.str("data", "txHash") != sig {
			t.Fatalf("solana transaction %s", r.Raw)
		}
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"network": "solana_devnet", "paymentLinkId": nil, "txHash": sig[:40], "walletAddress": solA})), "txHash")
		// Mode rules: a mainnet network with a test key, a live link with a test key.
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"network": "base"})), "network")
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": hashN(62) + "07", "paymentLinkId": liveLink})), "paymentLinkId")
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": hashN(62) + "08", "paymentLinkId": models.NewID()})), "paymentLinkId")
		expectField(t, h.do("POST", "/api/transactions", m.TestKey, body(map[string]any{"txHash": hashN(62) + "09", "network": "eth_sepolia"})), "network")
		// Nothing half-written: the refused requests left no transaction.
		r = h.do("GET", "/api/transactions?limit=100", m.TestKey, nil)
		if len(r.list()) != 5 {
			t.Fatalf("want 5 recorded, got %d", len(r.list()))
		}

		r = h.do("GET", "/api/transactions/"+txID, m.TestKey, nil)
		expect(t, r, 200, "")
		expect(t, h.do("GET", "/api/transactions/"+txID, m.LiveKey, nil), 404, "NOT_FOUND")
		expect(t, h.do("GET", "/api/transactions/"+models.NewID(), m.TestKey, nil), 404, "NOT_FOUND")

		// Filters.
		one := func(q string) int {
			r := h.do("GET", "/api/transactions?"+q, m.TestKey, nil)
			expect(t, r, 200, "")
			return len(r.list())
		}
		if one("txHash=0x"+strings.ToUpper(hash64[2:])) != 1 || one("txHash="+hash64+"&network=base_sepolia") != 1 {
			t.Fatal("txHash filter")
		}
		// Without a link, a record is verified against the merchant's default
		// wallet of the network's family: without one, it is refused.
		bare := h.do("POST", "/api/auth/signup", "", map[string]any{"email": "evm-only" + models.NewID()[24:] + "@example.com",
			"password": "correct horse battery", "businessName": "EVM only"})
		expect(t, bare, 201, "")
		expect(t, h.do("PATCH", "/api/merchant", bare.str("data", "sessionToken"), map[string]any{"wallets": map[string]any{"evm": evmA}}), 200, "")
		bareKey := bare.str("data", "testKey", "fullKey")
		expectField(t, h.do("POST", "/api/transactions", bareKey, map[string]any{"amount": "1", "token": "USDC", "network": "solana_devnet",
			"txHash": sig, "walletAddress": solA}), "network")
		expect(t, h.do("POST", "/api/transactions", bareKey, map[string]any{"amount": "1", "token": "USDC", "network": "base_sepolia",
			"txHash": hash64, "walletAddress": evmB}), 201, "")

		// A hash no chain could have made is a 400, not an empty list (nor,
		// with a NUL, PostgreSQL's refusal as a 500).
		for _, bad := range []string{"%00", "%FF%FE", "0x" + strings.Repeat("a", 200), "nothex"} {
			expectField(t, h.do("GET", "/api/transactions?txHash="+bad, m.TestKey, nil), "txHash")
			expectField(t, h.do("GET", "/api/payment-exceptions?txHash="+bad, m.TestKey, nil), "txHash")
		}
		if one("paymentLinkId="+link) != 4 || one("customerEmail=PAYER@example.com") != 5 || one("customerEmail=x@example.com") != 0 {
			t.Fatal("link/customer filter")
		}
		if one("network=eth_sepolia") != 0 || one("status=completed") != 5 {
			t.Fatal("network/status filter")
		}
		future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
		if one("since="+past) != 5 || one("since="+future) != 0 || one("until="+past) != 0 {
			t.Fatal("since/until filter")
		}
		r = h.do("GET", "/api/transactions?limit=1", m.TestKey, nil)
		if r.Body["hasMore"] != true || len(r.list()) != 1 {
			t.Fatal("pagination")
		}
		expectField(t, h.do("GET", "/api/transactions?since=yesterday", m.TestKey, nil), "since")
		expectField(t, h.do("GET", "/api/transactions?network=base", m.TestKey, nil), "network")
		expectField(t, h.do("GET", "/api/transactions?status=weird", m.TestKey, nil), "status")
		expectField(t, h.do("GET", "/api/transactions?limit=101", m.TestKey, nil), "limit")
	})
}

func TestSubscriptions(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.withLive(h.signup())
		ctx := context.Background()
		mk := func(mode models.Mode, status string) string {
			s := &models.Subscription{MerchantID: m.ID, Mode: mode, Status: status, Network: "base_sepolia", BillingModel: "push",
				CustomerEmail: "s@example.com", Amount: money.FromCents(999), BillingInterval: "month", ProductName: "Pro",
				CurrentPeriodStart: time.Now(), CurrentPeriodEnd: time.Now().Add(30 * 24 * time.Hour)}
			if err := h.store.CreateSubscription(ctx, s); err != nil {
				t.Fatal(err)
			}
			return s.ID
		}
		mk(models.ModeTest, models.SubTrialing)
		active := mk(models.ModeTest, models.SubActive)
		live := mk(models.ModeLive, models.SubActive)

		r := h.do("GET", "/api/subscriptions", m.TestKey, nil)
		expect(t, r, 200, "")
		if len(r.list()) != 2 || r.Body["hasMore"] != false {
			t.Fatalf("list %s", r.Raw)
		}
		if n := len(h.do("GET", "/api/subscriptions?status=trialing&mode=test", m.TestKey, nil).list()); n != 1 {
			t.Fatalf("status filter %d", n)
		}
		if r := h.do("GET", "/api/subscriptions?limit=1", m.TestKey, nil); len(r.list()) != 1 || r.Body["hasMore"] != true {
			t.Fatal("limit=1")
		}
		expectField(t, h.do("GET", "/api/subscriptions?mode=live", m.TestKey, nil), "mode")
		expectField(t, h.do("GET", "/api/subscriptions?status=gone", m.TestKey, nil), "status")
		r = h.do("GET", "/api/subscriptions/"+active, m.TestKey, nil)
		expect(t, r, 200, "")
		if r.str("data", "mode") != "test" || r.data()["amount"] != 9.99 || r.data()["cancelAtPeriodEnd"] != false {
			t.Fatalf("get %s", r.Raw)
		}
		expect(t, h.do("GET", "/api/subscriptions/"+live, m.TestKey, nil), 404, "NOT_FOUND")

		// Refusals that come before the workflow (the actions themselves run
		// in TestSubscriptionsOnTemporal).
		expectField(t, h.do("PATCH", "/api/subscriptions", m.TestKey, map[string]any{"subscriptionId": active, "action": "delete"}), "action")
		expectField(t, h.do("PATCH", "/api/subscriptions", m.TestKey, map[string]any{"action": "cancel"}), "subscriptionId")
		expect(t, h.do("PATCH", "/api/subscriptions", m.TestKey, map[string]any{"subscriptionId": live, "action": "cancel"}), 404, "NOT_FOUND")
		canceled := mk(models.ModeTest, models.SubCanceled)
		expectField(t, h.do("PATCH", "/api/subscriptions", m.TestKey, map[string]any{"subscriptionId": canceled, "action": "resume"}), "action")
	})
}

// TestTransactionsByVerification: every transaction's status is completed,
// a record the chain refuted included; ?verification= tells them apart.
func TestTransactionsByVerification(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		ids := map[string]string{}
		for i, state := range []string{models.VerificationPending, models.VerificationVerified, models.VerificationFailed} {
			rec := h.do("POST", "/api/transactions", m.TestKey, map[string]any{"amount": "10", "token": "USDC", "network": "base_sepolia",
				"txHash": "0x" + strings.Repeat(string(rune('a'+i)), 64), "walletAddress": evmB})
			expect(t, rec, 201, "")
			ids[state] = rec.data()["id"].(string)
			if state != models.VerificationPending {
				if err := h.store.SetRecordVerification(context.Background(), ids[state], state, "checked"); err != nil {
					t.Fatal(err)
				}
			}
		}
		if r := h.do("GET", "/api/transactions?status=completed", m.TestKey, nil); len(r.list()) != 3 {
			t.Fatalf("every record is completed: %s", r.Raw)
		}
		for state, id := range ids {
			r := h.do("GET", "/api/transactions?verification="+state, m.TestKey, nil)
			expect(t, r, 200, "")
			if l := r.list(); len(l) != 1 || l[0].(map[string]any)["id"] != id || l[0].(map[string]any)["verification"] != state {
				t.Fatalf("?verification=%s: %s", state, r.Raw)
			}
		}
		expectField(t, h.do("GET", "/api/transactions?verification=refuted", m.TestKey, nil), "verification")
		// Another merchant's filter sees none of them.
		if r := h.do("GET", "/api/transactions?verification=failed", h.signup().TestKey, nil); len(r.list()) != 0 {
			t.Fatalf("another merchant's list: %s", r.Raw)
		}
	})
}

func TestSettlements(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.withLive(h.signup())
		rec := h.do("POST", "/api/transactions", m.LiveKey, map[string]any{"amount": "100", "token": "USDC", "network": "base",
			"txHash": hash64, "walletAddress": evmB})
		expect(t, rec, 201, "")
		if rec.data()["verification"] != "pending" {
			t.Fatalf("a record starts unverified: %s", rec.Raw)
		}
		// Only a record the chain confirmed counts toward the balance.
		over := map[string]any{"amount": "60", "token": "USDC", "network": "base", "destinationWallet": evmB, "txHash": "0x" + strings.Repeat("c", 64)}
		expectField(t, h.do("POST", "/api/settlements", m.Session, over), "amount")
		if err := h.store.SetRecordVerification(context.Background(), rec.data()["id"].(string), models.VerificationVerified, "seen"); err != nil {
			t.Fatal(err)
		}
		body := map[string]any{"amount": "60", "token": "USDC", "network": "base", "destinationWallet": evmB, "txHash": "0x" + strings.Repeat("b", 64)}
		r := h.do("POST", "/api/settlements", m.Session, body)
		expect(t, r, 201, "")
		if r.data()["status"] != "completed" || r.data()["amount"] != 60.0 {
			t.Fatalf("settlement %s", r.Raw)
		}
		body["txHash"] = "0x" + strings.Repeat("c", 64)
		body["amount"] = "40.01"
		expectField(t, h.do("POST", "/api/settlements", m.Session, body), "amount")
		body["network"] = "base_sepolia"
		expectField(t, h.do("POST", "/api/settlements", m.Session, body), "network")
		expect(t, h.do("POST", "/api/settlements", m.LiveKey, body), 401, "UNAUTHORIZED")
		r = h.do("GET", "/api/settlements", m.Session, nil)
		expect(t, r, 200, "")
		if len(r.list()) != 1 {
			t.Fatalf("list %s", r.Raw)
		}
		r = h.do("GET", "/api/settlements/balance", m.Session, nil)
		if len(r.list()) != 1 || r.list()[0].(map[string]any)["available"] != 40.0 {
			t.Fatalf("balance %s", r.Raw)
		}
		// A payout is a transfer out: not to the account's own receiving
		// wallet, not the payment it received; a padded testnet name is
		// told as a testnet.
		own := map[string]any{"amount": "1", "token": "USDC", "network": "base", "destinationWallet": evmA, "txHash": "0x" + strings.Repeat("f", 64)}
		expectField(t, h.do("POST", "/api/settlements", m.Session, own), "destinationWallet")
		received := map[string]any{"amount": "1", "token": "USDC", "network": "base", "destinationWallet": evmB, "txHash": hash64}
		if r := h.do("POST", "/api/settlements", m.Session, received); r.Status != 409 || !strings.Contains(r.str("message"), "a payment the account received") {
			t.Fatalf("a payout with the received payment's hash: %s", r.Raw)
		}
		padded := map[string]any{"amount": "1", "token": "USDC", "network": " base_sepolia ", "destinationWallet": evmB, "txHash": "0x" + strings.Repeat("f", 64)}
		if r := h.do("POST", "/api/settlements", m.Session, padded); r.Status != 400 || !strings.Contains(r.str("message"), "not allowed on testnet") {
			t.Fatalf("a padded testnet: %s", r.Raw)
		}

		// A payout's hash is the merchant's own: another merchant who
		// records it first neither blocks this one's record nor learns
		// whether it was recorded; the same merchant twice is a conflict.
		payout := "0x" + strings.Repeat("d", 64)
		other := h.withLive(h.signup())
		orec := h.do("POST", "/api/transactions", other.LiveKey, map[string]any{"amount": "5", "token": "USDC", "network": "base",
			"txHash": "0x" + strings.Repeat("e", 64), "walletAddress": evmB})
		expect(t, orec, 201, "")
		if err := h.store.SetRecordVerification(context.Background(), orec.data()["id"].(string), models.VerificationVerified, "seen"); err != nil {
			t.Fatal(err)
		}
		expect(t, h.do("POST", "/api/settlements", other.Session, map[string]any{"amount": "0.01", "token": "USDC", "network": "base",
			"destinationWallet": evmB, "txHash": payout}), 201, "")
		mine := map[string]any{"amount": "10", "token": "USDC", "network": "base", "destinationWallet": evmB, "txHash": payout}
		expect(t, h.do("POST", "/api/settlements", m.Session, mine), 201, "")
		expect(t, h.do("POST", "/api/settlements", m.Session, mine), 409, "CONFLICT")
		r = h.do("GET", "/api/settlements/balance", m.Session, nil)
		if r.list()[0].(map[string]any)["available"] != 30.0 {
			t.Fatalf("balance after the payout %s", r.Raw)
		}
	})
}

func TestUnknownRouteAndMethod(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		expect(t, h.do("GET", "/api/nothing-here", "", nil), 404, "NOT_FOUND")
		r := h.do("PUT", "/api/customers", "", nil)
		expect(t, r, 405, "METHOD_NOT_ALLOWED")
		if allow := r.Header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
			t.Fatalf("405 without the route's methods: %v %s", r.Header, r.Raw)
		}
		// A trailing slash names no route: a 404 in the envelope, not a
		// redirect that a client follows (a POST's 307 kept its body and
		// created what it was sent).
		m := h.signup()
		expect(t, h.do("GET", "/api/customers/", m.TestKey, nil), 404, "NOT_FOUND")
		expect(t, h.do("GET", "/api/payment-links/", m.TestKey, nil), 404, "NOT_FOUND")
		expect(t, h.do("POST", "/api/payment-links/", m.TestKey, map[string]any{"name": "Slash", "amount": "1.00",
			"network": "base_sepolia"}), 404, "NOT_FOUND")
		if r := h.do("GET", "/api/payment-links", m.TestKey, nil); len(r.list()) != 0 {
			t.Fatalf("a link was created through the trailing slash: %s", r.Raw)
		}
	})
}

// TestDeleteLinkKeepsItsMode: a dashboard session deletes a link of either
// mode, but a ?mode= it names is kept: the other mode's link is a 404 and
// stays (before, ?mode=test deleted a live link, failing its live
// sessions), as on the webhook routes.
func TestDeleteLinkKeepsItsMode(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.withLive(h.signup())
		live := h.link(m.LiveKey, map[string]any{"name": "Live", "amount": 5, "network": "base",
			"merchantWalletAddresses": map[string]any{"base": "0x52908400098527886E0F7030069857D2E4169EE7"}})
		expect(t, h.do("DELETE", "/api/payment-links/"+live+"?mode=test", m.Session, nil), 404, "NOT_FOUND")
		expect(t, h.do("GET", "/api/payment-links/"+live, m.LiveKey, nil), 200, "")
		expectField(t, h.do("DELETE", "/api/payment-links/"+live+"?mode=nope", m.Session, nil), "mode")
		expect(t, h.do("DELETE", "/api/payment-links/"+live+"?mode=live", m.Session, nil), 200, "")
		expect(t, h.do("GET", "/api/payment-links/"+live, m.LiveKey, nil), 404, "NOT_FOUND")
	})
}
