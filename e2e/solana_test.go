package e2e

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/soldev"
)

// TestSolanaDevChainPayment pays solana_devnet sessions end to end on the
// local Solana runtime (LiteSVM behind the sidecar): a Solana Pay transfer
// carrying the session's reference completes the session and its
// checkout.completed reaches a receiver with a valid signature; a payment
// nobody submits is found by its reference; a payment made again after a
// submitted transaction never landed is followed by its reference. It logs the time from the
// submit to complete.
func TestSolanaDevChainPayment(t *testing.T) {
	ctx := context.Background()
	s, sc := solanaDevStack(t, stackOptions{watch: true})
	key, session := s.merchant()
	link := s.solanaLink(key, session)
	rc := newReceiver(t, nil)
	s.webhookEndpoint(session, rc, "checkout.completed")
	open := func() string {
		d := s.openSolanaSession(link)
		if d["paymentReference"] == "" || d["solanaPayUrl"] == nil {
			t.Fatalf("a Solana session without its reference or Solana Pay URL: %v", d)
		}
		return d["id"].(string)
	}

	id := open()
	start := time.Now()
	p, err := soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), id, nil, soldev.PayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Reference == "" {
		t.Fatalf("paid without the session's reference: %+v", p)
	}
	d := s.waitStatus(id, "complete", 30*time.Second)
	t.Logf("solana_devnet: submit to complete in %s (slots of 100 ms, finalized 8 slots after landing)", time.Since(start).Round(time.Millisecond))
	if d["session"].(map[string]any)["txHash"] != p.Signature {
		t.Fatalf("completed with %v, paid %s", d["session"].(map[string]any)["txHash"], p.Signature)
	}
	got := rc.waitFor("checkout.completed", 30*time.Second, func(r []received) bool { return len(delivered2xx(r)) == 1 })
	if got[0].VerifyErr != nil || got[0].Event != "checkout.completed" ||
		got[0].Payload["data"].(map[string]any)["network"] != "solana_devnet" {
		t.Fatalf("delivery %+v", got[0])
	}

	// Paid with the reference, never submitted: found by getSignaturesForAddress(reference).
	id = open()
	if _, err := soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), id, nil, soldev.PayOptions{NoSubmit: true}); err != nil {
		t.Fatal(err)
	}
	s.waitStatus(id, "complete", 30*time.Second)

	// The page submitted a transaction that never lands (its blockhash
	// expired before a leader took it); the customer pays again with the
	// session's reference and nobody submits that one: the session follows
	// its reference to the new transaction instead of failing TX_NOT_FOUND.
	id = open()
	var lost solana.Signature
	lost[0], lost[63] = 7, 9
	s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": id, "txHash": lost.String()}, 200)
	p, err = soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), id, nil, soldev.PayOptions{NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	d = s.waitStatus(id, "complete", 30*time.Second)
	if d["session"].(map[string]any)["txHash"] != p.Signature {
		t.Fatalf("completed with %v, paid again with %s (submitted %s)", d["session"].(map[string]any)["txHash"], p.Signature, lost)
	}
}

// solanaLink gives the merchant a fresh Solana wallet (beside the EVM one)
// and a 3.00 solana_devnet payment link, and returns the link's id.
func (s *stack) solanaLink(key, session string) string {
	s.t.Helper()
	merchant := solana.NewWallet().PublicKey()
	s.call("PATCH", "/api/merchant", session, map[string]any{"wallets": map[string]any{"evm": merchantWallet, "solana": merchant.String()}}, 200)
	return s.call("POST", "/api/payment-links", key, map[string]any{"name": "Sticker", "amount": "3.00", "network": "solana_devnet"}, 201)["id"].(string)
}

// openSolanaSession quotes and opens a session of a solana_devnet link
// declaring the dev customer's wallet, as the hosted page does, and
// returns the created session.
func (s *stack) openSolanaSession(link string) map[string]any {
	s.t.Helper()
	q := s.call("POST", "/api/checkout/quote", "", map[string]any{"linkId": link, "network": "solana_devnet",
		"customer": map[string]any{"country": "DE", "address": "Berlin"}}, 200)
	return s.call("POST", "/api/checkout/session", "", map[string]any{
		"linkId": link, "quoteToken": q["quoteToken"], "walletAddress": soldev.CustomerAddress, "walletType": "solana",
		"network": "solana_devnet", "customer": map[string]any{"name": "Ann", "email": "ann@example.com", "address": "Berlin", "country": "DE"},
		"totalsSnapshot": map[string]any{"subtotalCents": q["subtotalCents"], "taxCents": q["taxCents"],
			"totalCents": q["totalCents"], "calculationId": q["calculationId"]}}, 201)
}

// solanaDevStack starts the local Solana runtime (skipped where Node or the
// sidecar's packages are missing, but under CI=true) and a stack whose
// solana_devnet is it, polled every 200 ms, verified by a MultiVerifier.
func solanaDevStack(t *testing.T, o stackOptions) (*stack, *soldev.Chain) {
	t.Helper()
	sc, err := soldev.Start(context.Background(), soldev.Config{SlotInterval: 100 * time.Millisecond})
	if errors.Is(err, soldev.ErrNodeMissing) || errors.Is(err, soldev.ErrPackagesMissing) {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.Close() })
	reg := chain.DefaultRegistry()
	soldev.DevNetwork(sc, reg)
	n, _ := reg.Lookup(chain.NetworkSolanaDevnet)
	n.PollInterval = 200 * time.Millisecond
	reg.Set(n)
	verifier := chain.NewMultiVerifier(reg)
	t.Cleanup(verifier.Close)
	o.verifier, o.networks = verifier, reg
	return startStack(t, o), sc
}
