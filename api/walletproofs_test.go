package api_test

import (
	"context"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/gagliardetto/solana-go"

	"github.com/paygate/paygate/models"
)

// TestWalletProofs: a merchant proves a wallet by signing the message the
// API issues for it (EVM personal_sign, Solana signMessage); a wrong or
// stale signature is a 400 naming the field; proving again answers the
// first proof. A wallet another merchant proved cannot be named by this one
// (its wallets, a link's, a hosted checkout's: 409, nothing written) until
// this one proves it too; the prover names it freely. Proofs are listed
// per merchant.
func TestWalletProofs(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		a, b := h.signup(), h.signup()
		key, _ := crypto.GenerateKey()
		wallet := crypto.PubkeyToAddress(key.PublicKey).Hex()
		sol := solana.NewWallet().PrivateKey

		message := func(m merchant, address string) (msg, issued string) {
			t.Helper()
			r := h.do("POST", "/api/merchant/wallet-proofs/message", m.Session, map[string]any{"address": address})
			expect(t, r, http.StatusOK, "")
			if !strings.Contains(r.str("data", "message"), "Merchant: "+m.ID) || !strings.Contains(r.str("data", "message"), "Wallet: "+r.str("data", "address")) {
				t.Fatalf("message: %s", r.Raw)
			}
			return r.str("data", "message"), r.str("data", "issuedAt")
		}
		personal := func(msg string) string {
			sig, err := crypto.Sign(accounts.TextHash([]byte(msg)), key)
			if err != nil {
				t.Fatal(err)
			}
			sig[64] += 27
			return "0x" + hex.EncodeToString(sig)
		}
		prove := func(m merchant, address, issued, sig string) resp {
			return h.do("POST", "/api/merchant/wallet-proofs", m.Session, map[string]any{"address": address, "issuedAt": issued, "signature": sig})
		}

		// b names the wallet before anyone proved it (a typo, or a stranger).
		expect(t, h.do("PATCH", "/api/merchant", b.Session, map[string]any{"wallets": map[string]any{"evm": wallet}}), http.StatusOK, "")

		// Refusals: 400s naming the field, nothing stored.
		msg, issued := message(a, strings.ToLower(wallet)) // any spelling: the canonical one is signed
		expectField(t, h.do("POST", "/api/merchant/wallet-proofs/message", a.Session, map[string]any{"address": "0x12"}), "address")
		expectField(t, prove(a, wallet, issued, "0x"+strings.Repeat("ab", 65)), "signature")
		msgB, issuedB := message(b, wallet)
		expectField(t, prove(a, wallet, issuedB, personal(msgB)), "signature") // b's message signed, a's submitted
		expectField(t, prove(a, wallet, "yesterday", personal(msg)), "issuedAt")
		expectField(t, prove(a, wallet, issued, ""), "signature")
		expect(t, h.do("POST", "/api/merchant/wallet-proofs", a.TestKey, map[string]any{"address": wallet, "issuedAt": issued, "signature": personal(msg)}),
			http.StatusUnauthorized, "UNAUTHORIZED") // the dashboard's session only
		h.store.SetClock(func() time.Time { return time.Now().Add(16 * time.Minute) })
		expectField(t, prove(a, wallet, issued, personal(msg)), "issuedAt")
		h.store.SetClock(time.Now)
		if r := h.do("GET", "/api/merchant/wallet-proofs", a.Session, nil); r.Status != 200 || len(r.list()) != 0 {
			t.Fatalf("proofs after the refusals: %s", r.Raw)
		}

		// Proven: 201, then 200 with the first proof.
		r := prove(a, wallet, issued, personal(msg))
		expect(t, r, http.StatusCreated, "")
		if r.str("data", "address") != wallet || r.str("data", "family") != "evm" {
			t.Fatalf("proof: %s", r.Raw)
		}
		provedAt := r.str("data", "provedAt")
		msg2, issued2 := message(a, wallet)
		if r := prove(a, wallet, issued2, personal(msg2)); r.Status != http.StatusOK || r.str("data", "provedAt") != provedAt {
			t.Fatalf("proven again: %s", r.Raw)
		}
		solMsg, solIssued := message(a, sol.PublicKey().String())
		solSig, err := sol.Sign([]byte(solMsg))
		if err != nil {
			t.Fatal(err)
		}
		expect(t, prove(a, sol.PublicKey().String(), solIssued, solSig.String()), http.StatusCreated, "")
		if r := h.do("GET", "/api/merchant/wallet-proofs", a.Session, nil); len(r.list()) != 2 ||
			r.list()[0].(map[string]any)["address"] != wallet || r.list()[1].(map[string]any)["family"] != "solana" {
			t.Fatalf("a's proofs: %s", r.Raw)
		}
		if r := h.do("GET", "/api/merchant/wallet-proofs", b.Session, nil); len(r.list()) != 0 {
			t.Fatalf("b sees proofs: %s", r.Raw)
		}

		// b may not name a's proven wallet, in any way that makes it receive
		// or record b's payments (its default, named before the proof,
		// included); a may.
		expect(t, h.do("PATCH", "/api/merchant", b.Session, map[string]any{"wallets": map[string]any{"evm": strings.ToLower(wallet)}}), http.StatusConflict, "CONFLICT")
		expect(t, h.do("PATCH", "/api/merchant", b.Session, map[string]any{"wallets": map[string]any{"solana": sol.PublicKey().String()}}), http.StatusConflict, "CONFLICT")
		expect(t, h.do("POST", "/api/payment-links", b.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia",
			"merchantWalletAddresses": map[string]any{"base_sepolia": evmB}}), http.StatusCreated, "") // another wallet: fine
		expect(t, h.do("POST", "/api/payment-links", b.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia",
			"merchantWalletAddresses": map[string]any{"base_sepolia": wallet}}), http.StatusConflict, "CONFLICT")
		expect(t, h.do("POST", "/api/payment-links", b.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia"}), http.StatusConflict, "CONFLICT")
		expect(t, h.do("POST", "/api/v1/checkouts", b.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia",
			"merchantWalletAddresses": map[string]any{"base_sepolia": wallet}}), http.StatusConflict, "CONFLICT")
		expect(t, h.do("POST", "/api/subscriptions", b.TestKey, map[string]any{"customerEmail": "sub@example.com", "productName": "Pro", "amount": "5.00",
			"billingInterval": "month", "network": "base_sepolia", "customerWalletAddress": evmB}), http.StatusConflict, "CONFLICT")
		expect(t, h.do("POST", "/api/transactions", b.TestKey, map[string]any{"amount": "1.50", "token": "USDC", "network": "base_sepolia",
			"txHash": hash64, "walletAddress": evmB}), http.StatusConflict, "CONFLICT")
		if m, err := h.store.Merchant(context.Background(), b.ID); err != nil || m.WalletEVM != wallet || m.WalletSolana != solA {
			t.Fatalf("b's wallets after the refusals: %+v %v", m, err)
		}
		if links, err := h.store.PaymentLinks(context.Background(), models.Scope{MerchantID: b.ID, Mode: models.ModeTest}, ""); err != nil || len(links) != 1 {
			t.Fatalf("b's links after the refusals: %d %v", len(links), err)
		}
		if subs, _, err := h.store.Subscriptions(context.Background(), models.Scope{MerchantID: b.ID, Mode: models.ModeTest}, "", models.Page{Limit: 10}); err != nil || len(subs) != 0 {
			t.Fatalf("b's subscriptions after the refusals: %d %v", len(subs), err)
		}
		expect(t, h.do("PATCH", "/api/merchant", a.Session, map[string]any{"wallets": map[string]any{"evm": wallet}}), http.StatusOK, "")
		h.link(a.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia"})

		// b proves it too (the same person's second account): then b may.
		msgB, issuedB = message(b, wallet)
		expect(t, prove(b, wallet, issuedB, personal(msgB)), http.StatusCreated, "")
		expect(t, h.do("PATCH", "/api/merchant", b.Session, map[string]any{"wallets": map[string]any{"evm": wallet}}), http.StatusOK, "")
	})
}
