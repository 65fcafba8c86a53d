package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/devchain"
)

// TestDevChainBinding plays issue 10's attacks against the whole stack: a
// real Temporal dev server, the dev chain's EIP-3009 test USDC, the API,
// the workers and the reference watcher. A stranger's submit racing the
// customer's own cannot take or burn a bound payment; a payment nobody
// submits is found by its reference; the relayer pays for a customer
// without gas; a stranger's unbound transfer offered to a session does
// not end it (the hash is given back) and stays with the merchant as an
// exception to resolve; a stranger's short transfer submitted to a session
// does not keep the customer's payment from completing it; a stranger's
// own authorization carrying a session's reference does not fail it; a wallet's speed-up of a submitted transaction is followed; a
// stranger's session declaring the customer's wallet does not take their
// plain transfer.
func TestDevChainBinding(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, 200*time.Millisecond, stackOptions{watch: true})
	key, _ := s.merchant()
	s.wallet = dc.Customer().Hex()
	pay := func(o devchain.PayOptions) devchain.SessionPayment {
		t.Helper()
		o.APIBase, o.RPCURL = s.http.URL, dc.RPCURL()
		p, err := devchain.Pay(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	// 1. A stranger's session, declaring the customer's wallet, submits the
	// customer's bound payment before the customer does.
	victim, link := s.openSession(key, "", "12.50")
	thief, _ := s.openSession(key, link, "")
	p := pay(devchain.PayOptions{SessionID: victim, SubmitTo: thief})
	s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": victim, "txHash": p.TxHash}, 200)
	d := s.waitStatus(thief, "failed", 30*time.Second)
	if r := d["session"].(map[string]any)["failureReason"]; r != chain.ReasonInvalidTransfer {
		t.Fatalf("the thief's session failed with %v", r)
	}
	d = s.waitStatus(victim, "complete", 30*time.Second)
	if h := d["session"].(map[string]any)["txHash"]; !strings.EqualFold(h.(string), p.TxHash) {
		t.Fatalf("victim completed with %v, paid %s", h, p.TxHash)
	}

	// 2. Paid, never submitted (the customer closed the tab): the watcher
	// finds the transfer by the session's reference.
	quiet, _ := s.openSession(key, link, "")
	p = pay(devchain.PayOptions{SessionID: quiet, NoSubmit: true})
	d = s.waitStatus(quiet, "complete", 30*time.Second)
	ev := d["events"].([]any)
	if e := ev[1].(map[string]any); e["status"] != "txn_broadcast" || e["source"] != "chain" {
		t.Fatalf("found payment's broadcast entry: %v", e)
	}

	// 3. The relayer broadcasts the customer's signed authorization.
	relayed, _ := s.openSession(key, link, "")
	p = pay(devchain.PayOptions{SessionID: relayed, Relay: true})
	s.waitStatus(relayed, "complete", 30*time.Second)
	// A forged signature is refused before any gas is spent.
	forged, _ := s.openSession(key, link, "")
	sess := s.call("GET", "/api/checkout/session/"+forged, "", nil, 200)["session"].(map[string]any)
	msg := sess["authorization"].(map[string]any)["message"].(map[string]any)
	r := s.callRaw("POST", "/api/checkout/session/"+forged+"/authorization", "", map[string]any{"from": msg["from"],
		"validAfter": "0", "validBefore": msg["validBefore"], "signature": "0x" + strings.Repeat("11", 65)})
	if r.status != 400 || !strings.Contains(r.body, "signature") {
		t.Fatalf("forged authorization: %d %s", r.status, r.body)
	}
	// One about to expire is refused too: it could revert when mined, the
	// relayer's gas spent for nothing.
	r = s.callRaw("POST", "/api/checkout/session/"+forged+"/authorization", "", map[string]any{"from": msg["from"],
		"validAfter": "0", "validBefore": fmt.Sprint(time.Now().Add(10 * time.Second).Unix()), "signature": "0x" + strings.Repeat("11", 65)})
	if r.status != 400 || !strings.Contains(r.body, "validBefore") {
		t.Fatalf("an authorization about to expire: %d %s", r.status, r.body)
	}

	// 4. A plain transfer (a phone wallet paying the QR code's EIP-681
	// request) from the declared wallet, never submitted: the watcher
	// attaches it to the one open session it pays (with two candidates it
	// would attach to none: the customer submits, or it is an exception).
	s.call("POST", "/api/checkout/session/"+forged+"/cancel", "", nil, 200)
	qr, _ := s.openSession(key, link, "")
	pay(devchain.PayOptions{SessionID: qr, Plain: true, NoSubmit: true})
	s.waitStatus(qr, "complete", 30*time.Second)

	// 5. A stranger's plain transfer offered to a session: not the session's
	// payment, but the merchant's money: a wrong_payer exception to resolve.
	// The session gives the hash back and waits for its payment (the same
	// hash is refused); once it has ended, the merchant may attach the
	// exception to it.
	offered, _ := s.openSession(key, link, "")
	p = pay(devchain.PayOptions{SessionID: offered, Plain: true, Key: devchain.StrangerKey()})
	if sess := s.waitReleased(offered, 30*time.Second); sess["status"] != "payment_session_created" || sess["failureReason"] != nil {
		t.Fatalf("released session %v", sess)
	}
	if r := s.callRaw("POST", "/api/checkout/submit", "", map[string]any{"sessionId": offered, "txHash": p.TxHash}); r.status != 400 ||
		!strings.Contains(r.body, `"message":"txHash: transaction `) || !strings.Contains(r.body, "does not pay this session") {
		t.Fatalf("the released hash submitted again: %d %s", r.status, r.body)
	}
	list := s.callList("GET", "/api/payment-exceptions?kind=wrong_payer", key)
	if len(list) != 1 || !strings.EqualFold(list[0]["txHash"].(string), p.TxHash) {
		t.Fatalf("exceptions %v", list)
	}
	s.call("POST", "/api/payment-exceptions/"+list[0]["id"].(string)+"/resolve", key,
		map[string]any{"sessionId": offered, "note": "the customer paid from a friend's wallet"}, 409)
	s.call("POST", "/api/checkout/session/"+offered+"/cancel", "", nil, 200)
	s.waitStatus(offered, "cancelled", 30*time.Second)
	res := s.call("POST", "/api/payment-exceptions/"+list[0]["id"].(string)+"/resolve", key,
		map[string]any{"sessionId": offered, "note": "the customer paid from a friend's wallet"}, 200)
	if tx := res["transaction"].(map[string]any); tx["source"] != "exception" || tx["sessionId"] != offered {
		t.Fatalf("resolved into %v", tx)
	}

	// 5b. A stranger who knows a session's id pays the merchant one unit
	// from their own wallet and submits it there; the customer's payment
	// is mined meanwhile and never submitted (the page's submit met a
	// session holding the stranger's hash). The stranger's transfer is
	// given back and the watcher attaches the customer's: it completes.
	griefed, _ := s.openSession(key, link, "")
	junk := pay(devchain.PayOptions{SessionID: griefed, Plain: true, Key: devchain.StrangerKey(), Units: big.NewInt(1)})
	p = pay(devchain.PayOptions{SessionID: griefed, NoSubmit: true})
	d = s.waitStatus(griefed, "complete", 30*time.Second)
	if h := d["session"].(map[string]any)["txHash"]; !strings.EqualFold(h.(string), p.TxHash) {
		t.Fatalf("completed with %v, the customer paid %s (the stranger %s)", h, p.TxHash, junk.TxHash)
	}

	// 5c. The same with the customer paying the QR code's plain transfer
	// from the declared wallet (no reference): seen while the stranger's
	// hash holds the session, it is offered to the session again once the
	// hash is given back.
	griefed, _ = s.openSession(key, link, "")
	junk = pay(devchain.PayOptions{SessionID: griefed, Plain: true, Key: devchain.StrangerKey(), Units: big.NewInt(1)})
	p = pay(devchain.PayOptions{SessionID: griefed, Plain: true, NoSubmit: true})
	d = s.waitStatus(griefed, "complete", 60*time.Second)
	if h := d["session"].(map[string]any)["txHash"]; !strings.EqualFold(h.(string), p.TxHash) {
		t.Fatalf("completed with %v, the customer paid %s (the stranger %s)", h, p.TxHash, junk.TxHash)
	}

	// 5d. A stranger submits a made-up hash, which no chain will ever show:
	// it holds the session. The customer pays the QR code's plain transfer
	// from the declared wallet; the watcher offers it in the made-up hash's
	// place and it completes the session (before, the session waited out
	// the hour's not-found window, failed TX_NOT_FOUND, and the payment
	// became an unmatched exception).
	held, _ := s.openSession(key, link, "")
	madeUp := "0x" + strings.Repeat("5a", 32)
	s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": held, "txHash": madeUp}, 200)
	p = pay(devchain.PayOptions{SessionID: held, Plain: true, NoSubmit: true})
	d = s.waitStatus(held, "complete", 60*time.Second)
	if h := d["session"].(map[string]any)["txHash"]; !strings.EqualFold(h.(string), p.TxHash) {
		t.Fatalf("completed with %v, the customer paid %s (made up: %s)", h, p.TxHash, madeUp)
	}
	var trail []string
	for _, e := range d["events"].([]any) {
		trail = append(trail, fmt.Sprintf("%s/%s", e.(map[string]any)["status"], e.(map[string]any)["source"]))
	}
	if got := strings.Join(trail, " "); !strings.Contains(got, "txn_broadcast/client payment_session_created/chain txn_broadcast/chain") {
		t.Fatalf("history %s", got)
	}

	// 6. A stranger signs an authorization of their own with the session's
	// reference as its nonce (EIP-3009 nonces are per authorizer) for one
	// unit, mined before the customer's payment; nobody submits either.
	// The watcher finds both by the reference and attaches only the one
	// that pays: the stranger's unit does not fail the session.
	raced, _ := s.openSession(key, link, "")
	pay(devchain.PayOptions{SessionID: raced, Key: devchain.StrangerKey(), Units: big.NewInt(1), NoSubmit: true})
	p = pay(devchain.PayOptions{SessionID: raced, NoSubmit: true})
	d = s.waitStatus(raced, "complete", 30*time.Second)
	if h := d["session"].(map[string]any)["txHash"]; !strings.EqualFold(h.(string), p.TxHash) {
		t.Fatalf("completed with %v, the customer paid %s", h, p.TxHash)
	}

	// 7. The customer's wallet speeds its transaction up after the page
	// submitted its hash: the replacement (same account nonce, twice the
	// tip, a new hash) carries the authorization and the submitted hash is
	// never mined. The session follows the authorization to it.
	sped, _ := s.openSession(key, link, "")
	p = pay(devchain.PayOptions{SessionID: sped, SpeedUp: true})
	if p.Replaced == "" || strings.EqualFold(p.Replaced, p.TxHash) {
		t.Fatalf("not replaced: %+v", p)
	}
	d = s.waitStatus(sped, "complete", 30*time.Second)
	if h := d["session"].(map[string]any)["txHash"]; !strings.EqualFold(h.(string), p.TxHash) {
		t.Fatalf("completed with %v, the replacement was %s (submitted %s)", h, p.TxHash, p.Replaced)
	}

	// 8. A stranger who knows the customer's wallet opens a cheap session
	// declaring it; the customer pays the QR code's plain transfer for their
	// own order and relies on the watcher; the stranger submits its hash.
	// Nothing proves the transfer either session's: neither completes (the
	// stranger's did before, with the customer's money, and the customer's
	// own submit was then refused), and the money is a contested exception
	// naming both, which the merchant attaches to the customer's session.
	cheap, _ := s.openSession(key, "", "1.00")
	mark, _ := s.openSession(key, link, "")
	p = pay(devchain.PayOptions{SessionID: mark, Plain: true, NoSubmit: true})
	s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": cheap, "txHash": p.TxHash}, 200)
	for _, id := range []string{cheap, mark} {
		d = s.waitStatus(id, "failed", 30*time.Second)
		if r := d["session"].(map[string]any)["failureReason"]; r != "TX_CONTESTED" {
			t.Fatalf("session %s failed with %v", id, r)
		}
	}
	list = s.callList("GET", "/api/payment-exceptions?kind=contested", key)
	var contested map[string]any
	for _, e := range list {
		if strings.EqualFold(e["txHash"].(string), p.TxHash) {
			contested = e
		}
	}
	if ids := fmt.Sprint(contested["sessionIds"]); contested == nil || !strings.Contains(ids, cheap) || !strings.Contains(ids, mark) {
		t.Fatalf("contested exceptions %v", list)
	}
	res = s.call("POST", "/api/payment-exceptions/"+contested["id"].(string)+"/resolve", key,
		map[string]any{"sessionId": mark, "note": "the customer's order"}, 200)
	if tx := res["transaction"].(map[string]any); tx["sessionId"] != mark {
		t.Fatalf("resolved into %v", tx)
	}
}

type rawAnswer struct {
	status int
	body   string
}

// callRaw sends a JSON request and returns the status and body as they are.
func (s *stack) callRaw(method, path, token string, body any) rawAnswer {
	s.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, s.http.URL+path, bytes.NewReader(b))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return rawAnswer{status: res.StatusCode, body: string(raw)}
}

