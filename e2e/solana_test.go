package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

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

// TestSolanaDevChainRefunds runs refunds of a solana_devnet payment on the
// local Solana runtime, paid as `paygate dev refund` pays them
// (soldev.PayRefund): a transfer from another wallet than the one that
// received the payment fails (wrong sender) and frees its amount; a short
// one fails (short); the merchant's wallet, which holds no SOL (the dev
// chain's mint authority pays its fee), pays half and then the rest by
// default; each succeeds with its signature as txHash, and the two
// payment.refunded deliveries reach a receiver, signed, fullyRefunded false
// then true.
func TestSolanaDevChainRefunds(t *testing.T) {
	ctx := context.Background()
	s, sc := solanaDevStack(t, stackOptions{watch: true})
	key, session := s.merchant()
	link := s.solanaLinkTo(key, session, soldev.Merchant)
	rc := newReceiver(t, nil)
	s.webhookEndpoint(session, rc, "payment.refunded")

	id := s.openSolanaSession(link)["id"].(string)
	paid, err := soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), id, nil, soldev.PayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.waitStatus(id, "complete", 30*time.Second)
	txn := s.call("GET", "/api/transactions?limit=1", key, nil, 200)["data"].([]any)[0].(map[string]any)
	if txn["txHash"] != paid.Signature || txn["network"] != "solana_devnet" {
		t.Fatalf("the newest transaction is not the payment %s: %v", paid.Signature, txn)
	}
	txID, total := txn["id"].(string), units(txn["amount"])
	half := total / 2
	pay := func(refundID string, o soldev.RefundPayOptions) (soldev.RefundPayment, error) {
		o.APIBase, o.APIKey, o.RefundID, o.RPCURL = s.http.URL, key, refundID, sc.RPCURL()
		return soldev.PayRefund(ctx, o)
	}
	refund := func(amount int64) string {
		r := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID, "amount": decimal(amount)}, 201)
		if r["network"] != "solana_devnet" || r["sourceWallet"] != soldev.MerchantAddress || r["destinationWallet"] != soldev.CustomerAddress ||
			r["tokenAddress"] != soldev.USDCMintAddress {
			t.Fatalf("a Solana refund: %v", r)
		}
		return r["id"].(string)
	}

	// From the stranger's wallet (given USDC by the customer first): refused
	// unless asked, then it fails.
	if _, err := soldev.SendToken(ctx, sc.RPCURL(), soldev.CustomerKey(), soldev.USDCMint, soldev.Stranger, uint64(total)); err != nil {
		t.Fatal(err)
	}
	wrong := refund(half)
	if _, err := pay(wrong, soldev.RefundPayOptions{Key: soldev.StrangerKey()}); err == nil || !strings.Contains(err.Error(), "must be paid from") {
		t.Fatalf("paying from another wallet without asking: %v", err)
	}
	if _, err := pay(wrong, soldev.RefundPayOptions{Key: soldev.StrangerKey(), AnyWallet: true}); err != nil {
		t.Fatal(err)
	}
	failed := s.waitRefund(key, wrong, "failed", 30*time.Second)
	if failed["failureReason"] != chain.ReasonInvalidTransfer || !strings.Contains(failed["failureMessage"].(string), "not from the merchant wallet") {
		t.Fatalf("a refund paid by a stranger: %v", failed)
	}
	// Short by one unit, from the merchant's wallet: it fails too. (The
	// customer pays the merchant half again outside checkout first: the
	// merchant's wallet then still holds the whole payment for the refunds
	// below.)
	if _, err := soldev.SendToken(ctx, sc.RPCURL(), soldev.CustomerKey(), soldev.USDCMint, soldev.Merchant, uint64(half)); err != nil {
		t.Fatal(err)
	}
	short := refund(half)
	if _, err := pay(short, soldev.RefundPayOptions{Units: big.NewInt(half - 1)}); err != nil {
		t.Fatal(err)
	}
	failed = s.waitRefund(key, short, "failed", 30*time.Second)
	if failed["failureReason"] != chain.ReasonInvalidTransfer || !strings.Contains(failed["failureMessage"].(string), "received") {
		t.Fatalf("a short refund: %v", failed)
	}
	if got := s.call("GET", "/api/transactions/"+txID, key, nil, 200); units(got["refundableAmount"]) != total || units(got["refundedAmount"]) != 0 {
		t.Fatalf("the failed refunds' amounts are not free again: %v", got)
	}

	// Half, then the rest, from the merchant's wallet, which holds no SOL.
	first := refund(half)
	p1, err := pay(first, soldev.RefundPayOptions{})
	if err != nil || !p1.Submitted || p1.Status != "submitted" || p1.From != soldev.Merchant || !p1.FeeSponsored {
		t.Fatalf("pay the first refund: %+v %v", p1, err)
	}
	if done := s.waitRefund(key, first, "succeeded", 30*time.Second); done["txHash"] != p1.Signature || done["succeededAt"] == nil {
		t.Fatalf("first refund %v", done)
	}
	rest := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID}, 201)
	if units(rest["amount"]) != total-half {
		t.Fatalf("the rest %v", rest)
	}
	p2, err := pay(rest["id"].(string), soldev.RefundPayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.waitRefund(key, rest["id"].(string), "succeeded", 30*time.Second)
	got := s.call("GET", "/api/transactions/"+txID, key, nil, 200)
	if units(got["refundedAmount"]) != total || units(got["refundableAmount"]) != 0 {
		t.Fatalf("after the refunds: %v", got)
	}
	// The customer's USDC came back: what the payment took, less nothing.
	bal, err := sc.Client().GetTokenAccountBalance(ctx, solana.MustPublicKeyFromBase58(soldev.CustomerUSDCAddress), rpc.CommitmentConfirmed)
	if err != nil {
		t.Fatal(err)
	}
	// The payment came back whole (paid total, refunded total). Besides,
	// the customer gave the stranger total, of which half came back (not a
	// refund), and the merchant half, of which half less one unit came
	// back (the short transfer): net, total - half + 1 less than at boot.
	want := int64(soldev.CustomerUSDCUnits) - (total - half + 1)
	if bal.Value.Amount != strconv.FormatInt(want, 10) {
		t.Fatalf("the customer holds %s units, want %d", bal.Value.Amount, want)
	}

	deliveries := rc.waitFor("two payment.refunded", 20*time.Second, func(g []received) bool { return len(delivered2xx(g)) >= 2 })
	sort.Slice(deliveries, func(i, j int) bool { return deliveries[i].At.Before(deliveries[j].At) })
	var full []any
	seen := map[string]bool{}
	for _, d := range deliveries {
		if d.Status < 200 || d.Status > 299 || seen[d.ID] {
			continue
		}
		seen[d.ID] = true
		data := d.Payload["data"].(map[string]any)
		if d.VerifyErr != nil || data["network"] != "solana_devnet" || data["merchantWalletAddress"] != soldev.MerchantAddress {
			t.Fatalf("delivery %+v", d)
		}
		full = append(full, data["fullyRefunded"])
	}
	if fmt.Sprint(full) != "[false true]" {
		t.Fatalf("fullyRefunded %v", full)
	}
	t.Logf("paid %s USDC in %s; refunded %s + %s in %s and %s", decimal(total), paid.Signature, decimal(half), decimal(total-half), p1.Signature, p2.Signature)
}

