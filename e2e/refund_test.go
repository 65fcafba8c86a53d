package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
	"github.com/paygate/paygate/workflows"
)

// nodeReceiver is the npm `standardwebhooks` receiver of
// webhook/testdata/receiver (receiver.js): it verifies every delivery with
// the Standard Webhooks reference library, answers 204 (valid) or 400, and
// lists what it got at GET /deliveries.
type nodeReceiver struct{ url string }

type nodeDelivery struct {
	ID    string `json:"id"`
	Body  string `json:"body"`
	Valid bool   `json:"valid"`
	Error string `json:"error"`
}

// startNodeReceiver runs receiver.js with the endpoint's secret. Without
// node or its npm packages the test skips (and fails under CI).
func startNodeReceiver(t *testing.T, secret string) *nodeReceiver {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(filepath.Dir(file)), "webhook", "testdata", "receiver")
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(filepath.Join(dir, "node_modules", "standardwebhooks")); err != nil || serr != nil {
		msg := "node or webhook/testdata/receiver/node_modules is missing: run `npm ci --prefix webhook/testdata/receiver`"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	cmd := exec.Command(node, "receiver.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "WEBHOOK_SECRET="+secret)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // receiver.js exits when its stdin closes
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	port, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("receiver.js: %v", err)
	}
	return &nodeReceiver{url: "http://127.0.0.1:" + strings.TrimSpace(port)}
}

