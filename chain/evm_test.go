package chain

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/params"

	"github.com/paygate/paygate/chain/contracts"
)

// simChainID is the chain id of go-ethereum's simulated backend.
const simChainID = 1337

// evmEnv is a simulated chain with the real test contracts deployed: the
// network's USDC, a look-alike token, a forwarder, a split payer and a
// reverter. The customer holds 1,000 USDC and has approved the three helper
// contracts.
type evmEnv struct {
	t        *testing.T
	ctx      context.Context
	sim      *simulated.Backend
	client   simulated.Client
	customer *contracts.Transactor
	merchant common.Address
	other    common.Address

	usdc, fake, fwd, split, rev common.Address
	net                         Network
	verifier                    *EVMVerifier
}

const customerUnits = 1_000_000_000 // 1,000 USDC

func newEVMEnv(t *testing.T, confirmations uint64) *evmEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	deployerKey, customerKey := mustKey(t), mustKey(t)
	eth := new(big.Int).Mul(big.NewInt(100), big.NewInt(params.Ether))
	sim := simulated.NewBackend(types.GenesisAlloc{
		crypto.PubkeyToAddress(deployerKey.PublicKey): {Balance: eth},
		crypto.PubkeyToAddress(customerKey.PublicKey): {Balance: eth},
	})
	t.Cleanup(func() { _ = sim.Close() })
	e := &evmEnv{t: t, ctx: ctx, sim: sim, client: sim.Client(),
		merchant: crypto.PubkeyToAddress(mustKey(t).PublicKey),
		other:    crypto.PubkeyToAddress(mustKey(t).PublicKey),
	}
	deployer, err := contracts.NewTransactor(ctx, e.client, deployerKey)
	if err != nil {
		t.Fatal(err)
	}
	e.customer, err = contracts.NewTransactor(ctx, e.client, customerKey)
	if err != nil {
		t.Fatal(err)
	}
	deploy := func(name string) common.Address {
		addr, _, err := deployer.Deploy(ctx, contracts.MustLoad(name))
		if err != nil {
			t.Fatalf("deploy %s: %v", name, err)
		}
		return addr
	}
	e.usdc, e.fake = deploy(contracts.TestUSDC), deploy(contracts.LookalikeToken)
	e.fwd, e.split, e.rev = deploy(contracts.Forwarder), deploy(contracts.SplitPayer), deploy(contracts.Reverter)
	e.sim.Commit()
	e.mustMine(deployer.Transact(ctx, contracts.MustLoad(contracts.TestUSDC), e.usdc, "mint", e.customer.From(), big.NewInt(customerUnits)))
	maxUint := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	for _, spender := range []common.Address{e.fwd, e.split, e.rev} {
		e.mustMine(e.customer.Transact(ctx, contracts.MustLoad(contracts.TestUSDC), e.usdc, "approve", spender, maxUint))
	}
	e.net = Network{
		Name: NetworkBaseSepolia, Family: FamilyEVM, Mode: ModeTest, ChainID: simChainID,
		RPCURL: "simulated://", USDC: e.usdc.Hex(), Decimals: USDCDecimals,
		Confirmations: confirmations, PollInterval: time.Second,
	}
	e.verifier, err = NewEVMVerifier(ctx, e.net, e.client)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func mustKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// mustMine commits the pending block and checks the transaction succeeded.
func (e *evmEnv) mustMine(tx *types.Transaction, err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
	e.sim.Commit()
	r, err := e.client.TransactionReceipt(e.ctx, tx.Hash())
	if err != nil || r.Status != types.ReceiptStatusSuccessful {
		e.t.Fatalf("tx %s not mined successfully: %v %+v", tx.Hash(), err, r)
	}
}

// send broadcasts a customer transaction without mining it.
func (e *evmEnv) send(name string, addr common.Address, method string, args ...any) string {
	e.t.Helper()
	tx, err := e.customer.Transact(e.ctx, contracts.MustLoad(name), addr, method, args...)
	if err != nil {
		e.t.Fatalf("%s.%s: %v", name, method, err)
	}
	return tx.Hash().Hex()
}

// Payment scenarios; each broadcasts one customer transaction and returns its hash.
func (e *evmEnv) payDirect(to common.Address, units int64) string {
	return e.send(contracts.TestUSDC, e.usdc, "transfer", to, big.NewInt(units))
}

func (e *evmEnv) payLookalike(units int64) string {
	return e.send(contracts.LookalikeToken, e.fake, "transfer", e.merchant, big.NewInt(units))
}

func (e *evmEnv) payForwarded(units int64) string {
	return e.send(contracts.Forwarder, e.fwd, "forward", e.usdc, e.merchant, big.NewInt(units))
}

