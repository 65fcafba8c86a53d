package checkout_test

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
)

// flakyNode is a node client that drops the first drop transactions sent
// to it (accepted, never broadcast: a node that lost them) and, when
// lagging, answers the pending nonce from the latest block (a node behind
// a load balancer that has not seen another replica's transactions).
type flakyNode struct {
	chain.RelayClient
	mu      sync.Mutex
	drop    int
	lagging bool
	// ahead is added to the pending nonce: a transaction of the key's
	// sent by something else, pooled at the node (until it loses it).
	ahead uint64
}

// TransactionByHash: a lagging node knows no pending transaction (another
// replica's went to another node).
func (f *flakyNode) TransactionByHash(ctx context.Context, h common.Hash) (*types.Transaction, bool, error) {
	tx, pending, err := f.RelayClient.TransactionByHash(ctx, h)
	if f.lagging && err == nil && pending {
		return nil, false, ethereum.NotFound
	}
	return tx, pending, err
}

func (f *flakyNode) SendTransaction(ctx context.Context, tx *types.Transaction) error {
	f.mu.Lock()
	if f.drop > 0 {
		f.drop--
		f.mu.Unlock()
		return nil
	}
	f.mu.Unlock()
	return f.RelayClient.SendTransaction(ctx, tx)
}

func (f *flakyNode) PendingNonceAt(ctx context.Context, a common.Address) (uint64, error) {
	f.mu.Lock()
	ahead := f.ahead
	f.mu.Unlock()
	if f.lagging {
		n, err := f.RelayClient.NonceAt(ctx, a, nil)
		return n + ahead, err
	}
	n, err := f.RelayClient.PendingNonceAt(ctx, a)
	return n + ahead, err
}

// relayEnv is a relayer on the binding table's chain, its ledger in the
// store, on node, with a clock the test moves.
func (e *bindEnv) newRelayer(node *flakyNode, now *time.Time) *chain.Relayer {
	r := chain.NewRelayer(e.reg, map[string]*ecdsa.PrivateKey{chain.NetworkBaseSepolia: e.relayer})
	r.Dial = func(context.Context, chain.Network) (chain.RelayClient, error) { return node, nil }
	r.Ledger = checkout.RelayLedger{Store: e.st}
	r.Now = func() time.Time { return *now }
	return r
}

// signedFor is payer's signed authorization of cs, valid for validFor.
func (e *bindEnv) signedFor(cs *models.CheckoutSession, payer *ecdsa.PrivateKey, validFor time.Duration) chain.Authorization {
	e.t.Helper()
	a := devchain.Authorization{From: e.addr(payer), To: common.HexToAddress(cs.MerchantWalletAddress), Value: big.NewInt(bindDue),
		ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(time.Now().Add(validFor).Unix()), Nonce: common.HexToHash(*cs.PaymentReference)}
	sig, err := devchain.SignAuthorization(payer, e.domain, a)
	if err != nil {
		e.t.Fatal(err)
	}
	return chain.Authorization{From: a.From, To: a.To, Value: a.Value, ValidAfter: a.ValidAfter, ValidBefore: a.ValidBefore, Nonce: a.Nonce,
		Signature: sig}
}

// relayUnmined relays the customer's payment of a new session through a
// relayer on node and submits its hash; a block later it is still
// unmined (node lost it, or it waits behind a nonce).
func (e *bindEnv) relayUnmined(node *flakyNode, now *time.Time) (*chain.Relayer, *models.CheckoutSession, string) {
	e.t.Helper()
	r := e.newRelayer(node, now)
	cs := e.session(e.linkA, e.addr(e.customer))
	h, err := r.Relay(e.ctx, chain.NetworkBaseSepolia, e.signedFor(cs, e.customer, time.Hour))
	if err != nil {
		e.t.Fatal(err)
	}
	e.submit(cs, h)
	e.sim.Commit()
	if got := e.judge(cs); got != "pending" {
		e.t.Fatalf("the relayed payment a block later: %s", got)
	}
	return r, cs, h
}

