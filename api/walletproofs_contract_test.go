package api_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestContractWalletProofs: a smart contract wallet (EIP-1271) is proven by
// naming the network it is deployed on; the API asks the wallet there,
// over the network's JSON-RPC endpoint (a dev chain here), and the proof
// holds on that network only: another merchant may still name the address
// on another network, where it may be another party's contract, but not on
// that one. Refusals are 400s naming the field; a network that cannot be
// asked is a 503 and nothing is stored.
func TestContractWalletProofs(t *testing.T) {
	ctx := context.Background()
	dev, err := devchain.Start(ctx, devchain.Config{Port: devchain.AnyPort, BlockInterval: 50 * time.Millisecond, Network: "base_sepolia"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	owner, _ := crypto.GenerateKey()
	safeAddr, err := dev.DeploySmartWallet(ctx, crypto.PubkeyToAddress(owner.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	safe := safeAddr.Hex()
	// eth_sepolia's endpoint answers nothing: a port just closed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + l.Addr().String()
	_ = l.Close()

	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		reg := chain.DefaultRegistry()
		devchain.DevNetwork(dev, "base_sepolia", reg)
		dead, _ := reg.Lookup("eth_sepolia")
		dead.RPCURL = deadURL
		reg.Set(dead)
		h := newHarness(t, st, func(d *api.Deps) { d.Networks, d.Checkout.Networks = reg, reg })
		a, b := h.signup(), h.signup()

		// b names the address on a link taking both networks before a
		// proves it.
		bLink := h.link(b.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia", "networks": []any{"eth_sepolia"},
			"merchantWalletAddresses": map[string]any{"base_sepolia": safe, "eth_sepolia": safe}})
		// So does a, and a quote on eth_sepolia is taken before the proof.
		aLink := h.link(a.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia", "networks": []any{"eth_sepolia"},
			"merchantWalletAddresses": map[string]any{"base_sepolia": safe, "eth_sepolia": safe}})
		aQuote := h.do("POST", "/api/checkout/quote", "", map[string]any{"linkId": aLink, "network": "eth_sepolia", "customer": map[string]any{"country": "DE"}})
		expect(t, aQuote, http.StatusOK, "")

		message := func(m merchant) (string, string) {
			t.Helper()
			r := h.do("POST", "/api/merchant/wallet-proofs/message", m.Session, map[string]any{"address": safe})
			expect(t, r, http.StatusOK, "")
			return r.str("data", "message"), r.str("data", "issuedAt")
		}
		prove := func(m merchant, issued, sig, network string) resp {
			body := map[string]any{"address": safe, "issuedAt": issued, "signature": sig}
			if network != "" {
				body["network"] = network
			}
			return h.do("POST", "/api/merchant/wallet-proofs", m.Session, body)
		}
		msg, issued := message(a)
		byOwner := personalSign(t, owner, msg)

		// Refusals, nothing stored.
		r := prove(a, issued, byOwner, "")
		expectField(t, r, "signature")
		if !strings.Contains(r.str("message"), "name the network it is deployed on") || strings.HasPrefix(r.str("message"), "signature: signature") {
			t.Fatalf("no network named: %s", r.Raw)
		}
		stranger, _ := crypto.GenerateKey()
		if r := prove(a, issued, personalSign(t, stranger, msg), "base_sepolia"); !strings.Contains(r.str("message"), "refuses it") {
			expectField(t, r, "signature")
			t.Fatalf("another key's signature: %s", r.Raw)
		}
		expectField(t, prove(a, issued, byOwner, "solana_devnet"), "network")
		expectField(t, prove(a, issued, byOwner, "nowhere"), "network")
		expectField(t, prove(a, issued, "0x"+strings.Repeat("ab", 2049), "base_sepolia"), "signature")
		r = prove(a, issued, byOwner, "eth_sepolia")
		expect(t, r, http.StatusServiceUnavailable, "SERVICE_UNAVAILABLE")
		if r.Header.Get("Retry-After") == "" {
			t.Fatalf("503 without Retry-After: %v", r.Header)
		}
		if r := h.do("GET", "/api/merchant/wallet-proofs", a.Session, nil); len(r.list()) != 0 {
			t.Fatalf("proofs after the refusals: %s", r.Raw)
		}

		// Proven on base_sepolia: 201 naming the network, then 200 with it.
		r = prove(a, issued, byOwner, "base_sepolia")
		expect(t, r, http.StatusCreated, "")
		// a's link made before names it on eth_sepolia too, where it is
		// not proven: the answer says it takes no payment there now.
		if r.str("data", "network") != "base_sepolia" || r.str("data", "address") != safe || fmt.Sprint(r.data()["notProvenOn"]) != "[eth_sepolia]" {
			t.Fatalf("proof: %s", r.Raw)
		}
		msg2, issued2 := message(a)
		if r2 := prove(a, issued2, personalSign(t, owner, msg2), "base_sepolia"); r2.Status != http.StatusOK || r2.str("data", "provedAt") != r.str("data", "provedAt") {
			t.Fatalf("proven again: %s", r2.Raw)
		}
		if r := h.do("GET", "/api/merchant/wallet-proofs", a.Session, nil); len(r.list()) != 1 || r.list()[0].(map[string]any)["network"] != "base_sepolia" {
			t.Fatalf("a's proofs: %s", r.Raw)
		}

		// b's message says where a's proof stands; a's says nothing.
		if r := h.do("POST", "/api/merchant/wallet-proofs/message", b.Session, map[string]any{"address": safe}); r.data()["provenByAnotherMerchant"] != true ||
			fmt.Sprint(r.data()["provenByAnotherMerchantOn"]) != "[base_sepolia]" {
			t.Fatalf("b's message: %s", r.Raw)
		}
		if r := h.do("POST", "/api/merchant/wallet-proofs/message", a.Session, map[string]any{"address": safe}); r.data()["provenByAnotherMerchant"] != false ||
			fmt.Sprint(r.data()["notProvenOn"]) != "[eth_sepolia]" {
			t.Fatalf("a's message: %s", r.Raw)
		}
		// b's links use it on eth_sepolia too, but b proved nothing: nothing
		// of b's is barred by a's proof there.
		if r := h.do("POST", "/api/merchant/wallet-proofs/message", b.Session, map[string]any{"address": safe}); fmt.Sprint(r.data()["notProvenOn"]) != "[]" {
			t.Fatalf("b's message: %s", r.Raw)
		}

		// b: not on base_sepolia, where a's proof holds; on eth_sepolia,
		// where nobody proved it, and as a default (checked where used).
		expectField(t, h.do("POST", "/api/payment-links", b.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia",
			"merchantWalletAddresses": map[string]any{"base_sepolia": safe}}), "merchantWalletAddresses.base_sepolia")
		h.link(b.TestKey, map[string]any{"name": "T", "amount": 5, "network": "eth_sepolia", "merchantWalletAddresses": map[string]any{"eth_sepolia": safe}})
		expect(t, h.do("PATCH", "/api/merchant", b.Session, map[string]any{"wallets": map[string]any{"evm": safe}}), http.StatusOK, "")
		info := h.do("GET", "/api/checkout/links/"+bLink, "", nil)
		expect(t, info, http.StatusOK, "")
		if nets, _ := info.data()["networks"].([]any); len(nets) != 1 || nets[0].(map[string]any)["network"] != "eth_sepolia" {
			t.Fatalf("b's link offers %s", info.Raw)
		}

		// a proved a contract wallet on base_sepolia: no key signs for the
		// address, so on eth_sepolia it is whatever is deployed there, if
		// anything. a's links receive on it where it is proven only: a new
		// one is refused elsewhere (a default too, where a link uses it);
		// the link made before the proof no longer offers eth_sepolia, nor
		// opens a session there.
		r = h.do("POST", "/api/payment-links", a.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia",
			"networks": []any{"eth_sepolia"}, "merchantWalletAddresses": map[string]any{"base_sepolia": safe, "eth_sepolia": safe}})
		expectField(t, r, "merchantWalletAddresses.eth_sepolia")
		if !strings.Contains(r.str("message"), "a contract wallet proven on base_sepolia only") || strings.Contains(r.str("message"), "merchantWalletAddresses.base_sepolia") ||
			!strings.Contains(r.str("hint"), "with network") {
			t.Fatalf("a's link on eth_sepolia: %s", r.Raw)
		}
		h.link(a.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia", "merchantWalletAddresses": map[string]any{"base_sepolia": safe}})
		expect(t, h.do("PATCH", "/api/merchant", a.Session, map[string]any{"wallets": map[string]any{"evm": safe}}), http.StatusOK, "")
		expectField(t, h.do("POST", "/api/payment-links", a.TestKey, map[string]any{"name": "T", "amount": 5, "network": "eth_sepolia"}),
			"merchantWalletAddresses.eth_sepolia")
		info = h.do("GET", "/api/checkout/links/"+aLink, "", nil)
		expect(t, info, http.StatusOK, "")
		if nets, _ := info.data()["networks"].([]any); len(nets) != 1 || nets[0].(map[string]any)["network"] != "base_sepolia" {
			t.Fatalf("a's link offers %s", info.Raw)
		}
		r = h.do("POST", "/api/checkout/session", "", sessionRequest(aLink, aQuote, "0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b", "eth_sepolia"))
		expectField(t, r, "network")
		if !strings.Contains(r.str("message"), "cannot take payments on eth_sepolia: its receiving wallet is a contract wallet proven on base_sepolia only") {
			t.Fatalf("a session on eth_sepolia: %s", r.Raw)
		}
		expectField(t, h.do("POST", "/api/v1/checkouts", a.TestKey, map[string]any{"name": "T", "amount": 5, "network": "eth_sepolia",
			"merchantWalletAddresses": map[string]any{"eth_sepolia": safe}}), "merchantWalletAddresses.eth_sepolia")
		expectField(t, h.do("POST", "/api/subscriptions", a.TestKey, map[string]any{"customerEmail": "sub@example.com", "productName": "Pro",
			"amount": "5.00", "billingInterval": "month", "network": "eth_sepolia", "customerWalletAddress": "0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b"}),
			"merchantWalletAddress")
	})
}