func (e *evmEnv) paySplit(first int64, secondTo common.Address, second int64) string {
	return e.send(contracts.SplitPayer, e.split, "payTwice", e.usdc, e.merchant, big.NewInt(first), secondTo, big.NewInt(second))
}

func (e *evmEnv) payReverting(units int64) string {
	e.customer.GasLimit = 200_000 // estimation would refuse a reverting call
	defer func() { e.customer.GasLimit = 0 }()
	return e.send(contracts.Reverter, e.rev, "payThenRevert", e.usdc, e.merchant, big.NewInt(units))
}

func (e *evmEnv) commit(n int) {
	for range n {
		e.sim.Commit()
	}
}

func (e *evmEnv) verify(hash string, expected int64) VerifyResult {
	e.t.Helper()
	return e.verifyTo(hash, e.merchant, expected)
}

func (e *evmEnv) verifyTo(hash string, merchant common.Address, expected int64) VerifyResult {
	e.t.Helper()
	res, err := e.verifier.Verify(e.ctx, VerifyRequest{
		Network: e.net.Name, TxHash: hash, MerchantAddress: merchant.Hex(), ExpectedUnits: big.NewInt(expected).String(),
	})
	if err != nil {
		e.t.Fatalf("Verify(%s): %v", hash, err)
	}
	return res
}

func TestEVMCompletesOnlyAfterConfirmations(t *testing.T) {
	e := newEVMEnv(t, 3)
	hash := e.payDirect(e.merchant, 32_610_000)

	res := e.verify(hash, 32_610_000)
	if res.Seen || res.Verdict != VerdictPending {
		t.Fatalf("before mining: %+v", res)
	}
	for want := uint64(1); want <= 3; want++ {
		e.commit(1)
		res = e.verify(hash, 32_610_000)
		if !res.Seen || res.Confirmations != want || res.Required != 3 {
			t.Fatalf("after %d blocks: %+v", want, res)
		}
		wantVerdict := VerdictPending
		if want == 3 {
			wantVerdict = VerdictComplete
		}
		if res.Verdict != wantVerdict {
			t.Fatalf("after %d blocks: verdict %s, want %s (%s)", want, res.Verdict, wantVerdict, res.Message)
		}
	}
	if res.ReceivedUnits != "32610000" || res.Payer != e.customer.From().Hex() || res.Reason != "" {
		t.Fatalf("complete result: %+v", res)
	}
	head, _ := e.client.HeaderByNumber(e.ctx, new(big.Int).SetUint64(res.BlockNumber))
	if res.BlockHash != head.Hash().Hex() {
		t.Fatalf("block hash %s, want %s", res.BlockHash, head.Hash().Hex())
	}
}

func TestEVMScenarios(t *testing.T) {
	e := newEVMEnv(t, 2)
	const due = 10_000_000
	cases := []struct {
		name     string
		pay      func() string
		verdict  Verdict
		reason   string
		received string
	}{
		{"exact payment", func() string { return e.payDirect(e.merchant, due) }, VerdictComplete, "", "10000000"},
		{"overpayment", func() string { return e.payDirect(e.merchant, due+1) }, VerdictComplete, "", "10000001"},
		{"underpayment", func() string { return e.payDirect(e.merchant, due-1) }, VerdictFailed, ReasonInvalidTransfer, "9999999"},
		{"wrong recipient", func() string { return e.payDirect(e.other, due) }, VerdictFailed, ReasonInvalidTransfer, "0"},
		{"reverted transaction", func() string { return e.payReverting(due) }, VerdictFailed, ReasonTxReverted, "0"},
		{"look-alike token", func() string { return e.payLookalike(due) }, VerdictFailed, ReasonInvalidTransfer, "0"},
		{"through a contract", func() string { return e.payForwarded(due) }, VerdictComplete, "", "10000000"},
		{"two transfers summed", func() string { return e.paySplit(due/2, e.merchant, due/2) }, VerdictComplete, "", "10000000"},
		{"two transfers, one elsewhere", func() string { return e.paySplit(due/2, e.other, due/2) }, VerdictFailed, ReasonInvalidTransfer, "5000000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hash := tc.pay()
			e.commit(1)
			if res := e.verify(hash, due); res.Verdict != VerdictPending || !res.Seen {
				t.Fatalf("with 1 of 2 confirmations: %+v", res)
			}
			e.commit(1)
			res := e.verify(hash, due)
			if res.Verdict != tc.verdict || res.Reason != tc.reason || res.ReceivedUnits != tc.received {
				t.Fatalf("got %s/%q received %s (%s), want %s/%q received %s",
					res.Verdict, res.Reason, res.ReceivedUnits, res.Message, tc.verdict, tc.reason, tc.received)
			}
		})
	}
}