func (e *bindEnv) relayed(nonce uint64) models.RelayedTransaction {
	e.t.Helper()
	rows, err := e.st.RelayedTransactions(e.ctx, chain.NetworkBaseSepolia, strings.ToLower(e.addr(e.relayer).Hex()), 100)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range rows {
		if r.Nonce == nonce {
			return r
		}
	}
	e.t.Fatalf("no relayed transaction with nonce %d in %+v", nonce, rows)
	return models.RelayedTransaction{}
}

// TestRelayerSendsAStuckTransactionAgain: a relayed transaction the node
// lost stays unmined; the ledger keeps it, Tend leaves it alone for
// BumpAfter and then sends it again, same nonce, fees raised by 12.5% at
// least; the session, whose submitted hash is never mined, follows the
// payer's authorization to the new one and completes; the ledger marks it
// mined and Tend sends nothing more.
func TestRelayerSendsAStuckTransactionAgain(t *testing.T) {
	e := newBindEnv(t)
	now := time.Now()
	r, cs, h1 := e.relayUnmined(&flakyNode{RelayClient: e.sim.Client(), drop: 1}, &now)
	if sent, err := r.Tend(e.ctx, chain.NetworkBaseSepolia); err != nil || sent != 0 {
		t.Fatalf("tended before BumpAfter: %d %v", sent, err)
	}
	first := e.relayed(0)
	now = now.Add(time.Minute)
	if sent, err := r.Tend(e.ctx, chain.NetworkBaseSepolia); err != nil || sent != 1 {
		t.Fatalf("tended after BumpAfter: %d %v", sent, err)
	}
	again := e.relayed(0)
	tip1, _ := new(big.Int).SetString(first.Tip, 10)
	tip2, _ := new(big.Int).SetString(again.Tip, 10)
	cap1, _ := new(big.Int).SetString(first.FeeCap, 10)
	cap2, _ := new(big.Int).SetString(again.FeeCap, 10)
	if len(again.Hashes) != 2 || again.Hashes[0] != strings.ToLower(h1) || again.Status != chain.RelayPending ||
		new(big.Int).Mul(tip2, big.NewInt(8)).Cmp(new(big.Int).Mul(tip1, big.NewInt(9))) < 0 ||
		new(big.Int).Mul(cap2, big.NewInt(8)).Cmp(new(big.Int).Mul(cap1, big.NewInt(9))) < 0 {
		t.Fatalf("sent again: %+v after %+v", again, first)
	}
	e.sim.Commit()
	if got := e.judge(cs); got != "complete (bound)" {
		t.Fatalf("the session after the new transaction was mined: %s", got)
	}
	if stored, err := e.st.CheckoutSession(e.ctx, cs.ID); err != nil || stored.TxHash == nil || *stored.TxHash != again.Hashes[1] {
		t.Fatalf("completed with %v, sent again as %s", stored.TxHash, again.Hashes[1])
	}
	now = now.Add(time.Minute)
	if sent, err := r.Tend(e.ctx, chain.NetworkBaseSepolia); err != nil || sent != 0 {
		t.Fatalf("tended once mined: %d %v", sent, err)
	}
	if got := e.relayed(0); got.Status != chain.RelayMined || got.MinedHash != again.Hashes[1] {
		t.Fatalf("ledger after the mining: %+v", got)
	}
}

