package e2e

import (
	"context"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	gethtypes "github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/contracts"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/workflows"
)

// heldSender is a node client whose SendTransaction keeps the signed
// transaction instead of broadcasting it: a wallet that shows a hash and
// whose node dropped the transaction, to be rebroadcast later.
type heldSender struct {
	*ethclient.Client
	held *gethtypes.Transaction
}

func (h *heldSender) SendTransaction(_ context.Context, tx *gethtypes.Transaction) error {
	h.held = tx
	return nil
}

// TestRefundTransferLandsLate: on a dev chain, a refund's transfer is
// signed and its hash submitted, but the transaction reaches no node: the
// refund fails TX_NOT_FOUND when the not-found window (2 s here) passes, and
// holds its amount while the transfer is watched (a second refund of it is
// refused: it would pay the customer twice). The same transaction is then
// broadcast and mined: the refund's late watch verifies it, the refund
// becomes succeeded, the transaction shows it refunded (nothing
// refundable), and payment.refunded reaches the merchant's receiver.
func TestRefundTransferLandsLate(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{refundNotFound: 2 * time.Second})
	key, session := s.merchant()
	rc := newReceiver(t, nil)
	s.webhookEndpoint(session, rc, "payment.refunded")
	paid := s.paidOnDevChain(dc, key, session, "8.00")
	txID, total := paid.TxID(), paid.Total()

	rf := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID}, 201)
	eth, err := ethclient.DialContext(ctx, dc.RPCURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eth.Close)
	hold := &heldSender{Client: eth}
	tr, err := contracts.NewTransactor(ctx, hold, devchain.MerchantKey())
	if err != nil {
		t.Fatal(err)
	}
	amount, _ := new(big.Int).SetString(rf["amountUnits"].(string), 10)
	tx, err := tr.Transact(ctx, contracts.MustLoad(contracts.TestUSDC), dc.USDC(), "transfer", common.HexToAddress(rf["destinationWallet"].(string)), amount)
	if err != nil || hold.held == nil {
		t.Fatalf("sign the refund transfer: %v", err)
	}
	s.call("POST", "/api/refunds/"+rf["id"].(string)+"/submit", key, map[string]any{"txHash": tx.Hash().Hex()}, 200)

	failed := s.waitRefund(key, rf["id"].(string), "failed", 30*time.Second)
	if failed["failureReason"] != chain.ReasonTxNotFound || !strings.Contains(failed["failureMessage"].(string), "still watched until") ||
		failed["amountHeld"] != true {
		t.Fatalf("refund of a transaction that reached no node: %v", failed)
	}
	if got := s.call("GET", "/api/transactions/"+txID, key, nil, 200); units(got["refundableAmount"]) != 0 {
		t.Fatalf("the failed refund's amount is refundable while its transfer is watched: %v", got)
	}
	s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID}, 400)

	// The wallet rebroadcasts it; it is mined.
	if err := eth.SendTransaction(ctx, hold.held); err != nil {
		t.Fatal(err)
	}
	done := s.waitRefund(key, rf["id"].(string), "succeeded", 60*time.Second)
	if done["failureReason"] != nil || done["succeededAt"] == nil || done["failedAt"] == nil || done["txHash"] != strings.ToLower(tx.Hash().Hex()) ||
		done["amountHeld"] != false {
		t.Fatalf("refund after its transfer landed: %v", done)
	}
	if got := s.call("GET", "/api/transactions/"+txID, key, nil, 200); units(got["refundedAmount"]) != total || units(got["refundableAmount"]) != 0 {
		t.Fatalf("transaction after the late refund: %v", got)
	}
	got := rc.waitFor("payment.refunded", 20*time.Second, func(g []received) bool { return len(delivered2xx(g)) >= 1 })
	if ok := delivered2xx(got); len(ok) != 1 {
		t.Fatalf("payment.refunded deliveries %+v", got)
	}
	for _, d := range got {
		data := d.Payload["data"].(map[string]any)
		if d.VerifyErr != nil || d.Event != "payment.refunded" || data["refundId"] != rf["id"] || data["fullyRefunded"] != true ||
			data["txHash"] != strings.ToLower(tx.Hash().Hex()) {
			t.Fatalf("payment.refunded %+v", d)
		}
	}
	// A refund of what is left: nothing.
	s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID}, 400)
}