func (n *nodeReceiver) deliveries(t *testing.T) []nodeDelivery {
	t.Helper()
	res, err := http.Get(n.url + "/deliveries")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out []nodeDelivery
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// units turns a JSON amount (an exact decimal the API prints) into base units.
func units(v any) int64 { return int64(math.Round(v.(float64) * 1e6)) }

// decimal prints base units as the API's amount strings do (25.50, 1.234567).
func decimal(u int64) string {
	s := strings.TrimRight(fmt.Sprintf("%06d", u%1_000_000), "0")
	for len(s) < 2 {
		s += "0"
	}
	return strconv.FormatInt(u/1_000_000, 10) + "." + s
}

// waitRefund polls GET /api/refunds/{id} until the refund reaches want.
func (s *stack) waitRefund(key, id, want string, within time.Duration) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := s.call("GET", "/api/refunds/"+id, key, nil, 200)
		if r["status"] == want {
			return r
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("refund %s is %v after %s, want %s: %v", id, r["status"], within, want, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// devPayment is a session paid on a dev chain: its id, the payment's hash
// and its transaction as GET /api/transactions lists it.
type devPayment struct {
	SessionID, TxHash string
	Txn               map[string]any
}

// TxID is the paid session's transaction id; Total its amount in units.
func (p devPayment) TxID() string { return p.Txn["id"].(string) }
func (p devPayment) Total() int64 { return units(p.Txn["amount"]) }

// paidOnDevChain sets the merchant (key, session) up to receive in the dev
// merchant wallet, which also pays its refunds, and has the dev customer
// pay a session of amount on dc as `paygate dev pay` does; it waits for the
// session to complete.
func (s *stack) paidOnDevChain(dc *devchain.Chain, key, session, amount string) devPayment {
	s.t.Helper()
	s.call("PATCH", "/api/merchant", session, map[string]any{"wallets": map[string]any{"evm": devchain.MerchantAddress().Hex()}}, 200)
	s.wallet = dc.Customer().Hex()
	sessionID, _ := s.openSession(key, "", amount)
	paid, err := devchain.PaySession(context.Background(), s.http.URL, dc.RPCURL(), devchain.CustomerKey(), sessionID, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	s.waitStatus(sessionID, "complete", 30*time.Second)
	txn := s.call("GET", "/api/transactions?limit=1", key, nil, 200)["data"].([]any)[0].(map[string]any)
	if txn["txHash"] != paid.TxHash {
		s.t.Fatalf("the newest transaction is not the payment %s: %v", paid.TxHash, txn)
	}
	return devPayment{SessionID: sessionID, TxHash: paid.TxHash, Txn: txn}
}

// TestDevChainRefunds runs refunds end to end on the dev server and a dev
// chain: a session paid as `paygate dev pay` does (devchain.PaySession), a
// refund of half from the dashboard paid from the wrong wallet (it fails,
// its amount is free again), the same half paid from the merchant's wallet
// as `paygate dev refund` does (devchain.PayRefund), then the rest by API
// key. Two payment.refunded deliveries reach the merchant's receivers, one
// in Go and one with the npm standardwebhooks library, both verify the
// Standard Webhooks signature, and fullyRefunded is false then true.
func TestDevChainRefunds(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, time.Second, stackOptions{})
	key, session := s.merchant()
	goRecv := newReceiver(t, nil)
	s.webhookEndpoint(session, goRecv, "payment.refunded")
	// Registered at a URL of its own (one endpoint per URL), then pointed
	// at the npm receiver, which needs the secret to start.
	ep := s.call("POST", "/api/webhooks", session, map[string]any{"url": goRecv.url() + "?for=npm", "events": []string{"payment.refunded"}, "mode": "test"}, 201)
	npmRecv := startNodeReceiver(t, ep["secret"].(string))
	s.call("PATCH", "/api/webhooks/"+ep["id"].(string), session, map[string]any{"url": npmRecv.url + "/hooks"}, 200)

	// 1. The customer pays a session (to the dev merchant wallet, which pays the refunds).
	paid := s.paidOnDevChain(dc, key, session, "12.50")
	txID, total := paid.TxID(), paid.Total()
	half := total / 2

	// 2. Half, from the dashboard, paid from another wallet: it fails.
	wrong := s.call("POST", "/api/v1/refunds", session, map[string]any{"transactionId": txID, "amount": decimal(half), "reason": "first half"}, 201)
	if _, err := devchain.PayRefund(ctx, devchain.RefundPayOptions{APIBase: s.http.URL, APIKey: key, RefundID: wrong["id"].(string),
		RPCURL: dc.RPCURL(), Key: devchain.StrangerKey()}); err == nil || !strings.Contains(err.Error(), "must be paid from") {
		t.Fatalf("paying from another wallet without asking: %v", err)
	}
	if _, err := devchain.PayRefund(ctx, devchain.RefundPayOptions{APIBase: s.http.URL, APIKey: key, RefundID: wrong["id"].(string),
		RPCURL: dc.RPCURL(), Key: devchain.StrangerKey(), AnyWallet: true}); err != nil {
		t.Fatal(err)
	}
	failed := s.waitRefund(key, wrong["id"].(string), "failed", 30*time.Second)
	if failed["failureReason"] != chain.ReasonInvalidTransfer || !strings.Contains(failed["failureMessage"].(string), "not from the merchant wallet") {
		t.Fatalf("refund paid by a stranger: %v", failed)
	}
	if got := s.call("GET", "/api/transactions/"+txID, key, nil, 200); units(got["refundableAmount"]) != total {
		t.Fatalf("the failed refund's amount is not free again: %v", got)
	}

	// 3. Half again, paid from the merchant's wallet as `paygate dev refund` does.
	first := s.call("POST", "/api/v1/refunds", session, map[string]any{"transactionId": txID, "amount": decimal(half), "reason": "first half"}, 201)
	p1, err := devchain.PayRefund(ctx, devchain.RefundPayOptions{APIBase: s.http.URL, APIKey: key, RefundID: first["id"].(string), RPCURL: dc.RPCURL()})
	if err != nil || !p1.Submitted || p1.Status != "submitted" || p1.From != devchain.MerchantAddress().Hex() {
		t.Fatalf("pay the first refund: %+v %v", p1, err)
	}
	done1 := s.waitRefund(key, first["id"].(string), "succeeded", 30*time.Second)
	if done1["txHash"] != strings.ToLower(p1.TxHash) || done1["succeededAt"] == nil {
		t.Fatalf("first refund %v", done1)
	}

	// 4. The rest, by API key (the remainder by default).
	rest := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID}, 201)
	if units(rest["amount"]) != total-half || rest["initiatedBy"] != "api" {
		t.Fatalf("the rest %v", rest)
	}
	p2, err := devchain.PayRefund(ctx, devchain.RefundPayOptions{APIBase: s.http.URL, APIKey: key, RefundID: rest["id"].(string), RPCURL: dc.RPCURL()})
	if err != nil {
		t.Fatal(err)
	}
	s.waitRefund(key, rest["id"].(string), "succeeded", 30*time.Second)

	// Two payment.refunded deliveries at each receiver, verified, false then true.
	got := goRecv.waitFor("two payment.refunded", 20*time.Second, func(g []received) bool { return len(delivered2xx(g)) >= 2 })
	sort.Slice(got, func(i, j int) bool { return got[i].At.Before(got[j].At) })
	var datas []map[string]any
	for _, r := range got {
		if r.VerifyErr != nil || r.Event != "payment.refunded" || r.Status != 200 {
			t.Fatalf("delivery %+v", r)
		}
		datas = append(datas, r.Payload["data"].(map[string]any))
	}
	if len(datas) != 2 {
		t.Fatalf("%d deliveries: %+v", len(datas), got)
	}
	fields := []string{"refundId", "transactionId", "txHash", "merchantWalletAddress", "amount", "subtotalAmount", "taxAmount",
		"feeReversed", "token", "network", "reason", "fullyRefunded", "initiatedBy", "livemode"}
	for i, want := range []struct {
		id, hash, amount, by string
		reason               any
		full                 bool
	}{
		{first["id"].(string), strings.ToLower(p1.TxHash), decimal(half), "merchant", "first half", false},
		{rest["id"].(string), strings.ToLower(p2.TxHash), decimal(total - half), "api", nil, true},
	} {
		d := datas[i]
		if len(d) != len(fields) {
			t.Fatalf("event %d has fields %v, want exactly %v", i, d, fields)
		}
		for _, f := range fields {
			if _, ok := d[f]; !ok {
				t.Fatalf("event %d lacks %s: %v", i, f, d)
			}
		}
		if d["refundId"] != want.id || d["transactionId"] != txID || d["txHash"] != want.hash || d["amount"] != want.amount ||
			d["initiatedBy"] != want.by || d["reason"] != want.reason || d["fullyRefunded"] != want.full || d["livemode"] != false ||
			d["merchantWalletAddress"] != devchain.MerchantAddress().Hex() || d["feeReversed"] != "0.00" || d["token"] != "USDC" ||
			d["network"] != "base_sepolia" {
			t.Fatalf("event %d: %v", i, d)
		}
	}
	// The same two reached the npm standardwebhooks receiver and verified there.
	deadline := time.Now().Add(20 * time.Second)
	var npm []nodeDelivery
	for {
		npm = npmRecv.deliveries(t)
		if len(npm) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var npmFull []bool
	for _, d := range npm {
		var env struct {
			Data map[string]any `json:"data"`
		}
		if !d.Valid || json.Unmarshal([]byte(d.Body), &env) != nil {
			t.Fatalf("npm standardwebhooks refused a delivery: %+v", d)
		}
		npmFull = append(npmFull, env.Data["fullyRefunded"].(bool))
	}
	if fmt.Sprint(npmFull) != "[false true]" {
		t.Fatalf("npm receiver got %d deliveries, fullyRefunded %v", len(npm), npmFull)
	}

	// The transaction is fully refunded, split exactly; nothing is left.
	txn := s.call("GET", "/api/transactions/"+txID, key, nil, 200)
	refunds := txn["refunds"].([]any)
	var sub, tax int64
	for _, r := range refunds {
		if r := r.(map[string]any); r["status"] == "succeeded" {
			sub, tax = sub+units(r["subtotalAmount"]), tax+units(r["taxAmount"])
		}
	}
	// The link's price (12.50) is the subtotal; the rest of the total is tax.
	if len(refunds) != 3 || units(txn["refundedAmount"]) != total || units(txn["refundableAmount"]) != 0 ||
		sub != 12_500_000 || tax != total-12_500_000 {
		t.Fatalf("transaction after the refunds (subtotal %d, tax %d): %v", sub, tax, txn)
	}
	r := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID}, 400)
	if !strings.Contains(fmt.Sprint(r["message"]), "nothing left to refund") {
		t.Fatalf("a refund of nothing: %v", r)
	}
	// A succeeded refund takes no other transfer.
	if _, err := devchain.PayRefund(ctx, devchain.RefundPayOptions{APIBase: s.http.URL, APIKey: key, RefundID: first["id"].(string),
		RPCURL: dc.RPCURL()}); err == nil || !strings.Contains(err.Error(), "is succeeded") {
		t.Fatalf("paying a succeeded refund again: %v", err)
	}
	t.Logf("paid %s USDC (subtotal+tax) in %s; refunded %s + %s in %s and %s; a refund paid by a stranger failed: %s",
		decimal(total), paid.TxHash, decimal(half), decimal(total-half), p1.TxHash, p2.TxHash, failed["failureMessage"])
}

