package e2e

import (
	"context"
	"crypto/ecdsa"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/gagliardetto/solana-go"

	"github.com/paygate/paygate/chain/devchain"

	"github.com/paygate/paygate/chain/soldev"
	"github.com/paygate/paygate/models"
)

// TestSolanaPaidTwiceIsKept: a customer pays a session's Solana Pay request
// and then pays it again (the code scanned a second time, or the page's
// "pay" tapped twice); nothing is submitted. The watcher completes the
// session with one payment and keeps the other as a duplicate exception
// naming the session. Before, the second was found while the first held
// the session, dropped once it completed (completed sessions were not
// looked up), and on Solana, where no scan of unmatched transfers runs,
// the USDC reached the merchant with no record of it at all.
func TestSolanaPaidTwiceIsKept(t *testing.T) {
	ctx := context.Background()
	s, sc := solanaDevStack(t, stackOptions{}) // the watcher is run by the test
	key, session := s.merchant()
	id := s.openSolanaSession(s.solanaLink(key, session))["id"].(string)
	first, err := soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), id, nil, soldev.PayOptions{NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // another blockhash: a transaction of its own
	second, err := soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), id, nil, soldev.PayOptions{NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	if first.Signature == second.Signature {
		t.Fatal("the two payments are one transaction")
	}
	d := s.watchUntil(id, "complete", 60*time.Second)
	paid := d["session"].(map[string]any)["txHash"].(string)
	other := second.Signature
	if paid == second.Signature {
		other = first.Signature
	} else if paid != first.Signature {
		t.Fatalf("completed with %s, paid %s and %s", paid, first.Signature, second.Signature)
	}
	cs, err := s.store.CheckoutSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	scope := models.Scope{MerchantID: cs.MerchantID, Mode: cs.Mode}
	got := s.watchForExceptions(scope, other, 30*time.Second)
	if len(got) != 1 || got[0].Kind != models.ExceptionDuplicate || got[0].Amount != cs.ExpectedAmount ||
		len(got[0].SessionIDs) != 1 || got[0].SessionIDs[0] != id || !strings.Contains(got[0].Message, paid) {
		t.Fatalf("the second payment's exceptions: %+v", got)
	}
	// Found again on later passes, it is kept once.
	s.checkout.WatchOnce(ctx, nil)
	if all, _, err := s.store.PaymentExceptions(ctx, scope, models.ExceptionFilter{}, models.Page{Limit: 5}); err != nil || len(all) != 1 {
		t.Fatalf("exceptions after another pass: %+v %v", all, err)
	}
	// Paid a third time once the session has completed: no reference is
	// listed any more, and the read of the merchant's USDC account finds it.
	third, err := soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), id, nil, soldev.PayOptions{NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	got = s.watchForExceptions(scope, third.Signature, 30*time.Second)
	if len(got) != 1 || got[0].Kind != models.ExceptionDuplicate || len(got[0].SessionIDs) != 1 || got[0].SessionIDs[0] != id {
		t.Fatalf("the third payment's exceptions: %+v", got)
	}
	// A stranger's transfer of nothing carrying the session's reference:
	// nothing received, nothing kept (the verifier, asked about the
	// session, followed it to the customer's payment, and its amount was
	// kept as a duplicate under the stranger's signature).
	wallet := solana.MustPublicKeyFromBase58(cs.MerchantWalletAddress)
	junk, err := soldev.SendToken(ctx, sc.RPCURL(), soldev.StrangerKey(), soldev.USDCMint, wallet, 0, solana.MustPublicKeyFromBase58(*cs.PaymentReference))
	if err != nil {
		t.Fatal(err)
	}
	for range 15 {
		s.checkout.WatchOnce(ctx, nil)
		time.Sleep(200 * time.Millisecond)
	}
	if all, _, err := s.store.PaymentExceptions(ctx, scope, models.ExceptionFilter{}, models.Page{Limit: 5}); err != nil || len(all) != 2 {
		t.Fatalf("exceptions after the stranger's %s: %+v %v", junk.Signature, all, err)
	}
}