// TestRefundTransferReplaced: the merchant's wallet signs the refund's
// transfer and shows its hash, which is submitted, but the transaction
// reaches no node; the wallet then sends it again with the same nonce (a
// speed-up: another hash). That hash replaces the first on the refund,
// which succeeds with it; the first can no longer land (its nonce is used).
func TestRefundTransferReplaced(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{})
	key, session := s.merchant()
	txID := s.paidOnDevChain(dc, key, session, "6.00").TxID()
	rf := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID}, 201)
	eth, err := ethclient.DialContext(ctx, dc.RPCURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eth.Close)
	amount, _ := new(big.Int).SetString(rf["amountUnits"].(string), 10)
	to := common.HexToAddress(rf["destinationWallet"].(string))
	send := func(b contracts.Backend, gas uint64) *gethtypes.Transaction {
		tr, err := contracts.NewTransactor(ctx, b, devchain.MerchantKey())
		if err != nil {
			t.Fatal(err)
		}
		tr.GasLimit = gas // another gas limit: the same transfer under another hash
		tx, err := tr.Transact(ctx, contracts.MustLoad(contracts.TestUSDC), dc.USDC(), "transfer", to, amount)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	first := send(&heldSender{Client: eth}, 0) // shown, never sent
	s.call("POST", "/api/refunds/"+rf["id"].(string)+"/submit", key, map[string]any{"txHash": first.Hash().Hex()}, 200)
	again := send(eth, 120_000) // the same nonce: a replacement
	if again.Nonce() != first.Nonce() || again.Hash() == first.Hash() {
		t.Fatalf("not a replacement: nonces %d/%d", first.Nonce(), again.Nonce())
	}
	r := s.call("POST", "/api/refunds/"+rf["id"].(string)+"/submit", key, map[string]any{"txHash": again.Hash().Hex()}, 200)
	if r["status"] != "submitted" || r["txHash"] != strings.ToLower(again.Hash().Hex()) {
		t.Fatalf("after the replacement: %v", r)
	}
	done := s.waitRefund(key, rf["id"].(string), "succeeded", 60*time.Second)
	if done["txHash"] != strings.ToLower(again.Hash().Hex()) {
		t.Fatalf("succeeded with %v, the replacement was %s", done["txHash"], again.Hash().Hex())
	}
	if got := s.call("GET", "/api/transactions/"+txID, key, nil, 200); units(got["refundableAmount"]) != 0 {
		t.Fatalf("transaction after the refund: %v", got)
	}
}

// TestRefundResendRevertsFirstLandsLater: on a dev chain the merchant's
// wallet signs a refund transfer (its hash submitted) that reaches no node,
// then a re-send of it under the nonce before, which is submitted as its
// replacement and reverts. The refund fails TX_REVERTED, but the first
// transfer is still watched (watchedUntil) and the refund holds its amount
// meanwhile (nothing refundable: no second refund can pay the customer
// twice): rebroadcast and mined, it makes the refund succeeded with its
// hash.
func TestRefundResendRevertsFirstLandsLater(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{refundNotFound: 2 * time.Second})
	key, session := s.merchant()
	paid := s.paidOnDevChain(dc, key, session, "7.00")
	txID, total := paid.TxID(), paid.Total()
	rf := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID}, 201)
	id := rf["id"].(string)

	eth, err := ethclient.DialContext(ctx, dc.RPCURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eth.Close)
	hold := &heldSender{Client: eth}
	tr, err := contracts.NewTransactor(ctx, hold, devchain.MerchantKey())
	if err != nil {
		t.Fatal(err)
	}
	tr.GasLimit = 120_000 // the reverting one cannot be estimated
	usdc, to := contracts.MustLoad(contracts.TestUSDC), common.HexToAddress(rf["destinationWallet"].(string))
	tooMuch := new(big.Int).Lsh(big.NewInt(1), 200)
	resend, err := tr.Transact(ctx, usdc, dc.USDC(), "transfer", to, tooMuch) // nonce n: reverts (more than the wallet holds)
	if err != nil {
		t.Fatal(err)
	}
	amount, _ := new(big.Int).SetString(rf["amountUnits"].(string), 10)
	first, err := tr.Transact(ctx, usdc, dc.USDC(), "transfer", to, amount) // nonce n+1: pays the refund
	if err != nil || first.Nonce() != resend.Nonce()+1 {
		t.Fatalf("sign the refund transfer: %v", err)
	}
	s.call("POST", "/api/refunds/"+id+"/submit", key, map[string]any{"txHash": first.Hash().Hex()}, 200)
	s.call("POST", "/api/refunds/"+id+"/submit", key, map[string]any{"txHash": resend.Hash().Hex()}, 200)
	if err := eth.SendTransaction(ctx, resend); err != nil {
		t.Fatal(err)
	}

	failed := s.waitRefund(key, id, "failed", 30*time.Second)
	if failed["failureReason"] != chain.ReasonTxReverted || failed["watchedUntil"] == nil || failed["amountHeld"] != true ||
		!strings.Contains(failed["failureMessage"].(string), strings.ToLower(first.Hash().Hex())) {
		t.Fatalf("refund after its re-send reverted: %v", failed)
	}
	if got := s.call("GET", "/api/transactions/"+txID, key, nil, 200); units(got["refundableAmount"]) != 0 {
		t.Fatalf("the failed refund's amount is refundable while the first transfer is watched: %v", got)
	}
	s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID}, 400)

	// The first transfer is rebroadcast and mined.
	if err := eth.SendTransaction(ctx, first); err != nil {
		t.Fatal(err)
	}
	done := s.waitRefund(key, id, "succeeded", 60*time.Second)
	if done["txHash"] != strings.ToLower(first.Hash().Hex()) || done["failureReason"] != nil || done["watchedUntil"] != nil {
		t.Fatalf("refund after the first transfer landed: %v", done)
	}
	if got := s.call("GET", "/api/transactions/"+txID, key, nil, 200); units(got["refundedAmount"]) != total || units(got["refundableAmount"]) != 0 {
		t.Fatalf("transaction after the late refund: %v", got)
	}
	s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID}, 400)
}