// TestDevRefundCommand runs the `paygate dev refund REFUND_ID` binary (built
// from cmd/paygate) against the API and a dev chain, with the merchant's
// key from PAYGATE_API_KEY, as a developer would on `make run`: the refund
// is paid from the dev merchant wallet, submitted, and succeeds.
func TestDevRefundCommand(t *testing.T) {
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{})
	bin := buildPaygate(t)
	key, session := s.merchant()
	txID := s.paidOnDevChain(dc, key, session, "3.00").TxID()
	rf := s.call("POST", "/api/v1/refunds", session, map[string]any{"transactionId": txID, "amount": "1.50"}, 201)["id"].(string)

	cmd := exec.Command(bin, "dev", "refund", rf)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PAYGATE_URL=" + s.http.URL,
		"DEVCHAIN_RPC_URL=" + dc.RPCURL(), "PAYGATE_API_KEY=" + key}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "submitted; refund "+rf+" is submitted") {
		t.Fatalf("paygate dev refund: %v\n%s", err, out)
	}
	done := s.waitRefund(key, rf, "succeeded", 30*time.Second)
	if units(done["amount"]) != 1_500_000 {
		t.Fatalf("refund %v", done)
	}
	// Without the key it says how to give one.
	cmd = exec.Command(bin, "dev", "refund", rf)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "PAYGATE_API_KEY") {
		t.Fatalf("without a key: %v\n%s", err, out)
	}
	t.Logf("paygate dev refund said: %s", strings.TrimSpace(string(out)))
}