// TestPaidAgainAfterCompletion is the same on the EVM dev chain, with no
// other session open on the network (the authorization scan used to run
// only while one was): a stranger's zero-value authorization carrying the
// completed session's reference is kept as nothing, and a full payment
// another wallet signed with it (the customer's second wallet, say) is a
// late exception naming the session.
func TestPaidAgainAfterCompletion(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, 200*time.Millisecond, stackOptions{}) // the watcher is run by the test
	eth, err := ethclient.DialContext(ctx, dc.RPCURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eth.Close)
	key, _ := s.merchant()
	s.wallet = dc.Customer().Hex()
	id, _ := s.openSession(key, "", "12.50")
	if _, err := devchain.Pay(ctx, devchain.PayOptions{APIBase: s.http.URL, RPCURL: dc.RPCURL(), SessionID: id, NoSubmit: true}); err != nil {
		t.Fatal(err)
	}
	s.watchUntil(id, "complete", 60*time.Second)
	cs, err := s.store.CheckoutSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	domain, err := devchain.ReadTokenDomain(ctx, eth, dc.USDC())
	if err != nil {
		t.Fatal(err)
	}
	stranger := devchain.StrangerKey()
	// authorize has signer sign units to to with the session's reference as
	// its nonce, and the stranger broadcast it.
	authorize := func(signer *ecdsa.PrivateKey, to common.Address, units int64) string {
		t.Helper()
		a := devchain.Authorization{From: crypto.PubkeyToAddress(signer.PublicKey), To: to, Value: big.NewInt(units),
			ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(time.Now().Add(time.Hour).Unix()), Nonce: common.HexToHash(*cs.PaymentReference)}
		sig, err := devchain.SignAuthorization(signer, domain, a)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := devchain.BroadcastAuthorization(ctx, eth, stranger, dc.USDC(), a, sig)
		if err != nil {
			t.Fatal(err)
		}
		return tx.Hash().Hex()
	}
	scope := models.Scope{MerchantID: cs.MerchantID, Mode: cs.Mode}
	exceptions := func(hash string, within time.Duration) []models.PaymentException {
		return s.watchForExceptions(scope, strings.ToLower(hash), within)
	}
	// A wallet of nothing signs nothing to itself: nothing received,
	// nothing kept.
	nobody, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	junk := authorize(nobody, crypto.PubkeyToAddress(nobody.PublicKey), 0)
	if got := exceptions(junk, 4*time.Second); len(got) != 0 {
		t.Fatalf("exceptions of the zero-value authorization: %+v", got)
	}
	// Another wallet pays the amount due with the session's reference.
	again := authorize(stranger, common.HexToAddress(cs.MerchantWalletAddress), cs.ExpectedAmount.Units())
	got := exceptions(again, 15*time.Second)
	if len(got) != 1 || got[0].Kind != models.ExceptionLate || got[0].Amount != cs.ExpectedAmount || len(got[0].SessionIDs) != 1 ||
		got[0].SessionIDs[0] != id || !strings.Contains(got[0].Message, *cs.TxHash) {
		t.Fatalf("the second payment's exceptions: %+v", got)
	}
}

