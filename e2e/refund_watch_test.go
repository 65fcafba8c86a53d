package e2e

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/workflows"
)

// TestRefundFoundOnChain pays refunds on a dev chain the way a merchant
// paying from a wallet app does, never submitting a hash, with the refund
// watcher running as the worker runs it: transfers that do not pay the
// refund (from another wallet, one unit short, to another wallet) leave it
// pending; the merchant's transfer of its amount to its destination makes it
// succeed with that hash and its payment.refunded delivered; of two refunds
// one transfer could pay, the older takes it and the other waits for its own;
// a hash the merchant submits by hand is taken as before; a refund to a
// destination of the merchant's choosing is found there.
func TestRefundFoundOnChain(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{watchRefunds: true})
	key, session := s.merchant()
	rc := newReceiver(t, nil)
	s.webhookEndpoint(session, rc, "payment.refunded")
	paid := s.paidOnDevChain(dc, key, session, "12.50")
	txID := paid.TxID()

	send := func(from *ecdsa.PrivateKey, to common.Address, u int64) string {
		t.Helper()
		h, err := devchain.PayUSDC(ctx, dc.RPCURL(), from, dc.USDC(), to, big.NewInt(u))
		if err != nil {
			t.Fatal(err)
		}
		return strings.ToLower(h)
	}
	refund := func(amount int64, dest string) string {
		t.Helper()
		body := map[string]any{"transactionId": txID, "amount": decimal(amount)}
		if dest != "" {
			body["destinationWallet"] = dest
		}
		return s.call("POST", "/api/refunds", key, body, 201)["id"].(string)
	}
	// confirmedPast waits until the block holding hash has its
	// confirmations and the watcher has had passes over it since.
	confirmedPast := func(hash string) {
		t.Helper()
		client := dc.Client()
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, err := client.TransactionReceipt(ctx, common.HexToHash(hash))
			head, herr := client.BlockNumber(ctx)
			if err == nil && herr == nil && head >= r.BlockNumber.Uint64()+devchain.DevConfirmations+2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not confirmed: %v %v", hash, err, herr)
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second) // five passes of the watcher
	}
	pending := func(id, why string) {
		t.Helper()
		if r := s.call("GET", "/api/refunds/"+id, key, nil, 200); r["status"] != "pending" || r["txHash"] != nil {
			t.Fatalf("%s: the refund is not pending without a hash: %v", why, r)
		}
	}
	merchant, customer := devchain.MerchantKey(), dc.Customer()
	stranger := crypto.PubkeyToAddress(devchain.StrangerKey().PublicKey)

	// 1. A refund of 1.00 to the payer; transfers that do not pay it.
	a := refund(1_000_000, "")
	confirmedPast(send(devchain.StrangerKey(), customer, 1_000_000))
	pending(a, "the stranger's transfer of its amount to its destination")
	confirmedPast(send(merchant, customer, 999_999))
	pending(a, "the merchant's transfer one unit short")
	confirmedPast(send(merchant, stranger, 1_000_000))
	pending(a, "the merchant's transfer to another wallet")
	// The merchant's, never submitted: it pays the refund.
	aHash := send(merchant, customer, 1_000_000)
	done := s.waitRefund(key, a, "succeeded", 30*time.Second)
	if done["txHash"] != aHash || done["initiatedBy"] != "api" {
		t.Fatalf("refund found on chain: %v (paid %s)", done, aHash)
	}
	got := rc.waitFor("payment.refunded", 20*time.Second, func(g []received) bool { return len(delivered2xx(g)) >= 1 })
	if d := got[0].Payload["data"].(map[string]any); got[0].VerifyErr != nil || d["refundId"] != a || d["txHash"] != aHash ||
		d["fullyRefunded"] != false {
		t.Fatalf("payment.refunded of a refund found on chain: %+v", got[0])
	}

	// 2. Two refunds of 1.50 to the same wallet: one transfer pays the
	// older; the other waits for a transfer of its own.
	b := refund(1_500_000, "")
	c := refund(1_500_000, "")
	bHash := send(merchant, customer, 1_500_000)
	if r := s.waitRefund(key, b, "succeeded", 30*time.Second); r["txHash"] != bHash {
		t.Fatalf("the older twin: %v (paid %s)", r, bHash)
	}
	confirmedPast(bHash)
	pending(c, "the younger twin after one transfer")
	cHash := send(merchant, customer, 1_500_000)
	if r := s.waitRefund(key, c, "succeeded", 30*time.Second); r["txHash"] != cHash {
		t.Fatalf("the younger twin: %v (paid %s)", r, cHash)
	}

	// 3. Submitted by hand with the watcher running: taken as before.
	d := refund(500_000, "")
	p, err := devchain.PayRefund(ctx, devchain.RefundPayOptions{APIBase: s.http.URL, APIKey: key, RefundID: d, RPCURL: dc.RPCURL()})
	if err != nil || !p.Submitted {
		t.Fatalf("a refund submitted by hand: %+v %v", p, err)
	}
	if r := s.waitRefund(key, d, "succeeded", 30*time.Second); r["txHash"] != strings.ToLower(p.TxHash) {
		t.Fatalf("a refund submitted by hand: %v (paid %s)", r, p.TxHash)
	}

	// 4. A refund to a wallet the merchant chose.
	e := refund(250_000, stranger.Hex())
	eHash := send(merchant, stranger, 250_000)
	if r := s.waitRefund(key, e, "succeeded", 30*time.Second); r["txHash"] != eHash || !chain.SameAddress(r["destinationWallet"].(string), stranger.Hex()) {
		t.Fatalf("a refund to another destination: %v (paid %s)", r, eHash)
	}

	txn := s.call("GET", "/api/transactions/"+txID, key, nil, 200)
	if units(txn["refundedAmount"]) != 1_000_000+2*1_500_000+500_000+250_000 {
		t.Fatalf("refunded %v, want 4.75", txn["refundedAmount"])
	}
}