// TestRefundRepairer: a refund stored without its workflow (a crash between
// the write and the start) gets it from the repairer, once; a submit then
// reaches it.
func TestRefundRepairer(t *testing.T) {
	v := &scriptedVerifier{}
	s := startStack(t, stackOptions{verifier: v})
	ctx := context.Background()
	key, session := s.merchant()
	mid := s.merchantID(session)
	tx := s.recordedPayment(mid, "0x"+strings.Repeat("4", 64))
	r, err := s.store.CreateRefund(ctx, models.RefundRequest{Scope: models.Scope{MerchantID: mid, Mode: models.ModeTest},
		TransactionID: tx.ID, InitiatedBy: models.InitiatedByAdmin, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1, 0} {
		n, err := s.refunds.RepairOnce(ctx, 0)
		if err != nil || n != want {
			t.Fatalf("repair pass %d: %d %v, want %d", i+1, n, err, want)
		}
	}
	if _, err := s.temporal.DescribeWorkflowExecution(ctx, workflows.RefundWorkflowID(r.ID), ""); err != nil {
		t.Fatalf("refund workflow: %v", err)
	}
	h := "0x" + strings.Repeat("6", 64)
	v.set(h, chain.VerifyResult{Seen: true, Verdict: chain.VerdictComplete, Confirmations: 2, Required: 2, ReceivedUnits: "5000000", Payer: merchantWallet})
	if got := s.call("POST", "/api/refunds/"+r.ID+"/submit", key, map[string]any{"txHash": h}, 200); got["status"] != "submitted" {
		t.Fatalf("submit %v", got)
	}
	done := s.waitRefund(key, r.ID, "succeeded", 20*time.Second)
	if done["initiatedBy"] != "admin" {
		t.Fatalf("refund %v", done)
	}
}

// TestRefundWorkflowStoppedIsStartedAgain: refunds whose workflow an
// operator terminated while they were open. Nothing ended them before: the
// amount stayed held and a submit answered 409 "refund is pending". Now a
// submit starts the workflow again from the read model and is taken; the
// refund service's pass starts again an overdue one's (a pending refund
// past its window expires, its amount refundable again; a submitted one
// goes on to its verdict), and leaves a running workflow alone.
func TestRefundWorkflowStoppedIsStartedAgain(t *testing.T) {
	v := &scriptedVerifier{}
	s := startStack(t, stackOptions{verifier: v})
	ctx := context.Background()
	key, session := s.merchant()
	mid := s.merchantID(session)
	tx := s.recordedPayment(mid, "0x"+strings.Repeat("7", 64))
	refund := func(amount string) string {
		return s.call("POST", "/api/refunds", key, map[string]any{"transactionId": tx.ID, "amount": amount}, 201)["id"].(string)
	}
	terminate := func(id string) {
		t.Helper()
		if err := s.temporal.TerminateWorkflow(ctx, workflows.RefundWorkflowID(id), "", "operator"); err != nil {
			t.Fatal(err)
		}
	}
	paid := func(h, units string) {
		v.set(h, chain.VerifyResult{Seen: true, Verdict: chain.VerdictComplete, Confirmations: 2, Required: 2, ReceivedUnits: units, Payer: merchantWallet})
	}
	a, b, c, running := refund("1.00"), refund("2.00"), refund("1.50"), refund("0.25")

	// a: submitted after its workflow was terminated.
	terminate(a)
	hA := "0x" + strings.Repeat("a1", 32)
	paid(hA, "1000000")
	if got := s.call("POST", "/api/refunds/"+a+"/submit", key, map[string]any{"txHash": hA}, 200); got["status"] != "submitted" {
		t.Fatalf("submit to a refund whose workflow was terminated: %v", got)
	}
	s.waitRefund(key, a, "succeeded", 20*time.Second)

	// b: pending, its workflow terminated, its window passed; c:
	// submitted, then its transfer replaced (a speed-up), neither seen
	// yet, its workflow terminated.
	hC, hC2 := "0x"+strings.Repeat("c1", 32), "0x"+strings.Repeat("c2", 32)
	v.set(hC, chain.VerifyResult{Verdict: chain.VerdictPending})
	v.set(hC2, chain.VerifyResult{Verdict: chain.VerdictPending})
	if got := s.call("POST", "/api/refunds/"+c+"/submit", key, map[string]any{"txHash": hC}, 200); got["status"] != "submitted" {
		t.Fatalf("submit c: %v", got)
	}
	if got := s.call("POST", "/api/refunds/"+c+"/submit", key, map[string]any{"txHash": hC2}, 200); got["status"] != "submitted" ||
		got["txHash"] != hC2 {
		t.Fatalf("c's replacement: %v", got)
	}
	terminate(b)
	terminate(c)
	storetest.Exec(t, s.store, "UPDATE refunds SET expires_at = ? WHERE id IN (?, ?)", time.Now().Add(-2*time.Hour).UTC(), b, running)
	storetest.Exec(t, s.store, "UPDATE refunds SET updated_at = ? WHERE id = ?", time.Now().Add(-2*time.Hour).UTC(), c)
	if n, err := s.refunds.ResumeStoppedRefunds(ctx, time.Hour); err != nil || n != 2 {
		t.Fatalf("resumed %d refunds, want 2 (b and c; not the running one): %v", n, err)
	}
	if got := s.waitRefund(key, b, "failed", 20*time.Second); got["failureReason"] != "REFUND_EXPIRED" {
		t.Fatalf("b after its window: %v", got)
	}
	// The first transfer lands, not its replacement: the run started
	// again still checks the hash the current one replaced.
	paid(hC, "1500000")
	s.waitRefund(key, c, "succeeded", 20*time.Second)
	if n, err := s.refunds.ResumeStoppedRefunds(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("a second pass resumed %d: %v", n, err)
	}
	// b's 2.00 is refundable again: 5.00 paid, 1.00 + 1.50 refunded, the
	// running 0.25 held.
	if got := s.call("GET", "/api/transactions/"+tx.ID, key, nil, 200); units(got["refundableAmount"]) != 2_250_000 {
		t.Fatalf("refundable after the resumed refunds: %v", got["refundableAmount"])
	}
}

// recordedPayment records a verified payment of 5.00 on base_sepolia from
// the stack's wallet to the merchant wallet, for refunds of it.
func (s *stack) recordedPayment(merchantID, hash string) *models.Transaction {
	s.t.Helper()
	tx := &models.Transaction{MerchantID: merchantID, Mode: models.ModeTest, Amount: money.FromCents(500), Token: "USDC", Network: "base_sepolia",
		TxHash: hash, WalletAddress: s.wallet, MerchantWalletAddress: merchantWallet, Verification: models.VerificationVerified}
	if err := s.store.RecordTransaction(context.Background(), tx); err != nil {
		s.t.Fatal(err)
	}
	return tx
}