// callList GETs a list route and returns its items.
func (s *stack) callList(method, path, token string) []map[string]any {
	s.t.Helper()
	r := s.callRaw(method, path, token, nil)
	if r.status != 200 {
		s.t.Fatalf("%s %s: %d %s", method, path, r.status, r.body)
	}
	var env struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal([]byte(r.body), &env); err != nil {
		s.t.Fatal(err)
	}
	return env.Data
}

// devChainStack is the whole stack on a dev chain of its own (base_sepolia,
// blocks every `block`, polled as often) with its relayer; o says the rest.
func devChainStack(t *testing.T, block time.Duration, o stackOptions) (*stack, *devchain.Chain) {
	t.Helper()
	dc, err := devchain.Start(context.Background(), devchain.Config{Port: devchain.AnyPort, BlockInterval: block})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dc.Close() })
	reg := chain.DefaultRegistry()
	devchain.DevNetwork(dc, chain.NetworkBaseSepolia, reg)
	n, _ := reg.Lookup(chain.NetworkBaseSepolia)
	n.PollInterval = block
	reg.Set(n)
	verifier := chain.NewMultiVerifier(reg)
	t.Cleanup(verifier.Close)
	o.verifier, o.networks = verifier, reg
	o.relayer = chain.NewRelayer(reg, map[string]*ecdsa.PrivateKey{chain.NetworkBaseSepolia: devchain.RelayerKey()})
	return startStack(t, o), dc
}