func TestEVMChainIDMismatch(t *testing.T) {
	e := newEVMEnv(t, 1)
	wrong := e.net
	wrong.ChainID = 84532 // real base_sepolia; the endpoint serves 1337
	_, err := NewEVMVerifier(e.ctx, wrong, e.client)
	if !errors.Is(err, ErrChainIDMismatch) || !IsPermanent(err) {
		t.Fatalf("NewEVMVerifier on wrong chain: %v", err)
	}

	reg := NewRegistry(wrong)
	mv := NewMultiVerifier(reg, WithEVMDialer(func(context.Context, Network) (EVMClient, error) {
		return noClose{e.client}, nil
	}))
	hash := e.payDirect(e.merchant, 1)
	e.commit(1)
	_, err = mv.Verify(e.ctx, VerifyRequest{Network: wrong.Name, TxHash: hash, MerchantAddress: e.merchant.Hex(), ExpectedUnits: "1"})
	if !errors.Is(err, ErrChainIDMismatch) {
		t.Fatalf("MultiVerifier on wrong chain: %v", err)
	}
	if !strings.Contains(err.Error(), "expects chain id 84532") {
		t.Fatalf("error does not say which chain: %v", err)
	}
	// Fixing the registry entry makes the next request redial and succeed.
	reg.Set(e.net)
	res, err := mv.Verify(e.ctx, VerifyRequest{Network: e.net.Name, TxHash: hash, MerchantAddress: e.merchant.Hex(), ExpectedUnits: "1"})
	if err != nil || res.Verdict != VerdictComplete {
		t.Fatalf("after fixing chain id: %+v %v", res, err)
	}
}

// noClose hides the simulated client's Close (and its raw RPC handle, so the
// header-hash fallback of canonicalHash is exercised too).
type noClose struct{ simulated.Client }