// TestRefundHoldReleasedWhenItsWorkflowIsGone: a refund failed TX_NOT_FOUND
// holds its amount while its workflow watches the transfer. An operator
// terminates that workflow: nothing would end the watch, and the amount
// would stay unrefundable for good. Once the watch's end has passed, the
// refund service's pass gives it back (never while the workflow runs, nor
// before the end), and the refund says why.
func TestRefundHoldReleasedWhenItsWorkflowIsGone(t *testing.T) {
	ctx := context.Background()
	s, dc := devChainStack(t, 250*time.Millisecond, stackOptions{refundNotFound: 2 * time.Second})
	key, session := s.merchant()
	paid := s.paidOnDevChain(dc, key, session, "5.00")
	txID, total := paid.TxID(), paid.Total()
	rf := s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID}, 201)
	id := rf["id"].(string)
	s.call("POST", "/api/refunds/"+id+"/submit", key, map[string]any{"txHash": "0x" + strings.Repeat("ab", 32)}, 200) // reaches no node
	if failed := s.waitRefund(key, id, "failed", 30*time.Second); failed["amountHeld"] != true {
		t.Fatalf("refund not found on chain: %v", failed)
	}
	release := func(want int) {
		t.Helper()
		if n, err := s.refunds.ReleaseLapsedHolds(ctx, time.Hour); err != nil || n != want {
			t.Fatalf("released %d holds, want %d: %v", n, want, err)
		}
	}
	release(0) // watched for a week
	// The watch's end passed while the workflow still runs: kept.
	storetest.Exec(t, s.store, "UPDATE refunds SET watched_until = ? WHERE id = ?", time.Now().Add(-2*time.Hour).UTC(), id)
	release(0)
	if err := s.temporal.TerminateWorkflow(ctx, workflows.RefundWorkflowID(id), "", "operator"); err != nil {
		t.Fatal(err)
	}
	release(1)
	got := s.call("GET", "/api/refunds/"+id, key, nil, 200)
	if got["status"] != "failed" || got["amountHeld"] != false || got["watchedUntil"] != nil ||
		!strings.Contains(got["failureMessage"].(string), "its workflow terminated without ending it") {
		t.Fatalf("refund after its hold was released: %v", got)
	}
	if txn := s.call("GET", "/api/transactions/"+txID, key, nil, 200); units(txn["refundableAmount"]) != total {
		t.Fatalf("the released amount is not refundable: %v", txn)
	}
	release(0)
	s.call("POST", "/api/refunds", key, map[string]any{"transactionId": txID}, 201)
}