// TestSolanaRefundFoundOnChain: with the refund watcher running, a
// solana_devnet refund paid from the merchant's wallet without submitting
// the signature succeeds with it; a transfer one unit short, never
// submitted, leaves the refund pending.
func TestSolanaRefundFoundOnChain(t *testing.T) {
	ctx := context.Background()
	s, sc := solanaDevStack(t, stackOptions{watch: true, watchRefunds: true})
	key, session := s.merchant()
	link := s.solanaLinkTo(key, session, soldev.Merchant)
	rc := newReceiver(t, nil)
	s.webhookEndpoint(session, rc, "payment.refunded")
	txID := s.paidOnSolana(sc, key, link)
	r := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID, "amount": "1.00"}, 201)["id"].(string)
	pay := func(o soldev.RefundPayOptions) soldev.RefundPayment {
		t.Helper()
		o.APIBase, o.APIKey, o.RefundID, o.RPCURL, o.NoSubmit = s.http.URL, key, r, sc.RPCURL(), true
		p, err := soldev.PayRefund(ctx, o)
		if err != nil || p.Submitted {
			t.Fatalf("pay refund %s: %+v %v", r, p, err)
		}
		return p
	}

	pay(soldev.RefundPayOptions{Units: big.NewInt(999_999)})
	time.Sleep(2 * time.Second) // ten passes of the watcher over a confirmed transfer
	if got := s.call("GET", "/api/refunds/"+r, key, nil, 200); got["status"] != "pending" || got["txHash"] != nil {
		t.Fatalf("a transfer one unit short paid the refund: %v", got)
	}
	p := pay(soldev.RefundPayOptions{})
	if done := s.waitRefund(key, r, "succeeded", 30*time.Second); done["txHash"] != p.Signature {
		t.Fatalf("refund found on chain: %v (paid %s)", done, p.Signature)
	}
	got := rc.waitFor("payment.refunded", 20*time.Second, func(g []received) bool { return len(delivered2xx(g)) >= 1 })
	if d := got[0].Payload["data"].(map[string]any); got[0].VerifyErr != nil || d["refundId"] != r || d["txHash"] != p.Signature ||
		d["network"] != "solana_devnet" {
		t.Fatalf("payment.refunded of a refund found on chain: %+v", got[0])
	}
}