// TestExpiredRefundPaidLate pays a refund on a dev chain after its window
// ended (it failed REFUND_EXPIRED, its amount refundable again), the way a
// merchant paying from a wallet app late does, never submitting a hash: a
// transfer one unit short leaves it expired; the merchant's transfer of its
// amount to its destination makes it succeed with that hash, recorded by a
// RefundLateTransferWorkflow an operator sees beside the refund's own, its
// payment.refunded delivered and its amount refunded on the transaction.
func TestExpiredRefundPaidLate(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{watchRefunds: true, refundWindow: 2 * time.Second})
	key, session := s.merchant()
	rc := newReceiver(t, nil)
	s.webhookEndpoint(session, rc, "payment.refunded")
	paid := s.paidOnDevChain(dc, key, session, "12.50")
	txID := paid.TxID()

	id := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID, "amount": "1.00"}, 201)["id"].(string)
	if r := s.waitRefund(key, id, "failed", 20*time.Second); r["failureReason"] != "REFUND_EXPIRED" {
		t.Fatalf("the refund after its window: %v", r)
	}
	if txn := s.call("GET", "/api/transactions/"+txID, key, nil, 200); units(txn["refundedAmount"]) != 0 {
		t.Fatalf("refunded %v after the refund expired", txn["refundedAmount"])
	}
	merchant, customer := devchain.MerchantKey(), dc.Customer()
	send := func(u int64) string {
		t.Helper()
		h, err := devchain.PayUSDC(ctx, dc.RPCURL(), merchant, dc.USDC(), customer, big.NewInt(u))
		if err != nil {
			t.Fatal(err)
		}
		return strings.ToLower(h)
	}
	short := send(999_999)
	hash := send(1_000_000)
	done := s.waitRefund(key, id, "succeeded", 40*time.Second)
	if done["txHash"] != hash {
		t.Fatalf("the expired refund paid late: %v (paid %s, short %s)", done, hash, short)
	}
	got := rc.waitFor("payment.refunded", 20*time.Second, func(g []received) bool { return len(delivered2xx(g)) >= 1 })
	if d := got[0].Payload["data"].(map[string]any); got[0].VerifyErr != nil || d["refundId"] != id || d["txHash"] != hash {
		t.Fatalf("payment.refunded of a refund paid late: %+v", got[0])
	}
	if txn := s.call("GET", "/api/transactions/"+txID, key, nil, 200); units(txn["refundedAmount"]) != 1_000_000 {
		t.Fatalf("refunded %v, want 1.00", txn["refundedAmount"])
	}
	var res workflows.RefundLateResult
	if err := s.temporal.GetWorkflow(ctx, workflows.RefundLateWorkflowID(id, hash), "").Get(ctx, &res); err != nil || !res.Recorded {
		t.Fatalf("the late transfer's workflow: %+v %v", res, err)
	}
	if _, err := s.temporal.DescribeWorkflowExecution(ctx, workflows.RefundLateWorkflowID(id, short), ""); err == nil {
		t.Fatal("a transfer one unit short was offered to the refund")
	}
}