func TestEVMReorgSendsVerdictBackToPending(t *testing.T) {
	e := newEVMEnv(t, 2)
	hash := e.payDirect(e.merchant, 5_000_000)
	before, err := e.client.HeaderByNumber(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.commit(3)
	res := e.verify(hash, 5_000_000)
	if res.Verdict != VerdictComplete {
		t.Fatalf("before reorg: %+v", res)
	}
	// A stale node keeps serving the old receipt after the reorg.
	oldReceipt, err := e.client.TransactionReceipt(e.ctx, common.HexToHash(hash))
	if err != nil {
		t.Fatal(err)
	}

	// Reorg: make the block before the payment the head, drop the payment from
	// the pool, and build a longer side chain without it.
	if err := e.sim.Fork(before.Hash()); err != nil {
		t.Fatal(err)
	}
	e.sim.Rollback()
	e.commit(5)

	res = e.verify(hash, 5_000_000)
	if res.Verdict != VerdictPending || res.Seen {
		t.Fatalf("after reorg dropped the block: %+v", res)
	}

	for _, c := range []EVMClient{e.client, noClose{e.client}} {
		stale, err := NewEVMVerifier(e.ctx, e.net, staleReceipts{c, oldReceipt})
		if err != nil {
			t.Fatal(err)
		}
		res, err = stale.Verify(e.ctx, VerifyRequest{Network: e.net.Name, TxHash: hash, MerchantAddress: e.merchant.Hex(), ExpectedUnits: "5000000"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verdict != VerdictPending || !strings.Contains(res.Message, "reorg") {
			t.Fatalf("stale receipt of an orphaned block: %+v", res)
		}
	}
}

// staleReceipts answers TransactionReceipt with a fixed receipt, as a lagging
// node behind a load balancer might after a reorg.
type staleReceipts struct {
	EVMClient
	r *types.Receipt
}

func (s staleReceipts) TransactionReceipt(context.Context, common.Hash) (*types.Receipt, error) {
	return s.r, nil
}

func TestEVMReorgReincludedTransaction(t *testing.T) {
	e := newEVMEnv(t, 2)
	before, _ := e.client.HeaderByNumber(e.ctx, nil)
	hash := e.payDirect(e.merchant, 5_000_000)
	e.commit(1)
	first := e.verify(hash, 5_000_000)
	if err := e.sim.Fork(before.Hash()); err != nil {
		t.Fatal(err)
	}
	// Re-broadcast the same signed transaction on the new branch.
	tx, _, err := e.client.TransactionByHash(e.ctx, common.HexToHash(hash))
	if err == nil && tx != nil {
		_ = e.client.SendTransaction(e.ctx, tx)
	}
	e.commit(1) // empty-or-not block at the old height
	e.commit(2)
	res := e.verify(hash, 5_000_000)
	if !res.Seen || res.BlockHash == first.BlockHash || res.Verdict != VerdictComplete || res.Confirmations < 2 {
		t.Fatalf("re-included transaction: %+v (first seen in %s)", res, first.BlockHash)
	}
	t.Logf("first seen in block %d %s; after the reorg re-included in block %d %s with %d confirmations: %s",
		first.BlockNumber, first.BlockHash, res.BlockNumber, res.BlockHash, res.Confirmations, res.Verdict)
}

func TestEVMVerifyErrors(t *testing.T) {
	e := newEVMEnv(t, 1)
	good := VerifyRequest{Network: e.net.Name, TxHash: "0x" + strings.Repeat("ab", 32), MerchantAddress: e.merchant.Hex(), ExpectedUnits: "1"}
	cases := []struct {
		name   string
		mutate func(*VerifyRequest)
		want   error
	}{
		{"bad hash", func(r *VerifyRequest) { r.TxHash = "0x12" }, ErrInvalidRequest},
		{"bad merchant", func(r *VerifyRequest) { r.MerchantAddress = "merchant" }, ErrInvalidRequest},
		{"zero amount", func(r *VerifyRequest) { r.ExpectedUnits = "0" }, ErrInvalidRequest},
		{"negative amount", func(r *VerifyRequest) { r.ExpectedUnits = "-5" }, ErrInvalidRequest},
		{"decimal amount", func(r *VerifyRequest) { r.ExpectedUnits = "1.5" }, ErrInvalidRequest},
		{"other network", func(r *VerifyRequest) { r.Network = "ethereum" }, ErrUnknownNetwork},
	}
	for _, tc := range cases {
		req := good
		tc.mutate(&req)
		if _, err := e.verifier.Verify(e.ctx, req); !errors.Is(err, tc.want) || !IsPermanent(err) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
	}
	// An RPC fault is an error, never a verdict, and not permanent.
	broken, err := NewEVMVerifier(e.ctx, e.net, failingReceipts{e.client})
	if err != nil {
		t.Fatal(err)
	}
	res, err := broken.Verify(e.ctx, good)
	if err == nil || IsPermanent(err) || res.Verdict != "" {
		t.Fatalf("rpc fault: %+v %v", res, err)
	}
	if res, err := e.verifier.Verify(e.ctx, good); err != nil || res.Verdict != VerdictPending || res.Seen {
		t.Fatalf("unknown hash: %+v %v", res, err)
	}
}

type failingReceipts struct{ EVMClient }

func (failingReceipts) TransactionReceipt(context.Context, common.Hash) (*types.Receipt, error) {
	return nil, errors.New("dial tcp 10.0.0.1:8545: connection refused")
}

func TestEVMSelfTransferIsNoPayment(t *testing.T) {
	e := newEVMEnv(t, 1)
	// The "merchant" pays itself: a Transfer log to the merchant exists, but
	// nothing arrived from anyone else.
	hash := e.payDirect(e.customer.From(), 1_000_000)
	e.commit(1)
	res := e.verifyTo(hash, e.customer.From(), 1_000_000)
	if res.Verdict != VerdictFailed || res.Reason != ReasonInvalidTransfer || res.ReceivedUnits != "0" {
		t.Fatalf("self transfer: %+v", res)
	}
}

// undecodable is a node whose transactions the client cannot decode (an OP
// Stack deposit, type 0x7e, which go-ethereum's types do not know: anyone
// can make one revert on Base).
type undecodable struct{ simulated.Client }

func (undecodable) TransactionByHash(context.Context, common.Hash) (*types.Transaction, bool, error) {
	return nil, false, types.ErrTxTypeNotSupported
}

// TestRevertedUndecodableIsSearchedPast: a reverted transaction whose
// sender cannot be read is taken as not the declared wallet's (the
// session's reference is searched for two minutes, then it fails), never as
// an error: before, every check erred and the session waited forever.
func TestRevertedUndecodableIsSearchedPast(t *testing.T) {
	e := newEVMEnv(t, 1)
	v, err := NewEVMVerifier(e.ctx, e.net, undecodable{e.sim.Client()})
	if err != nil {
		t.Fatal(err)
	}
	const due = 10_000_000
	start := time.Now()
	var at time.Duration
	v.Now = func() time.Time { return start.Add(at) }
	hash := e.payReverting(due)
	e.commit(1)
	req := VerifyRequest{Network: e.net.Name, TxHash: hash, MerchantAddress: e.merchant.Hex(), ExpectedUnits: big.NewInt(due).String(),
		PayerAddress: e.customer.From().Hex(), Reference: common.BytesToHash([]byte("the session's reference")).Hex()}
	for at = 0; at < 2*time.Minute; at += 30 * time.Second {
		if res, err := v.Verify(e.ctx, req); err != nil || res.Verdict != VerdictPending {
			t.Fatalf("at %s: %+v %v", at, res, err)
		}
	}
	// Not the declared wallet's (it cannot be read): the session gives the
	// hash back rather than failing.
	if res, err := v.Verify(e.ctx, req); err != nil || res.Verdict != VerdictFailed || res.Reason != ReasonTxReverted || !res.Foreign {
		t.Fatalf("after two minutes: %+v %v", res, err)
	}
}