// TestSolanaExpiredRefundPaidLate: a solana_devnet refund left to expire
// (REFUND_EXPIRED) and then paid from the merchant's wallet, never
// submitted, as `paygate dev refund --no-submit` pays it: the refund
// watcher finds the transfer and the refund succeeds with it.
func TestSolanaExpiredRefundPaidLate(t *testing.T) {
	ctx := context.Background()
	s, sc := solanaDevStack(t, stackOptions{watch: true, watchRefunds: true, refundWindow: 2 * time.Second})
	key, session := s.merchant()
	link := s.solanaLinkTo(key, session, soldev.Merchant)
	txID := s.paidOnSolana(sc, key, link)
	r := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID, "amount": "1.00"}, 201)["id"].(string)
	if got := s.waitRefund(key, r, "failed", 20*time.Second); got["failureReason"] != "REFUND_EXPIRED" {
		t.Fatalf("the refund after its window: %v", got)
	}
	p, err := soldev.PayRefund(ctx, soldev.RefundPayOptions{APIBase: s.http.URL, APIKey: key, RefundID: r, RPCURL: sc.RPCURL(), NoSubmit: true})
	if err != nil || p.Submitted || !p.Late {
		t.Fatalf("paying an expired refund late: %+v %v", p, err)
	}
	if done := s.waitRefund(key, r, "succeeded", 40*time.Second); done["txHash"] != p.Signature {
		t.Fatalf("the expired refund paid late: %v (paid %s)", done, p.Signature)
	}
}

// paidOnSolana opens a session of a solana_devnet link, pays it from the
// dev customer's wallet and returns its transaction's id once complete.
func (s *stack) paidOnSolana(sc *soldev.Chain, key, link string) string {
	s.t.Helper()
	id := s.openSolanaSession(link)["id"].(string)
	if _, err := soldev.PaySession(context.Background(), s.http.URL, sc.RPCURL(), soldev.CustomerKey(), id, nil, soldev.PayOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.waitStatus(id, "complete", 30*time.Second)
	return s.call("GET", "/api/transactions?limit=1", key, nil, 200)["data"].([]any)[0].(map[string]any)["id"].(string)
}

// solanaLink gives the merchant a fresh Solana wallet (beside the EVM one)
// and a 3.00 solana_devnet payment link, and returns the link's id.
func (s *stack) solanaLink(key, session string) string {
	s.t.Helper()
	return s.solanaLinkTo(key, session, solana.NewWallet().PublicKey())
}

// solanaLinkTo sets wallet as the merchant's Solana wallet (beside the EVM
// one) and makes a 3.00 solana_devnet payment link; it returns the link's id.
func (s *stack) solanaLinkTo(key, session string, wallet solana.PublicKey) string {
	s.t.Helper()
	s.call("PATCH", "/api/merchant", session, map[string]any{"wallets": map[string]any{"evm": merchantWallet, "solana": wallet.String()}}, 200)
	return s.call("POST", "/api/payment-links", key, map[string]any{"name": "Sticker", "amount": "3.00", "network": "solana_devnet"}, 201)["id"].(string)
}

// openSolanaSession quotes and opens a session of a solana_devnet link
// declaring the dev customer's wallet, as the hosted page does, and
// returns the created session.
func (s *stack) openSolanaSession(link string) map[string]any {
	s.t.Helper()
	return s.openSolanaSessionOf(link, soldev.CustomerAddress)
}

// openSolanaSessionOf is openSolanaSession declaring wallet, or none ("").
func (s *stack) openSolanaSessionOf(link, wallet string) map[string]any {
	s.t.Helper()
	q := s.call("POST", "/api/checkout/quote", "", map[string]any{"linkId": link, "network": "solana_devnet",
		"customer": map[string]any{"country": "DE", "address": "Berlin"}}, 200)
	body := map[string]any{
		"linkId": link, "quoteToken": q["quoteToken"], "walletType": "solana",
		"network": "solana_devnet", "customer": map[string]any{"name": "Ann", "email": "ann@example.com", "address": "Berlin", "country": "DE"},
		"totalsSnapshot": map[string]any{"subtotalCents": q["subtotalCents"], "taxCents": q["taxCents"],
			"totalCents": q["totalCents"], "calculationId": q["calculationId"]}}
	if wallet != "" {
		body["walletAddress"] = wallet
	}
	return s.call("POST", "/api/checkout/session", "", body, 201)
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
