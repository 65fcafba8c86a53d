package api_test

import (
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/gagliardetto/solana-go"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
)

// TestWalletProofs: a merchant proves a wallet by signing the message the
// API issues for it (EVM personal_sign, Solana signMessage); a wrong or
// stale signature is a 400 naming the field; proving again answers the
// first proof. A wallet another merchant proved cannot be named by this one
// (its wallets, a link's, a hosted checkout's: a 400 naming the field that
// names it, with a hint, never a 409; nothing written) until
// this one proves it too; the prover names it freely. Proofs are listed
// per merchant, and withdrawn by their prover only. A message dated ahead
// cannot be made (its nonce is the server's).
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
			if msg := r.str("data", "message"); !strings.Contains(msg, "Merchant: "+m.ID) || !strings.Contains(msg, "Account: "+m.Email) ||
				!strings.Contains(msg, "Wallet: "+r.str("data", "address")) || !strings.Contains(msg, "\nNonce: ") {
				t.Fatalf("message: %s", r.Raw)
			}
			return r.str("data", "message"), r.str("data", "issuedAt")
		}
		personal := func(msg string) string { return personalSign(t, key, msg) }
		prove := func(m merchant, address, issued, sig string) resp {
			return h.do("POST", "/api/merchant/wallet-proofs", m.Session, map[string]any{"address": address, "issuedAt": issued, "signature": sig})
		}

		// b names the wallet before anyone proved it (a typo, or a stranger),
		// and makes a link paying into it.
		expect(t, h.do("PATCH", "/api/merchant", b.Session, map[string]any{"wallets": map[string]any{"evm": wallet}}), http.StatusOK, "")
		bLink := h.link(b.TestKey, nil)
		quote := h.do("POST", "/api/checkout/quote", "", map[string]any{"linkId": bLink, "network": "base_sepolia", "customer": map[string]any{"country": "DE"}})
		expect(t, quote, http.StatusOK, "")

		// Refusals: 400s naming the field, nothing stored.
		msg, issued := message(a, strings.ToLower(wallet)) // any spelling: the canonical one is signed
		expectField(t, h.do("POST", "/api/merchant/wallet-proofs/message", a.Session, map[string]any{"address": "0x12"}), "address")
		expectField(t, prove(a, wallet, issued, "0x"+strings.Repeat("ab", 65)), "signature")
		msgB, issuedB := message(b, wallet)
		expectField(t, prove(a, wallet, issuedB, personal(msgB)), "signature") // b's message signed, a's submitted
		expectField(t, prove(a, wallet, "yesterday", personal(msg)), "issuedAt")
		// A message dated ahead (its owner signing now for a time when the
		// wallet may be another's) has no nonce the server made: refused.
		ahead := time.Now().UTC().Add(30 * time.Second).Truncate(time.Second)
		forged := chain.WalletProof{Address: wallet, MerchantID: a.ID, Account: a.Email, Issued: ahead, Nonce: strings.Repeat("00", 16)}.Message()
		expectField(t, prove(a, wallet, ahead.Format(time.RFC3339), personal(forged)), "signature")
		expectField(t, prove(a, wallet, time.Now().Add(5*time.Minute).UTC().Format(time.RFC3339), personal(msg)), "issuedAt")
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
		expect(t, h.do("PATCH", "/api/merchant", b.Session, map[string]any{"wallets": map[string]any{"evm": strings.ToLower(wallet)}}), http.StatusOK, "") // as saved
		expectField(t, h.do("PATCH", "/api/merchant", b.Session, map[string]any{"wallets": map[string]any{"solana": sol.PublicKey().String()}}), "wallets.solana")
		// Saving the settings as they are (the form sends both wallets) is
		// not naming it anew.
		expect(t, h.do("PATCH", "/api/merchant", b.Session, map[string]any{"businessName": "B", "wallets": map[string]any{"evm": wallet, "solana": solA}}), http.StatusOK, "")
		expect(t, h.do("POST", "/api/payment-links", b.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia",
			"merchantWalletAddresses": map[string]any{"base_sepolia": evmB}}), http.StatusCreated, "") // another wallet: fine
		expectField(t, h.do("POST", "/api/payment-links", b.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia",
			"merchantWalletAddresses": map[string]any{"base_sepolia": wallet}}), "merchantWalletAddresses.base_sepolia")
		expectField(t, h.do("POST", "/api/payment-links", b.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia"}), "merchantWalletAddresses.base_sepolia")
		expectField(t, h.do("POST", "/api/v1/checkouts", b.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia",
			"merchantWalletAddresses": map[string]any{"base_sepolia": wallet}}), "merchantWalletAddresses.base_sepolia")
		expectField(t, h.do("POST", "/api/subscriptions", b.TestKey, map[string]any{"customerEmail": "sub@example.com", "productName": "Pro", "amount": "5.00",
			"billingInterval": "month", "network": "base_sepolia", "customerWalletAddress": evmB}), "merchantWalletAddress")
		r = h.do("POST", "/api/transactions", b.TestKey, map[string]any{"amount": "1.50", "token": "USDC", "network": "base_sepolia",
			"txHash": hash64, "walletAddress": evmB})
		expectField(t, r, "network")
		if !strings.Contains(r.str("hint"), "POST /api/merchant/wallet-proofs") {
			t.Fatalf("the refusal's hint: %s", r.Raw)
		}
		expectField(t, h.do("POST", "/api/transactions", b.TestKey, map[string]any{"amount": "1.50", "token": "USDC", "network": "base_sepolia",
			"txHash": hash64, "walletAddress": evmB, "paymentLinkId": bLink}), "paymentLinkId")
		// b's link made before the proof opens no session: the customer
		// would pay a's wallet.
		r = h.do("POST", "/api/checkout/session", "", sessionRequest(bLink, quote, evmB, "base_sepolia"))
		expectField(t, r, "network")
		if !strings.Contains(r.str("message"), "cannot take payments") {
			t.Fatalf("the session's refusal: %s", r.Raw)
		}
		// Nor does its public page offer that network.
		linkNetworks := func() []string {
			t.Helper()
			r := h.do("GET", "/api/checkout/links/"+bLink, "", nil)
			expect(t, r, http.StatusOK, "")
			var out []string
			for _, n := range r.data()["networks"].([]any) {
				out = append(out, n.(map[string]any)["network"].(string))
			}
			return out
		}
		if got := linkNetworks(); len(got) != 0 {
			t.Fatalf("b's refused link lists %v", got)
		}
		if m, err := h.store.Merchant(context.Background(), b.ID); err != nil || m.WalletEVM != wallet || m.WalletSolana != solA {
			t.Fatalf("b's wallets after the refusals: %+v %v", m, err)
		}
		if links, err := h.store.PaymentLinks(context.Background(), models.Scope{MerchantID: b.ID, Mode: models.ModeTest}, ""); err != nil || len(links) != 2 {
			t.Fatalf("b's links after the refusals: %d %v", len(links), err)
		}
		if subs, _, err := h.store.Subscriptions(context.Background(), models.Scope{MerchantID: b.ID, Mode: models.ModeTest}, "", models.Page{Limit: 10}); err != nil || len(subs) != 0 {
			t.Fatalf("b's subscriptions after the refusals: %d %v", len(subs), err)
		}
		expect(t, h.do("PATCH", "/api/merchant", a.Session, map[string]any{"wallets": map[string]any{"evm": wallet}}), http.StatusOK, "")
		h.link(a.TestKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia"})

		// b proves it too (the same person's second account): then b may.
		// b's message says so; a's does not.
		for m, want := range map[*merchant]bool{&b: true, &a: false} {
			r := h.do("POST", "/api/merchant/wallet-proofs/message", m.Session, map[string]any{"address": wallet})
			if r.Status != http.StatusOK || r.data()["provenByAnotherMerchant"] != want || r.data()["provenByAnotherMerchantOn"] != nil {
				t.Fatalf("provenByAnotherMerchant for %s: %s", m.Email, r.Raw)
			}
		}
		msgB, issuedB = message(b, wallet)
		expect(t, prove(b, wallet, issuedB, personal(msgB)), http.StatusCreated, "")
		expect(t, h.do("PATCH", "/api/merchant", b.Session, map[string]any{"wallets": map[string]any{"evm": wallet}}), http.StatusOK, "")
		if r := h.do("POST", "/api/merchant/wallet-proofs/message", b.Session, map[string]any{"address": wallet}); r.data()["provenByAnotherMerchant"] != false {
			t.Fatalf("b proved it too: %s", r.Raw)
		}
		if got := linkNetworks(); len(got) != 1 || got[0] != "base_sepolia" {
			t.Fatalf("b's link once b proved the wallet lists %v", got)
		}

		// Withdrawn: by its prover only (another merchant's proof is not
		// found), then the wallet is free.
		expectField(t, h.do("DELETE", "/api/merchant/wallet-proofs/0x12", a.Session, nil), "address")
		expect(t, h.do("DELETE", "/api/merchant/wallet-proofs/"+sol.PublicKey().String(), b.Session, nil), http.StatusNotFound, "NOT_FOUND")
		expect(t, h.do("DELETE", "/api/merchant/wallet-proofs/"+sol.PublicKey().String(), a.TestKey, nil), http.StatusUnauthorized, "UNAUTHORIZED")
		expect(t, h.do("DELETE", "/api/merchant/wallet-proofs/"+sol.PublicKey().String(), a.Session, nil), http.StatusOK, "")
		expect(t, h.do("PATCH", "/api/merchant", b.Session, map[string]any{"wallets": map[string]any{"solana": sol.PublicKey().String()}}), http.StatusOK, "")
		if r := h.do("GET", "/api/merchant/wallet-proofs", a.Session, nil); len(r.list()) != 1 {
			t.Fatalf("a's proofs after withdrawing one: %s", r.Raw)
		}

		// At most 50 proofs a merchant: b holds one; 49 more, then a 409
		// with a hint; a wallet proven already is still answered.
		for range 49 {
			expect(t, h.do("POST", "/api/merchant/wallet-proofs", b.Session, signedProof(h, b)), http.StatusCreated, "")
		}
		r = h.do("POST", "/api/merchant/wallet-proofs", b.Session, signedProof(h, b))
		expect(t, r, http.StatusConflict, "CONFLICT")
		if !strings.Contains(r.str("message"), "50 wallet proofs") || !strings.Contains(r.str("hint"), "DELETE /api/merchant/wallet-proofs") {
			t.Fatalf("the 51st proof: %s", r.Raw)
		}
		msgB, issuedB = message(b, wallet)
		expect(t, prove(b, wallet, issuedB, personal(msgB)), http.StatusOK, "")
	})
}

// personalSign is key's personal_sign (EIP-191) of msg, as a wallet gives
// it: 65 bytes r, s, v (27 or 28) in hex.
func personalSign(t testing.TB, key *ecdsa.PrivateKey, msg string) string {
	t.Helper()
	sig, err := crypto.Sign(accounts.TextHash([]byte(msg)), key)
	if err != nil {
		t.Fatal(err)
	}
	sig[64] += 27
	return "0x" + hex.EncodeToString(sig)
}