// TestSolanaPlainTransfers: on Solana, a transfer that carries no
// reference (a wallet's plain "send" of the amount the page shows) was seen
// only when its signature was submitted. The wallet read now reports every
// transfer reaching a watched merchant wallet. One from the wallet the one
// open session due its amount declares completes that session, as EVM's
// plain transfers do; one that carries another session's reference is not
// offered to it (the store would fail the session with nothing received).
// One that nothing accounts for becomes an unmatched exception once its
// grace ends, but not while a session open when it arrived is still due
// its amount there (its customer may submit the signature late: made an
// exception, the submit would be contested).
func TestSolanaPlainTransfers(t *testing.T) {
	ctx := context.Background()
	s, sc := solanaDevStack(t, stackOptions{}) // the watcher is run by the test
	s.checkout.UnmatchedGrace = time.Millisecond
	key, session := s.merchant()
	link := s.solanaLink(key, session)

	// 1. A plain send from the declared wallet, never submitted: attached.
	declared := s.openSolanaSession(link)["id"].(string)
	p, err := soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), declared, nil, soldev.PayOptions{NoReference: true, NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.Reference != "" {
		t.Fatalf("the payment carries the reference %s: the test would prove nothing", p.Reference)
	}
	d := s.watchUntil(declared, "complete", 60*time.Second)
	if d["session"].(map[string]any)["txHash"] != p.Signature {
		t.Fatalf("completed with %v, paid %s", d["session"].(map[string]any)["txHash"], p.Signature)
	}
	if e := d["events"].([]any)[1].(map[string]any); e["status"] != "txn_broadcast" || e["source"] != "chain" {
		t.Fatalf("the plain transfer's broadcast entry: %v", e)
	}
	cs, err := s.store.CheckoutSession(ctx, declared)
	if err != nil {
		t.Fatal(err)
	}
	scope := models.Scope{MerchantID: cs.MerchantID, Mode: cs.Mode}
	wallet := solana.MustPublicKeyFromBase58(cs.MerchantWalletAddress)

	// 2. A session due the amount that declares another wallet (a customer
	// who named the wrong one), paid by a plain send: not attached, and no
	// exception past the grace while the session is open (its customer may
	// still submit the signature); once it is cancelled, an unmatched
	// exception.
	other := s.openSolanaSessionOf(link, soldev.StrangerKey().PublicKey().String())["id"].(string)
	p, err = soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), other, nil, soldev.PayOptions{NoReference: true, NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.watchForExceptions(scope, p.Signature, 3*time.Second); len(got) != 0 {
		t.Fatalf("exceptions while the session is open: %+v", got)
	}
	if st := s.call("GET", "/api/checkout/session/"+other, "", nil, 200)["session"].(map[string]any); st["txHash"] != nil {
		t.Fatalf("another wallet's plain transfer attached: %v", st)
	}
	s.call("POST", "/api/checkout/session/"+other+"/cancel", "", nil, 200)
	got := s.watchForExceptions(scope, p.Signature, 30*time.Second)
	if len(got) != 1 || got[0].Kind != models.ExceptionUnmatched || got[0].Amount != cs.ExpectedAmount || got[0].PayerAddress != soldev.CustomerAddress {
		t.Fatalf("the plain transfer's exceptions once its session ended: %+v", got)
	}

	// 3. An amount no session is due: kept for the merchant once the grace
	// ends (the completed sessions keep the wallet read).
	sent, err := soldev.SendToken(ctx, sc.RPCURL(), soldev.CustomerKey(), soldev.USDCMint, wallet, 1234)
	if err != nil {
		t.Fatal(err)
	}
	got = s.watchForExceptions(scope, sent.Signature, 30*time.Second)
	if len(got) != 1 || got[0].Kind != models.ExceptionUnmatched || got[0].Amount != 1234 || got[0].PayerAddress != soldev.CustomerAddress {
		t.Fatalf("the unmatched transfer's exceptions: %+v", got)
	}
	// The sessions' own payments, read again with the wallet, are no exception.
	if all, _, err := s.store.PaymentExceptions(ctx, scope, models.ExceptionFilter{}, models.Page{Limit: 5}); err != nil || len(all) != 2 {
		t.Fatalf("exceptions: %+v %v", all, err)
	}

	// 4. The customer's wallet pays the first (completed) session's request
	// again while another session declaring it is due the same amount: the
	// completed session's duplicate, not the open session's payment (on the
	// code before, offered to it as plain, it failed that session).
	next := s.openSolanaSession(link)["id"].(string)
	again, err := soldev.SendToken(ctx, sc.RPCURL(), soldev.CustomerKey(), soldev.USDCMint, wallet, uint64(cs.ExpectedAmount.Units()),
		solana.MustPublicKeyFromBase58(*cs.PaymentReference))
	if err != nil {
		t.Fatal(err)
	}
	got = s.watchForExceptions(scope, again.Signature, 30*time.Second)
	if len(got) != 1 || got[0].Kind != models.ExceptionDuplicate || len(got[0].SessionIDs) != 1 || got[0].SessionIDs[0] != declared {
		t.Fatalf("the repeated payment's exceptions: %+v", got)
	}
	for range 5 {
		s.checkout.WatchOnce(ctx, nil)
		time.Sleep(200 * time.Millisecond)
	}
	if st := s.call("GET", "/api/checkout/session/"+next, "", nil, 200)["session"].(map[string]any); st["status"] != "payment_session_created" || st["txHash"] != nil {
		t.Fatalf("the open session after another session's payment: %v", st)
	}
	// Its own plain payment still completes it.
	p, err = soldev.PaySession(ctx, s.http.URL, sc.RPCURL(), soldev.CustomerKey(), next, nil, soldev.PayOptions{NoReference: true, NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	d = s.watchUntil(next, "complete", 60*time.Second)
	if d["session"].(map[string]any)["txHash"] != p.Signature {
		t.Fatalf("completed with %v, paid %s", d["session"].(map[string]any)["txHash"], p.Signature)
	}
}

// watchForExceptions runs the stack's watcher a pass at a time until the
// scope has an exception of hash (as stored: EVM hashes in lower case) or
// within has passed, and returns what it has then.
func (s *stack) watchForExceptions(scope models.Scope, hash string, within time.Duration) []models.PaymentException {
	s.t.Helper()
	s.watchWithVerifier()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		s.checkout.WatchOnce(ctx, nil)
		got, _, err := s.store.PaymentExceptions(ctx, scope, models.ExceptionFilter{TxHash: hash}, models.Page{Limit: 5})
		if err != nil {
			s.t.Fatal(err)
		}
		if len(got) > 0 || time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}