// TestExpiredRefundSubmittedLate: without the refund watcher, a merchant
// who paid an expired refund late submits the hash: a transfer one unit
// short, or the payment's own transaction, is a 409 saying why; the
// merchant's transfer makes the refund succeed with it (200, its
// payment.refunded delivered); the same hash again answers the same, and
// another hash is a 409.
func TestExpiredRefundSubmittedLate(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{refundWindow: 2 * time.Second})
	key, session := s.merchant()
	rc := newReceiver(t, nil)
	s.webhookEndpoint(session, rc, "payment.refunded")
	paid := s.paidOnDevChain(dc, key, session, "12.50")
	id := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": paid.TxID(), "amount": "1.00"}, 201)["id"].(string)
	if r := s.waitRefund(key, id, "failed", 20*time.Second); r["failureReason"] != "REFUND_EXPIRED" {
		t.Fatalf("the refund after its window: %v", r)
	}
	send := func(u int64) string {
		t.Helper()
		h, err := devchain.PayUSDC(ctx, dc.RPCURL(), devchain.MerchantKey(), dc.USDC(), dc.Customer(), big.NewInt(u))
		if err != nil {
			t.Fatal(err)
		}
		return strings.ToLower(h)
	}
	submit := func(hash string, want int) map[string]any {
		t.Helper()
		return s.call("POST", "/api/refunds/"+id+"/submit", key, map[string]any{"txHash": hash}, want)
	}
	short := send(999_999)
	if e := submit(short, 409); !strings.Contains(fmt.Sprint(e), "does not pay this refund (INVALID_TRANSFER)") {
		t.Fatalf("a short transfer: %v", e)
	}
	if e := submit(strings.ToLower(paid.TxHash), 409); !strings.Contains(fmt.Sprint(e), "does not pay this refund") {
		t.Fatalf("the payment's own transaction: %v", e)
	}
	hash := send(1_000_000)
	r := submit(hash, 200)
	if r["status"] != "succeeded" || r["txHash"] != hash {
		t.Fatalf("the expired refund's transfer submitted late: %v", r)
	}
	if again := submit(hash, 200); again["status"] != "succeeded" || again["txHash"] != hash {
		t.Fatalf("the same hash again: %v", again)
	}
	submit(send(1_000_000), 409)
	got := rc.waitFor("payment.refunded", 20*time.Second, func(g []received) bool { return len(delivered2xx(g)) >= 1 })
	if d := got[0].Payload["data"].(map[string]any); got[0].VerifyErr != nil || d["refundId"] != id || d["txHash"] != hash {
		t.Fatalf("payment.refunded of a refund submitted late: %+v", got[0])
	}
	if txn := s.call("GET", "/api/transactions/"+paid.TxID(), key, nil, 200); units(txn["refundedAmount"]) != 1_000_000 {
		t.Fatalf("refunded %v, want 1.00", txn["refundedAmount"])
	}
}