// TestRelayerFillsANonceGap: a transaction of the relayer's key sent by
// something else (or sent and not recorded) is pooled at nonce 0, so the
// relayed payment takes nonce 1; the node then loses the other one, and
// nothing past nonce 0 could ever be mined. While the node still holds a
// transaction at the gap, Tend leaves it (that one is real); once the node
// holds none, Tend spends the nonce on an empty transaction of its own,
// in the ledger with no payer, and the payment behind it is mined: the
// session completes, the filler is labelled filled. On the code before,
// Tend only sent nonce 1 again, for ever.
func TestRelayerFillsANonceGap(t *testing.T) {
	e := newBindEnv(t)
	now := time.Now()
	node := &flakyNode{RelayClient: e.sim.Client(), ahead: 1}
	r, cs, _ := e.relayUnmined(node, &now)
	if e.relayed(1).Status != chain.RelayPending {
		t.Fatal("the payment behind the gap is not in the ledger")
	}
	rows := func() int {
		t.Helper()
		all, err := e.st.RelayedTransactions(e.ctx, chain.NetworkBaseSepolia, strings.ToLower(e.addr(e.relayer).Hex()), 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(all)
	}
	now = now.Add(time.Minute)
	if _, err := r.Tend(e.ctx, chain.NetworkBaseSepolia); err != nil || rows() != 1 {
		t.Fatalf("tended while the node holds a transaction at the gap: %d rows, %v", rows(), err)
	}
	node.mu.Lock()
	node.ahead = 0 // lost
	node.mu.Unlock()
	now = now.Add(time.Minute)
	if sent, err := r.Tend(e.ctx, chain.NetworkBaseSepolia); err != nil || sent != 1 {
		t.Fatalf("tended with the gap empty: %d %v", sent, err)
	}
	fill := e.relayed(0)
	if fill.Payer != strings.ToLower((common.Address{}).Hex()) || fill.ToAddress != strings.ToLower(e.addr(e.relayer).Hex()) ||
		fill.Status != chain.RelayPending || len(fill.Hashes) != 1 {
		t.Fatalf("the gap's row: %+v", fill)
	}
	e.sim.Commit()
	if got := e.judge(cs); got != "complete (bound)" {
		t.Fatalf("the payment once the gap was filled: %s", got)
	}
	now = now.Add(time.Minute)
	if sent, err := r.Tend(e.ctx, chain.NetworkBaseSepolia); err != nil || sent != 0 {
		t.Fatalf("tended once mined: %d %v", sent, err)
	}
	if f, p := e.relayed(0), e.relayed(1); f.Status != chain.RelayFilled || f.MinedHash != fill.Hashes[0] || p.Status != chain.RelayMined {
		t.Fatalf("ledger after the mining: %+v %+v", f, p)
	}
}

// TestRelayersOnNodesThatDoNotSharePools: two replicas share the relayer's
// key, each on a node that answers the pending nonce from the latest block
// (their pools are not shared). With the ledger in the store they take
// distinct nonces and both payments are mined; each on its own ledger (the
// code before), the second takes the first's nonce and is refused or
// replaces it.
func TestRelayersOnNodesThatDoNotSharePools(t *testing.T) {
	e := newBindEnv(t)
	now := time.Now()
	one, two := e.newRelayer(&flakyNode{RelayClient: e.sim.Client(), lagging: true}, &now), e.newRelayer(&flakyNode{RelayClient: e.sim.Client(), lagging: true}, &now)
	a, b := e.session(e.linkA, e.addr(e.customer)), e.session(e.linkA, e.addr(e.exchange))
	ha, err := one.Relay(e.ctx, chain.NetworkBaseSepolia, e.signedFor(a, e.customer, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	hb, err := two.Relay(e.ctx, chain.NetworkBaseSepolia, e.signedFor(b, e.exchange, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	e.sim.Commit()
	for _, h := range []string{ha, hb} {
		if rc, err := e.sim.Client().TransactionReceipt(e.ctx, common.HexToHash(h)); err != nil || rc.Status != types.ReceiptStatusSuccessful {
			t.Fatalf("relayed %s: %+v %v", h, rc, err)
		}
	}
	if e.relayed(0).Status != chain.RelayPending || e.relayed(1).Status != chain.RelayPending {
		t.Fatal("both in the ledger")
	}
	// The customer's next authorization, on the other replica before their
	// first is mined: busy, though that replica's node never saw the first.
	next := e.session(e.linkA, e.addr(e.customer))
	c0 := e.session(e.linkA, e.addr(e.customer))
	if _, err := one.Relay(e.ctx, chain.NetworkBaseSepolia, e.signedFor(c0, e.customer, time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := two.Relay(e.ctx, chain.NetworkBaseSepolia, e.signedFor(next, e.customer, time.Hour)); !errors.Is(err, chain.ErrRelayBusy) {
		t.Fatalf("the payer's next authorization on another replica: %v", err)
	}
	e.sim.Commit()

	// The same without the shared ledger.
	three, four := e.newRelayer(&flakyNode{RelayClient: e.sim.Client(), lagging: true}, &now), e.newRelayer(&flakyNode{RelayClient: e.sim.Client(), lagging: true}, &now)
	three.Ledger, four.Ledger = nil, nil
	c, d := e.session(e.linkA, e.addr(e.customer)), e.session(e.linkA, e.addr(e.exchange))
	hc, err := three.Relay(e.ctx, chain.NetworkBaseSepolia, e.signedFor(c, e.customer, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, errD := four.Relay(e.ctx, chain.NetworkBaseSepolia, e.signedFor(d, e.exchange, time.Hour))
	e.sim.Commit()
	_, errC := e.sim.Client().TransactionReceipt(e.ctx, common.HexToHash(hc))
	if errD == nil && errC == nil {
		t.Fatal("two replicas without the ledger both relayed: the scenario does not show the fault")
	}
}

// TestRelayerSpendsTheNonceOfAnExpiredAuthorization: a lost transaction
// whose authorization expires before it could be sent again would only
// revert: Tend spends its nonce on an empty transaction to the relayer
// itself (fees raised), so the nonces after it are mined; the ledger says
// cancelled.
func TestRelayerSpendsTheNonceOfAnExpiredAuthorization(t *testing.T) {
	e := newBindEnv(t)
	now := time.Now()
	node := &flakyNode{RelayClient: e.sim.Client(), drop: 1}
	r := e.newRelayer(node, &now)
	cs := e.session(e.linkA, e.addr(e.customer))
	if _, err := r.Relay(e.ctx, chain.NetworkBaseSepolia, e.signedFor(cs, e.customer, 2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Another payment relayed meanwhile waits behind the lost nonce.
	other := e.session(e.linkA, e.addr(e.exchange))
	hOther, err := r.Relay(e.ctx, chain.NetworkBaseSepolia, e.signedFor(other, e.exchange, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	e.sim.Commit()
	if _, err := e.sim.Client().TransactionReceipt(e.ctx, common.HexToHash(hOther)); err == nil {
		t.Fatal("mined past a nonce gap")
	}
	now = now.Add(2 * time.Minute)
	if sent, err := r.Tend(e.ctx, chain.NetworkBaseSepolia); err != nil || sent != 1 {
		t.Fatalf("tended: %d %v (only the lost nonce is sent again)", sent, err)
	}
	e.sim.Commit()
	if rc, err := e.sim.Client().TransactionReceipt(e.ctx, common.HexToHash(hOther)); err != nil || rc.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("the payment behind the gap: %+v %v", rc, err)
	}
	if sent, err := r.Tend(e.ctx, chain.NetworkBaseSepolia); err != nil || sent != 0 {
		t.Fatalf("tended again: %d %v", sent, err)
	}
	if got := e.relayed(0); got.Status != chain.RelayCancelled || got.Data != "0x" || len(got.Hashes) != 2 {
		t.Fatalf("the lost nonce: %+v", got)
	}
	if got := e.relayed(1); got.Status != chain.RelayMined {
		t.Fatalf("the payment behind it: %+v", got)
	}
}

// TestRelayerWaitsAtItsFeeBound: with RELAYER_MAX_FEE_GWEI leaving no room
// for a replacement nodes accept (12.5% over the last fees), Tend sends
// nothing and reports no error: the transaction waits for the base fee.
func TestRelayerWaitsAtItsFeeBound(t *testing.T) {
	e := newBindEnv(t)
	now := time.Now()
	r := e.newRelayer(&flakyNode{RelayClient: e.sim.Client(), drop: 1}, &now)
	cs := e.session(e.linkA, e.addr(e.customer))
	if _, err := r.Relay(e.ctx, chain.NetworkBaseSepolia, e.signedFor(cs, e.customer, time.Hour)); err != nil {
		t.Fatal(err)
	}
	feeCap, _ := new(big.Int).SetString(e.relayed(0).FeeCap, 10)
	r.MaxFeeCap = new(big.Int).Div(new(big.Int).Mul(feeCap, big.NewInt(105)), big.NewInt(100))
	now = now.Add(time.Minute)
	for range 2 {
		if sent, err := r.Tend(e.ctx, chain.NetworkBaseSepolia); err != nil || sent != 0 {
			t.Fatalf("at the bound: %d %v", sent, err)
		}
	}
	r.MaxFeeCap = nil
	if sent, err := r.Tend(e.ctx, chain.NetworkBaseSepolia); err != nil || sent != 1 {
		t.Fatalf("without the bound: %d %v", sent, err)
	}
}

// TestRelayerLabelsWhatWasMined: a nonce whose authorization expired is
// given an empty transaction, but the original call (sent again by a node
// that had kept it) is mined first: the ledger says mined, with the
// original's hash, not cancelled.
func TestRelayerLabelsWhatWasMined(t *testing.T) {
	e := newBindEnv(t)
	now := time.Now()
	node := &flakyNode{RelayClient: e.sim.Client(), drop: 2} // the call and its empty replacement
	r := e.newRelayer(node, &now)
	cs := e.session(e.linkA, e.addr(e.customer))
	h1, err := r.Relay(e.ctx, chain.NetworkBaseSepolia, e.signedFor(cs, e.customer, 2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	first := e.relayed(0)
	now = now.Add(2 * time.Minute)
	if sent, err := r.Tend(e.ctx, chain.NetworkBaseSepolia); err != nil || sent != 1 {
		t.Fatalf("tended: %d %v", sent, err)
	}
	if got := e.relayed(0); got.CancelFrom != 1 || got.Data != "0x" {
		t.Fatalf("not replaced by an empty transaction: %+v", got)
	}
	// The original, as signed (deterministic signatures: the same hash),
	// reaches the chain after all.
	data, _ := hexutil.Decode(first.Data)
	to := common.HexToAddress(first.ToAddress)
	tip, _ := new(big.Int).SetString(first.Tip, 10)
	feeCap, _ := new(big.Int).SetString(first.FeeCap, 10)
	orig, err := types.SignNewTx(e.relayer, types.LatestSignerForChainID(big.NewInt(1337)), &types.DynamicFeeTx{ChainID: big.NewInt(1337),
		Nonce: 0, GasTipCap: tip, GasFeeCap: feeCap, Gas: first.Gas, To: &to, Data: data})
	if err != nil || !strings.EqualFold(orig.Hash().Hex(), h1) {
		t.Fatalf("the original re-signed: %v %v (relayed %s)", orig.Hash().Hex(), err, h1)
	}
	if err := e.sim.Client().SendTransaction(e.ctx, orig); err != nil {
		t.Fatal(err)
	}
	e.sim.Commit()
	if _, err := r.Tend(e.ctx, chain.NetworkBaseSepolia); err != nil {
		t.Fatal(err)
	}
	if got := e.relayed(0); got.Status != chain.RelayMined || got.MinedHash != strings.ToLower(h1) {
		t.Fatalf("after the original was mined: %+v", got)
	}
}
