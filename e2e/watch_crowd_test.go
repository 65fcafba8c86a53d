package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/programs/system"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/chain/soldev"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

// TestWatcherFindsAPaymentInACrowd: a customer pays a session with an
// EIP-3009 authorization and closes the tab (nothing submitted) after a
// stranger opened 5,001 sessions of their own on the same network (the
// session route is public). The watcher used to ask the chain about the
// newest 5,000 sessions' references only, so the genuine one was never
// found; it now reads every authorization of the new blocks and asks the
// store which are watched, and the session completes.
func TestWatcherFindsAPaymentInACrowd(t *testing.T) {
	ctx := context.Background()
	// The watcher is run by the test, once the crowd is there: a pass
	// begun before would still list the genuine session.
	s, dc := devChainStack(t, 200*time.Millisecond, stackOptions{})
	key, _ := s.merchant()
	// The session declares another wallet than the one that pays (a
	// customer who switched accounts in their wallet app): only the
	// reference ties the payment to it, no plain-transfer match.
	s.wallet = "0x00000000000000000000000000000000000000aa"
	genuine, link := s.openSession(key, "", "12.50")
	g, err := s.store.CheckoutSession(ctx, genuine)
	if err != nil {
		t.Fatal(err)
	}
	// The crowd: newer sessions of the same network, each with its own
	// reference (written to the store directly: 5,001 through the API
	// would be the rate limiter's test).
	started := time.Now()
	for range 5001 {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		ref := "0x" + hex.EncodeToString(b)
		cs := &models.CheckoutSession{MerchantID: g.MerchantID, Mode: g.Mode, PaymentLinkID: link, Network: g.Network,
			Subtotal: money.FromCents(100), ExpectedAmount: money.FromCents(100), MerchantWalletAddress: g.MerchantWalletAddress,
			TokenAddress: g.TokenAddress, ExpiresAt: time.Now().Add(30 * time.Minute), PaymentReference: &ref, WorkflowStarted: true}
		if err := s.store.CreateCheckoutSession(ctx, cs); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("5,001 sessions written in %s", time.Since(started).Round(time.Millisecond))
	if refs, err := s.store.WatchedReferences(ctx, g.Network, time.Now().Add(-time.Hour), 5000); err != nil || len(refs) != 5000 ||
		strings.Contains(strings.Join(refs, ","), *g.PaymentReference) {
		t.Fatalf("the newest 5,000 references (%d, %v) include the genuine session's: the test would prove nothing", len(refs), err)
	}
	p, err := devchain.Pay(ctx, devchain.PayOptions{APIBase: s.http.URL, RPCURL: dc.RPCURL(), SessionID: genuine, NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	d := s.watchUntil(genuine, "complete", 60*time.Second)
	if h := d["session"].(map[string]any)["txHash"]; !strings.EqualFold(h.(string), p.TxHash) {
		t.Fatalf("completed with %v, paid %s", h, p.TxHash)
	}
}

// TestSolanaWatcherFindsAPaymentInACrowd is the same on the Solana dev
// chain, where the watcher asks the node about each watched reference (the
// newest 5,000): past that many, it also reads the transactions that
// reached the merchants' USDC accounts and asks the store which carry a
// watched reference, so the genuine session, older than the crowd,
// completes.
func TestSolanaWatcherFindsAPaymentInACrowd(t *testing.T) {
	ctx := context.Background()
	s, sc := solanaDevStack(t, stackOptions{}) // the watcher is run by the test, as above
	key, session := s.merchant()
	link := s.solanaLink(key, session)
	genuine := s.openSolanaSession(link)["id"].(string)
	g, err := s.store.CheckoutSession(ctx, genuine)
	if err != nil {
		t.Fatal(err)
	}
	for range 5001 {
		ref := solana.NewWallet().PublicKey().String()
		cs := &models.CheckoutSession{MerchantID: g.MerchantID, Mode: g.Mode, PaymentLinkID: link, Network: g.Network,
			Subtotal: money.FromCents(100), ExpectedAmount: money.FromCents(100), MerchantWalletAddress: g.MerchantWalletAddress,
			TokenAddress: g.TokenAddress, ExpiresAt: time.Now().Add(30 * time.Minute), PaymentReference: &ref, WorkflowStarted: true}
		if err := s.store.CreateCheckoutSession(ctx, cs); err != nil {
			t.Fatal(err)
		}
	}
	if refs, err := s.store.WatchedReferences(ctx, g.Network, time.Now().Add(-time.Hour), 5000); err != nil || len(refs) != 5000 ||
		strings.Contains(strings.Join(refs, ","), *g.PaymentReference) {
		t.Fatalf("the newest 5,000 references (%d, %v) include the genuine session's: the test would prove nothing", len(refs), err)
	}
	p, err := soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), genuine, nil, soldev.PayOptions{NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	d := s.watchUntil(genuine, "complete", 60*time.Second)
	if d["session"].(map[string]any)["txHash"] != p.Signature {
		t.Fatalf("completed with %v, paid %s", d["session"].(map[string]any)["txHash"], p.Signature)
	}
}

// watchUntil runs the stack's watcher (its verifier as finder), a pass at
// a time, until the session has the status or within has passed.
func (s *stack) watchUntil(sessionID, status string, within time.Duration) map[string]any {
	s.t.Helper()
	s.watchWithVerifier()
	deadline := time.Now().Add(within)
	for {
		s.checkout.WatchOnce(context.Background(), nil)
		cs, err := s.store.CheckoutSession(context.Background(), sessionID)
		if err != nil {
			s.t.Fatal(err)
		}
		if cs.Status == status || time.Now().After(deadline) {
			return s.waitStatus(sessionID, status, time.Second)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// watchWithVerifier has the stack's watcher find payments with the stack's
// verifier (a chain.MultiVerifier).
func (s *stack) watchWithVerifier() {
	s.t.Helper()
	mv, ok := s.verifier.(*chain.MultiVerifier)
	if !ok {
		s.t.Fatal("the watcher needs a chain.MultiVerifier")
	}
	s.checkout.Finder, s.checkout.Verifier = mv, mv
}

// TestSolanaWatcherFindsAPaymentPastAFlood: a customer pays a session's
// Solana Pay request and closes the tab (nothing submitted); a stranger who
// saw the payment then sends 1,001 transactions of their own carrying the
// session's reference key (a lamport to the customer, the key read-only),
// so the reference's newest 1,000 signatures, all the watcher asked the
// node for, no longer hold the customer's. The watcher also reads the new
// transactions that reached the merchant's USDC account, whose reads skip
// nothing, and the session completes; on the code before, it expired with
// the money unrecorded.
func TestSolanaWatcherFindsAPaymentPastAFlood(t *testing.T) {
	ctx := context.Background()
	s, sc := solanaDevStack(t, stackOptions{}) // the watcher is run by the test
	key, session := s.merchant()
	genuine := s.openSolanaSession(s.solanaLink(key, session))["id"].(string)
	g, err := s.store.CheckoutSession(ctx, genuine)
	if err != nil {
		t.Fatal(err)
	}
	ref := solana.MustPublicKeyFromBase58(*g.PaymentReference)
	p, err := soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), genuine, nil, soldev.PayOptions{NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	client := sc.Client()
	stranger := soldev.StrangerKey()
	bh, err := client.GetLatestBlockhash(ctx, rpc.CommitmentConfirmed)
	if err != nil {
		t.Fatal(err)
	}
	var last solana.Signature
	for i := range 1001 {
		ix := system.NewTransferInstruction(uint64(i+1), stranger.PublicKey(), soldev.Customer).Build()
		withRef := solana.NewInstruction(ix.ProgramID(), append(ix.Accounts(), solana.Meta(ref)), must(ix.Data()))
		tx, err := solana.NewTransaction([]solana.Instruction{withRef}, bh.Value.Blockhash, solana.TransactionPayer(stranger.PublicKey()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Sign(func(k solana.PublicKey) *solana.PrivateKey { return &stranger }); err != nil {
			t.Fatal(err)
		}
		if last, err = client.SendTransactionWithOpts(ctx, tx, rpc.TransactionOpts{SkipPreflight: true}); err != nil {
			t.Fatalf("flood transaction %d: %v", i, err)
		}
	}
	// The flood is on chain, and the customer's payment is not among the
	// reference's newest 1,000 signatures: the test would prove nothing.
	limit := 1000
	deadline := time.Now().Add(30 * time.Second)
	for {
		sigs, err := client.GetSignaturesForAddressWithOpts(ctx, ref, &rpc.GetSignaturesForAddressOpts{Limit: &limit, Commitment: rpc.CommitmentConfirmed})
		if err != nil {
			t.Fatal(err)
		}
		if len(sigs) == limit && sigs[0].Signature == last {
			for _, sig := range sigs {
				if sig.Signature.String() == p.Signature {
					t.Fatal("the customer's payment is among the reference's newest 1,000 signatures")
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flood did not land: %d signatures", len(sigs))
		}
		time.Sleep(200 * time.Millisecond)
	}
	d := s.watchUntil(genuine, "complete", 60*time.Second)
	if d["session"].(map[string]any)["txHash"] != p.Signature {
		t.Fatalf("completed with %v, paid %s", d["session"].(map[string]any)["txHash"], p.Signature)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
