package checkout_test

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/params"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/contracts"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// bindEnv is a real EVM (the simulated backend) with the project's EIP-3009
// test USDC, a router and a contract wallet, and a real store: each row of
// the binding table plays customers and strangers against checkout
// sessions, judged the way the checkout workflow judges them (claim, chain
// verdict bound to the session, store outcome).
type bindEnv struct {
	t        *testing.T
	ctx      context.Context
	sim      *simulated.Backend
	verifier *chain.MultiVerifier
	reg      *chain.Registry
	st       *models.Store
	usdc     common.Address
	router   common.Address
	wallet   common.Address // SmartWallet owned by owner
	domain   devchain.TokenDomain

	deployer, customer, stranger, exchange, owner, relayer *ecdsa.PrivateKey

	merchantA, merchantB common.Address
	mA, mB               *models.Merchant
	linkA, linkB         *models.PaymentLink
	n                    int
}

const bindDue = 10_000_000 // 10 USDC

func newBindEnv(t *testing.T) *bindEnv {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	key := func() *ecdsa.PrivateKey {
		k, err := crypto.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	e := &bindEnv{t: t, ctx: ctx, deployer: key(), customer: key(), stranger: key(), exchange: key(), owner: key(), relayer: key()}
	eth := new(big.Int).Mul(big.NewInt(100), big.NewInt(params.Ether))
	alloc := types.GenesisAlloc{}
	for _, k := range []*ecdsa.PrivateKey{e.deployer, e.customer, e.stranger, e.exchange, e.owner, e.relayer} {
		alloc[crypto.PubkeyToAddress(k.PublicKey)] = types.Account{Balance: eth}
	}
	e.sim = simulated.NewBackend(alloc)
	t.Cleanup(func() { _ = e.sim.Close() })
	dep := e.transactor(e.deployer)
	var err error
	if e.usdc, _, err = dep.Deploy(ctx, contracts.MustLoad(contracts.TestUSDC)); err != nil {
		t.Fatal(err)
	}
	if e.router, _, err = dep.Deploy(ctx, contracts.MustLoad(contracts.Router)); err != nil {
		t.Fatal(err)
	}
	if e.wallet, _, err = dep.Deploy(ctx, contracts.MustLoad(contracts.SmartWallet), crypto.PubkeyToAddress(e.owner.PublicKey)); err != nil {
		t.Fatal(err)
	}
	e.sim.Commit()
	for _, to := range []common.Address{e.addr(e.customer), e.addr(e.stranger), e.addr(e.exchange), e.wallet} {
		e.mine(dep.Transact(ctx, contracts.MustLoad(contracts.TestUSDC), e.usdc, "mint", to, big.NewInt(1_000_000_000)))
	}
	e.mine(e.transactor(e.customer).Transact(ctx, contracts.MustLoad(contracts.TestUSDC), e.usdc, "approve", e.router, big.NewInt(1_000_000_000)))
	e.domain, err = devchain.ReadTokenDomain(ctx, e.sim.Client(), e.usdc)
	if err != nil {
		t.Fatal(err)
	}
	e.reg = chain.NewRegistry(chain.Network{Name: chain.NetworkBaseSepolia, Family: chain.FamilyEVM, Mode: chain.ModeTest, ChainID: 1337,
		RPCURL: "simulated://", USDC: e.usdc.Hex(), Decimals: 6, Confirmations: 1, PollInterval: time.Second,
		TokenName: e.domain.Name, TokenVersion: e.domain.Version})
	e.verifier = chain.NewMultiVerifier(e.reg, chain.WithEVMDialer(func(context.Context, chain.Network) (chain.EVMClient, error) {
		return e.sim.Client(), nil
	}))
	e.st = storetest.Open(t, "sqlite")
	e.merchantA, e.merchantB = e.addr(key()), e.addr(key())
	e.mA, e.linkA = e.merchant("a@shop.example", e.merchantA)
	e.mB, e.linkB = e.merchant("b@shop.example", e.merchantB)
	return e
}

func (e *bindEnv) addr(k *ecdsa.PrivateKey) common.Address {
	return crypto.PubkeyToAddress(k.PublicKey)
}

func (e *bindEnv) transactor(k *ecdsa.PrivateKey) *contracts.Transactor {
	tr, err := contracts.NewTransactor(e.ctx, e.sim.Client(), k)
	if err != nil {
		e.t.Fatal(err)
	}
	return tr
}

func (e *bindEnv) mine(tx *types.Transaction, err error) string {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
	e.sim.Commit()
	return tx.Hash().Hex()
}

func (e *bindEnv) merchant(email string, wallet common.Address) (*models.Merchant, *models.PaymentLink) {
	m := &models.Merchant{Email: email, PasswordHash: "x", BusinessName: email}
	if _, err := e.st.CreateMerchant(e.ctx, m, &models.DashboardSession{TokenHash: "s-" + email},
		models.NewKey{Hash: "k-" + email, Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
		e.t.Fatal(err)
	}
	l := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(1000), Currency: "USD",
		Network: chain.NetworkBaseSepolia, Networks: models.StringList{chain.NetworkBaseSepolia}, Token: "USDC",
		WalletAddresses: models.StringMap{chain.NetworkBaseSepolia: wallet.Hex()}, MerchantWalletAddress: wallet.Hex()}
	if err := e.st.CreatePaymentLink(e.ctx, l); err != nil {
		e.t.Fatal(err)
	}
	return m, l
}

// session opens a session of a link declaring a payer wallet.
func (e *bindEnv) session(l *models.PaymentLink, declared common.Address) *models.CheckoutSession {
	return e.sessionDue(l, declared, bindDue)
}

// sessionDue opens a session due units (a cheaper order of the same shop).
func (e *bindEnv) sessionDue(l *models.PaymentLink, declared common.Address, units int64) *models.CheckoutSession {
	e.n++
	ref, err := checkout.NewPaymentReference(chain.FamilyEVM)
	if err != nil {
		e.t.Fatal(err)
	}
	cs := &models.CheckoutSession{MerchantID: l.MerchantID, Mode: models.ModeTest, PaymentLinkID: l.ID, Network: chain.NetworkBaseSepolia,
		WalletType: "evm", WalletAddress: declared.Hex(), ExpectedAmount: money.Amount(units), MerchantWalletAddress: l.MerchantWalletAddress,
		TokenAddress: e.usdc.Hex(), PaymentReference: &ref, CustomerEmail: fmt.Sprintf("c%d@x.io", e.n), ExpiresAt: time.Now().Add(30 * time.Minute)}
	if err := e.st.CreateCheckoutSession(e.ctx, cs); err != nil {
		e.t.Fatal(err)
	}
	return cs
}

// authorize signs the session's authorization with key (for from).
func (e *bindEnv) authorize(cs *models.CheckoutSession, key *ecdsa.PrivateKey, from common.Address, d devchain.TokenDomain) (devchain.Authorization, []byte) {
	a := devchain.Authorization{From: from, To: common.HexToAddress(cs.MerchantWalletAddress), Value: big.NewInt(bindDue),
		ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(time.Now().Add(time.Hour).Unix()), Nonce: common.HexToHash(*cs.PaymentReference)}
	sig, err := devchain.SignAuthorization(key, d, a)
	if err != nil {
		e.t.Fatal(err)
	}
	return a, sig
}

// payBound has the customer sign the session's authorization and the
// relayer broadcast it.
func (e *bindEnv) payBound(cs *models.CheckoutSession) string {
	a, sig := e.authorize(cs, e.customer, e.addr(e.customer), e.domain)
	return e.mine(devchain.BroadcastAuthorization(e.ctx, e.sim.Client(), e.relayer, e.usdc, a, sig))
}

// speedUp has the customer sign cs's authorization and send their own
// transferWithAuthorization (into the pool first when pooled, where the
// session judges it pending), submits its hash, then sends the same call
// at a higher tip in its place; it judges the session once the
// replacement is mined and says which hash backs it.
func (e *bindEnv) speedUp(cs *models.CheckoutSession, pooled bool) string {
	a, sig := e.authorize(cs, e.customer, e.addr(e.customer), e.domain)
	slow, fast := e.ownAuthorizationTx(a, sig, 1), e.ownAuthorizationTx(a, sig, 3)
	cl := e.sim.Client()
	if pooled {
		if err := cl.SendTransaction(e.ctx, slow); err != nil {
			return "error: " + err.Error()
		}
	}
	e.submit(cs, slow.Hash().Hex())
	if got := e.judge(cs); got != "pending" {
		return "before the replacement: " + got
	}
	if err := cl.SendTransaction(e.ctx, fast); err != nil {
		return "error: " + err.Error()
	}
	e.sim.Commit()
	got := e.judge(cs)
	if stored, err := e.st.CheckoutSession(e.ctx, cs.ID); err != nil || stored.TxHash == nil || !strings.EqualFold(*stored.TxHash, fast.Hash().Hex()) {
		return got + ", not backed by the replacement"
	}
	return got + ", backed by the replacement"
}

// ownAuthorizationTx is the payer's own transferWithAuthorization call of
// a (the customer's), tipMul gwei of tip (customerTokenCall).
func (e *bindEnv) ownAuthorizationTx(a devchain.Authorization, sig []byte, tipMul int64) *types.Transaction {
	e.t.Helper()
	data, err := devchain.AuthorizationCalldata(a, sig)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.customerTokenCall(data, tipMul)
}

// plainTx is the customer's plain transfer of the amount due to a
// merchant, tipMul gwei of tip (customerTokenCall).
func (e *bindEnv) plainTx(to common.Address, tipMul int64) *types.Transaction {
	e.t.Helper()
	data, err := contracts.MustLoad(contracts.TestUSDC).ABI.Pack("transfer", to, big.NewInt(bindDue))
	if err != nil {
		e.t.Fatal(err)
	}
	return e.customerTokenCall(data, tipMul)
}

// customerTokenCall signs a call of the token by the customer with their
// next account nonce and tipMul gwei of tip: the same call at a higher tip
// replaces it in the pool (a wallet's speed-up).
func (e *bindEnv) customerTokenCall(data []byte, tipMul int64) *types.Transaction {
	e.t.Helper()
	cl := e.sim.Client()
	nonce, err := cl.NonceAt(e.ctx, e.addr(e.customer), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	head, err := cl.HeaderByNumber(e.ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	tip := big.NewInt(tipMul * 1_000_000_000)
	tx, err := types.SignNewTx(e.customer, types.LatestSignerForChainID(big.NewInt(1337)), &types.DynamicFeeTx{ChainID: big.NewInt(1337),
		Nonce: nonce, GasTipCap: tip, GasFeeCap: new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2*tipMul)), tip), Gas: 300000,
		To: &e.usdc, Data: data})
	if err != nil {
		e.t.Fatal(err)
	}
	return tx
}

func (e *bindEnv) payPlain(from *ecdsa.PrivateKey, to common.Address) string {
	return e.payPlainUnits(from, to, bindDue)
}

func (e *bindEnv) payPlainUnits(from *ecdsa.PrivateKey, to common.Address, units int64) string {
	return e.mine(e.transactor(from).Transact(e.ctx, contracts.MustLoad(contracts.TestUSDC), e.usdc, "transfer", to, big.NewInt(units)))
}

// submit attaches a hash as the checkout workflow's submit does: "409"
// when the store refuses it.
func (e *bindEnv) submit(cs *models.CheckoutSession, hash string) bool {
	if err := e.st.ClaimSessionTxHash(e.ctx, cs.ID, cs.Network, strings.ToLower(hash)); err != nil {
		return false
	}
	h := strings.ToLower(hash)
	if err := e.st.RecordSessionTransition(e.ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusBroadcast,
		Source: "client", TxHash: h, At: time.Now()}); err != nil {
		e.t.Fatal(err)
	}
	cs.TxHash = &h
	return true
}

// judge verifies the session's transfer and stores the outcome, as the
// workflow does once the chain gives a final verdict.
func (e *bindEnv) judge(cs *models.CheckoutSession) string {
	res, err := e.verifier.Verify(e.ctx, chain.VerifyRequest{Network: cs.Network, TxHash: *cs.TxHash, MerchantAddress: cs.MerchantWalletAddress,
		ExpectedUnits: fmt.Sprint(cs.ExpectedAmount.Units()), PayerAddress: cs.WalletAddress, Reference: *cs.PaymentReference,
		NotBefore: cs.CreatedAt.Add(-models.BlockClockSlack)})
	if err != nil {
		return "error: " + err.Error()
	}
	if res.Verdict == chain.VerdictPending {
		return "pending"
	}
	if res.Verdict == chain.VerdictFailed && res.Foreign && res.PaidBy == "" && cs.WalletAddress != "" {
		// Not the customer's transaction: the workflow gives the hash
		// back and the session waits for its payment.
		r, err := e.st.ReleaseSessionTxHash(e.ctx, models.Release{SessionID: cs.ID, EntryID: models.NewID(), TxHash: *cs.TxHash,
			Chain: cs.Network, Reason: res.Reason, Message: res.Message, ReceivedUnits: res.ReceivedUnits, Payer: res.Payer,
			Bound: res.Bound, Refs: res.Refs, At: time.Now()})
		if err != nil {
			return "error: " + err.Error()
		}
		if r.Released {
			cs.TxHash = nil
			return "released (" + res.Reason + ")"
		}
	}
	f, err := e.st.FinishSession(e.ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: string(res.Verdict), Source: "chain",
		Reason: res.Reason, Message: res.Message, ReceivedUnits: res.ReceivedUnits, Payer: res.Payer, Bound: res.Bound, Refs: res.Refs,
		PaidBy: res.PaidBy, BlockTime: res.BlockTime, At: time.Now()})
	if err != nil {
		return "error: " + err.Error()
	}
	if f.Reason != "" {
		return f.Status + " " + f.Reason
	}
	if res.Bound {
		return f.Status + " (bound)"
	}
	return f.Status
}

// strangerUnit has the stranger sign an authorization of their own for one
// unit with cs's reference as its nonce (nonces are per authorizer), and
// the relayer mine it; it returns the hash.
func (e *bindEnv) strangerUnit(cs *models.CheckoutSession) string {
	e.t.Helper()
	a, _ := e.authorize(cs, e.stranger, e.addr(e.stranger), e.domain)
	a.Value = big.NewInt(1)
	sig, err := devchain.SignAuthorization(e.stranger, e.domain, a)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.mine(devchain.BroadcastAuthorization(e.ctx, e.sim.Client(), e.relayer, e.usdc, a, sig))
}

// strangerThenCustomer submits a stranger's transaction to cs and judges
// it, then has the customer pay cs bound and judges that.
func (e *bindEnv) strangerThenCustomer(cs *models.CheckoutSession, junk string) string {
	e.submit(cs, junk)
	got := e.judge(cs) + "; " + e.exception(e.mA, junk)
	if !e.submit(cs, e.payBound(cs)) {
		return got + "; customer 409"
	}
	return got + "; customer " + e.judge(cs)
}

// exception names the open exception of a hash at a merchant, if any.
func (e *bindEnv) exception(m *models.Merchant, hash string) string {
	rows, _, err := e.st.PaymentExceptions(e.ctx, models.Scope{MerchantID: m.ID, Mode: models.ModeTest},
		models.ExceptionFilter{TxHash: strings.ToLower(hash)}, models.Page{Limit: 5})
	if err != nil || len(rows) == 0 {
		return "no exception"
	}
	return fmt.Sprintf("exception %s %s", rows[0].Kind, rows[0].Amount)
}

// names reports whether the exception of a hash names every session given.
func (e *bindEnv) names(m *models.Merchant, hash string, sessions ...*models.CheckoutSession) string {
	rows, _, err := e.st.PaymentExceptions(e.ctx, models.Scope{MerchantID: m.ID, Mode: models.ModeTest},
		models.ExceptionFilter{TxHash: strings.ToLower(hash)}, models.Page{Limit: 5})
	if err != nil || len(rows) == 0 {
		return "no exception"
	}
	for _, cs := range sessions {
		found := false
		for _, id := range rows[0].SessionIDs {
			found = found || id == cs.ID
		}
		if !found {
			return "exception without session " + cs.ID
		}
	}
	return fmt.Sprintf("exception %s %s naming both", rows[0].Kind, rows[0].Amount)
}

// TestBindingVerdictTable plays the attacks of issue 10 on a real EVM and a
// real store and prints case / expected / observed. Expected for each: no
// false complete, no genuine payment failed or lost.
func TestBindingVerdictTable(t *testing.T) {
	e := newBindEnv(t)
	cust := e.addr(e.customer)
	type row struct {
		name, expected string
		observe        func() string
	}
	rows := []row{
		{"bound payment (EIP-3009 nonce = session reference), relayed", "complete (bound)", func() string {
			cs := e.session(e.linkA, cust)
			e.submit(cs, e.payBound(cs))
			return e.judge(cs)
		}},
		{"the declared wallet pays by EIP-3009 with a nonce of its own (a gasless wallet, an agent), and submits it", "complete", func() string {
			cs := e.session(e.linkA, cust)
			a, _ := e.authorize(cs, e.customer, cust, e.domain)
			a.Nonce = crypto.Keccak256Hash([]byte("the wallet's own nonce " + cs.ID))
			sig, err := devchain.SignAuthorization(e.customer, e.domain, a)
			if err != nil {
				return err.Error()
			}
			e.submit(cs, e.mine(devchain.BroadcastAuthorization(e.ctx, e.sim.Client(), e.relayer, e.usdc, a, sig)))
			return e.judge(cs)
		}},
		{"burn: stranger submits a proven payment to his session first", "stranger released (INVALID_TRANSFER); customer complete (bound)", func() string {
			victim, thief := e.session(e.linkA, cust), e.session(e.linkA, e.addr(e.stranger))
			h := e.payBound(victim)
			e.submit(thief, h)
			got := "stranger " + e.judge(thief)
			if !e.submit(victim, h) {
				return got + "; customer 409"
			}
			return got + "; customer " + e.judge(victim)
		}},
		{"burn: stranger submits a proven payment to a dearer session of the same shop", "stranger released (INVALID_TRANSFER), no exception; customer complete (bound)", func() string {
			// Short of the dearer session's amount: the failure must not
			// keep the customer's payment as that session's underpayment.
			victim, thief := e.session(e.linkA, cust), e.sessionDue(e.linkA, e.addr(e.stranger), 2*bindDue)
			h := e.payBound(victim)
			e.submit(thief, h)
			got := "stranger " + e.judge(thief) + ", " + e.exception(e.mA, h)
			if !e.submit(victim, h) {
				return got + "; customer 409"
			}
			return got + "; customer " + e.judge(victim)
		}},
		{"burn: stranger submits an unproven payment at another merchant", "stranger pending; customer complete", func() string {
			// The stranger's session waits (it looks for its own payment
			// for two minutes before failing: TestPaidNothingFollowsTheReference).
			victim, thief := e.session(e.linkA, cust), e.session(e.linkB, cust)
			h := e.payPlain(e.customer, e.merchantA)
			e.submit(thief, h)
			got := "stranger " + e.judge(thief)
			if !e.submit(victim, h) {
				return got + "; customer 409"
			}
			return got + "; customer " + e.judge(victim)
		}},
		{"burn: another merchant records the customer's hash", "record 201; customer complete; record verification failed", func() string {
			victim := e.session(e.linkA, cust)
			h := e.payPlain(e.customer, e.merchantA)
			rec := &models.Transaction{MerchantID: e.mB.ID, Mode: models.ModeTest, Amount: money.Amount(bindDue),
				Token: "USDC", Network: chain.NetworkBaseSepolia, TxHash: strings.ToLower(h), MerchantWalletAddress: e.merchantB.Hex()}
			err := e.st.RecordTransaction(e.ctx, rec)
			got := "record 201"
			if err != nil {
				got = "record " + err.Error()
			}
			if !e.submit(victim, h) {
				return got + "; customer 409"
			}
			got += "; customer " + e.judge(victim)
			// The worker checks records on chain: B's wallet received nothing.
			svc := &checkout.Service{Store: e.st, Networks: e.reg, Verifier: e.verifier, NotFoundWindow: time.Hour}
			svc.VerifyRecordsOnce(e.ctx)
			t, err := e.st.Transaction(e.ctx, models.Scope{MerchantID: e.mB.ID, Mode: models.ModeTest}, rec.ID)
			if err != nil {
				return got + "; " + err.Error()
			}
			return got + "; record verification " + t.Verification
		}},
		{"front-run with the victim's declared wallet, victim proven", "thief failed INVALID_TRANSFER; customer complete (bound)", func() string {
			victim, thief := e.session(e.linkA, cust), e.session(e.linkA, cust)
			h := e.payBound(victim)
			e.submit(thief, h)
			got := "thief " + e.judge(thief)
			e.submit(victim, h)
			return got + "; customer " + e.judge(victim)
		}},
		{"front-run with the victim's declared wallet, no proof", "both failed TX_CONTESTED; exception contested 10.00", func() string {
			victim, thief := e.session(e.linkA, cust), e.session(e.linkA, cust)
			h := e.payPlain(e.customer, e.merchantA)
			e.submit(thief, h)
			e.submit(victim, h)
			a, b := e.judge(thief), e.judge(victim)
			if a == b {
				return "both " + a + "; " + e.exception(e.mA, h)
			}
			return "thief " + a + "; customer " + b
		}},
		{"steal an unproven payment: a stranger who saw it opens a session declaring the payer's wallet and submits it first (the customer relies on the watcher)",
			"stranger failed TX_CONTESTED; exception contested 10.00 naming both; customer failed TX_CONTESTED", func() string {
				victim := e.session(e.linkA, cust)
				h := e.payPlain(e.customer, e.merchantA)
				thief := e.session(e.linkA, cust)
				e.submit(thief, h)
				got := "stranger " + e.judge(thief) + "; " + e.names(e.mA, h, victim, thief)
				if !e.submit(victim, h) {
					return got + "; customer 409"
				}
				return got + "; customer " + e.judge(victim)
			}},
		{"steal a short unproven payment with a cheaper session declaring the payer's wallet", "stranger failed TX_CONTESTED; exception contested 9.00 naming both", func() string {
			victim := e.session(e.linkA, cust)
			h := e.payPlainUnits(e.customer, e.merchantA, 9_000_000)
			thief := e.sessionDue(e.linkA, cust, 1_000_000)
			e.submit(thief, h)
			got := "stranger " + e.judge(thief) + "; " + e.names(e.mA, h, victim, thief)
			e.submit(victim, h) // leaves no session open without a hash
			return got
		}},
		{"no race: a stranger opens a session declaring the payer's wallet ahead, and submits the payment once mined", "stranger failed TX_CONTESTED; customer failed TX_CONTESTED; exception contested 10.00 naming both", func() string {
			thief, victim := e.session(e.linkA, cust), e.session(e.linkA, cust)
			h := e.payPlain(e.customer, e.merchantA)
			e.submit(thief, h)
			got := "stranger " + e.judge(thief)
			if !e.submit(victim, h) {
				return got + "; customer 409"
			}
			return got + "; customer " + e.judge(victim) + "; " + e.names(e.mA, h, victim, thief)
		}},
		{"a session of the payer's wallet that expired before the payment does not contest it", "complete", func() string {
			old := e.session(e.linkA, cust)
			storetest.Exec(e.t, e.st, "UPDATE checkout_sessions SET expires_at = ? WHERE id = ?", time.Now().Add(-time.Minute).UTC(), old.ID)
			if _, err := e.st.FinishSession(e.ctx, models.Outcome{SessionID: old.ID, EntryID: models.NewID(), Status: models.StatusExpired,
				Source: "server", At: time.Now()}); err != nil {
				return "error: " + err.Error()
			}
			cs := e.session(e.linkA, cust)
			h := e.payPlain(e.customer, e.merchantA)
			e.submit(cs, h)
			return e.judge(cs)
		}},
		{"a stranger who knows the session's id submits a mined transaction that pays the merchant nothing; the customer's bound payment is mined next",
			"pending; complete (bound), backed by the customer's payment", func() string {
				cs := e.session(e.linkA, cust)
				junk := e.payPlain(e.stranger, e.addr(e.stranger)) // any transaction: USDC to itself
				e.submit(cs, junk)
				got := e.judge(cs)
				h := e.payBound(cs)
				got += "; " + e.judge(cs)
				if stored, err := e.st.CheckoutSession(e.ctx, cs.ID); err != nil || stored.TxHash == nil || !strings.EqualFold(*stored.TxHash, h) {
					return got + ", not backed by the customer's payment"
				}
				return got + ", backed by the customer's payment"
			}},
		{"a stranger who knows the session's id pays the merchant one unit from their own wallet and submits it; the customer pays next",
			"released (INVALID_TRANSFER); exception wrong_payer 0.000001; customer complete (bound)", func() string {
				cs := e.session(e.linkA, cust)
				junk := e.payPlainUnits(e.stranger, e.merchantA, 1)
				return e.strangerThenCustomer(cs, junk)
			}},
		{"a stranger who knows the session's id signs an authorization of one unit with the session's reference as its nonce and submits it; the customer pays next",
			"released (INVALID_TRANSFER); exception wrong_payer 0.000001; customer complete (bound)", func() string {
				cs := e.session(e.linkA, cust)
				return e.strangerThenCustomer(cs, e.strangerUnit(cs))
			}},
		{"a stranger submits an old short transfer of the declared wallet (its address is public), mined before the session",
			"released (INVALID_TRANSFER); exception underpaid 1.00 naming both", func() string {
				old := e.payPlainUnits(e.customer, e.merchantA, 1_000_000)
				cs := e.session(e.linkA, cust)
				// The session opened an hour after that block (the
				// simulated chain's clock stands still).
				cs.CreatedAt = time.Now().Add(time.Hour)
				e.submit(cs, old)
				return e.judge(cs) + "; " + e.names(e.mA, old, cs)
			}},
		{"the customer's own short payment fails the session as before", "failed INVALID_TRANSFER; exception underpaid 9.00", func() string {
			cs := e.session(e.linkA, cust)
			h := e.payPlainUnits(e.customer, e.merchantA, 9_000_000)
			e.submit(cs, h)
			return e.judge(cs) + "; " + e.exception(e.mA, h)
		}},
		{"authorization replayed (second broadcast)", "refused by the token: nonce used", func() string {
			cs := e.session(e.linkA, cust)
			a, sig := e.authorize(cs, e.customer, cust, e.domain)
			e.mine(devchain.BroadcastAuthorization(e.ctx, e.sim.Client(), e.relayer, e.usdc, a, sig))
			return refused(devchain.SimulateAuthorization(e.ctx, e.sim.Client(), e.usdc, a, sig))
		}},
		{"authorization signed for another chain id", "refused by the token: bad signature", func() string {
			cs := e.session(e.linkA, cust)
			d := e.domain
			d.ChainID = 84532
			a, sig := e.authorize(cs, e.customer, cust, d)
			return refused(devchain.SimulateAuthorization(e.ctx, e.sim.Client(), e.usdc, a, sig))
		}},
		{"authorization signed for another token", "refused by the token: bad signature", func() string {
			cs := e.session(e.linkA, cust)
			d := e.domain
			d.VerifyingContract = e.router
			a, sig := e.authorize(cs, e.customer, cust, d)
			return refused(devchain.SimulateAuthorization(e.ctx, e.sim.Client(), e.usdc, a, sig))
		}},
		{"EIP-1271 contract wallet signs the authorization", "complete (bound)", func() string {
			cs := e.session(e.linkA, e.wallet)
			a, sig := e.authorize(cs, e.owner, e.wallet, e.domain)
			e.submit(cs, e.mine(devchain.BroadcastAuthorization(e.ctx, e.sim.Client(), e.relayer, e.usdc, a, sig)))
			return e.judge(cs)
		}},
		{"router-delivered payment sent by the declared wallet, session without proof", "failed INVALID_TRANSFER; exception wrong_payer 10.00", func() string {
			cs := e.session(e.linkA, cust)
			h := e.mine(e.transactor(e.customer).Transact(e.ctx, contracts.MustLoad(contracts.Router), e.router, "route", e.usdc, e.merchantA, big.NewInt(bindDue)))
			e.submit(cs, h)
			return e.judge(cs) + "; " + e.exception(e.mA, h)
		}},
		{"exchange-style payment from an unknown wallet", "released (INVALID_TRANSFER); exception wrong_payer 10.00", func() string {
			cs := e.session(e.linkA, cust)
			h := e.payPlain(e.exchange, e.merchantA)
			e.submit(cs, h)
			return e.judge(cs) + "; " + e.exception(e.mA, h)
		}},
		{"a stranger claims money held as a wrong_payer exception, declaring its sender", "customer released (INVALID_TRANSFER); stranger failed TX_CONTESTED; exception contested 10.00", func() string {
			victim := e.session(e.linkA, cust)
			h := e.payPlain(e.exchange, e.merchantA) // the customer withdraws from an exchange
			e.submit(victim, h)
			got := "customer " + e.judge(victim)
			thief := e.session(e.linkA, e.addr(e.exchange))
			if !e.submit(thief, h) {
				return got + "; stranger's submit refused"
			}
			return got + "; stranger " + e.judge(thief) + "; " + e.exception(e.mA, h)
		}},
		{"underpaid bound payment", "failed INVALID_TRANSFER; exception underpaid 9.00", func() string {
			cs := e.session(e.linkA, cust)
			a, sig := e.authorize(cs, e.customer, cust, e.domain)
			a.Value = big.NewInt(bindDue - 1_000_000)
			sig, _ = devchain.SignAuthorization(e.customer, e.domain, a)
			h := e.mine(devchain.BroadcastAuthorization(e.ctx, e.sim.Client(), e.relayer, e.usdc, a, sig))
			e.submit(cs, h)
			return e.judge(cs) + "; " + e.exception(e.mA, h)
		}},
		{"paid but never submitted: found by its reference", "found the session's transaction", func() string {
			cs := e.session(e.linkA, cust)
			h := e.payBound(cs)
			found, _, err := e.verifier.FindByReference(e.ctx, cs.Network, []string{*cs.PaymentReference}, 0)
			if err != nil {
				return "error: " + err.Error()
			}
			for _, f := range found {
				if strings.EqualFold(f.TxHash, h) && f.Reference == *cs.PaymentReference {
					return "found the session's transaction"
				}
			}
			return fmt.Sprintf("not found (%d results)", len(found))
		}},
		{"front-run: a copy of the payer's authorization is relayed first; the payer's own transaction reverts",
			"complete (bound), backed by the copy; no exception", func() string {
				e := newBindEnv(t) // a chain and store of their own: the watcher sees only this
				cust := e.addr(e.customer)
				// The page has the connected wallet sign: here not the one
				// the session declares.
				cs := e.session(e.linkA, e.addr(e.exchange))
				a, sig := e.authorize(cs, e.customer, cust, e.domain)
				// The payer's wallet signs and sends its transaction with a
				// fixed gas limit; the page submits its hash at once.
				data, err := devchain.AuthorizationCalldata(a, sig)
				if err != nil {
					return "error: " + err.Error()
				}
				cl := e.sim.Client()
				nonce, err := cl.PendingNonceAt(e.ctx, cust)
				if err != nil {
					return "error: " + err.Error()
				}
				head, err := cl.HeaderByNumber(e.ctx, nil)
				if err != nil {
					return "error: " + err.Error()
				}
				tip := big.NewInt(2_000_000_000)
				own, err := types.SignNewTx(e.customer, types.LatestSignerForChainID(big.NewInt(1337)), &types.DynamicFeeTx{ChainID: big.NewInt(1337),
					Nonce: nonce, GasTipCap: tip, GasFeeCap: new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(3)), tip), Gas: 300000,
					To: &e.usdc, Data: data})
				if err != nil {
					return "error: " + err.Error()
				}
				e.submit(cs, own.Hash().Hex())
				// A stranger copies the authorization from the mempool and
				// relays it first; the payer's transaction is mined after.
				copyHash := e.mine(devchain.BroadcastAuthorization(e.ctx, cl, e.stranger, e.usdc, a, sig))
				if err := cl.SendTransaction(e.ctx, own); err != nil {
					return "error: " + err.Error()
				}
				e.sim.Commit()
				if r, err := cl.TransactionReceipt(e.ctx, own.Hash()); err != nil || r.Status != types.ReceiptStatusFailed {
					return fmt.Sprintf("the payer's transaction did not revert: %v %v", r, err)
				}
				e.sim.Commit()
				got := e.judge(cs)
				stored, err := e.st.CheckoutSession(e.ctx, cs.ID)
				if err != nil {
					return "error: " + err.Error()
				}
				if stored.TxHash == nil || !strings.EqualFold(*stored.TxHash, copyHash) {
					got += ", backed by the payer's reverted transaction"
				} else {
					got += ", backed by the copy"
				}
				svc := &checkout.Service{Store: e.st, Networks: e.reg, Finder: e.verifier, Verifier: e.verifier, Lifetime: 30 * time.Minute,
					UnmatchedGrace: time.Millisecond}
				svc.WatchOnce(e.ctx, nil)
				time.Sleep(5 * time.Millisecond)
				svc.WatchOnce(e.ctx, nil)
				return got + "; " + e.exception(e.mA, copyHash)
			}},
		{"a stranger's own authorization (one unit) with the session's reference as its nonce, found by the watcher",
			"session open, no hash; exception unmatched 0.000001", func() string {
				e := newBindEnv(t) // a chain and store of their own: the watcher sees only this
				cs := e.session(e.linkA, e.addr(e.customer))
				h := e.strangerUnit(cs)
				// No Temporal client: attaching (a submit) would panic.
				svc := &checkout.Service{Store: e.st, Networks: e.reg, Finder: e.verifier, Verifier: e.verifier, Lifetime: 30 * time.Minute,
					UnmatchedGrace: time.Millisecond}
				svc.WatchOnce(e.ctx, nil)
				time.Sleep(5 * time.Millisecond)
				svc.WatchOnce(e.ctx, nil)
				stored, err := e.st.CheckoutSession(e.ctx, cs.ID)
				if err != nil {
					return "error: " + err.Error()
				}
				got := "session " + stored.Status
				if stored.Status == models.StatusCreated {
					got = "session open"
				}
				if stored.TxHash != nil {
					got += ", hash " + *stored.TxHash
				} else {
					got += ", no hash"
				}
				return got + "; " + e.exception(e.mA, h)
			}},
		{"the payer's wallet speeds its transaction up (same nonce, higher fee): the submitted hash is never mined",
			"complete (bound), backed by the replacement", func() string { return e.speedUp(e.session(e.linkA, cust), true) }},
		{"the payer's wallet speeds up a plain transfer whose hash was submitted (same nonce, higher fee): the submitted hash is never mined",
			"pending; complete, backed by the replacement", func() string {
				// At merchant B: A has older sessions of this wallet open
				// in the table, which would contest a plain payment.
				cs := e.session(e.linkB, cust)
				slow, fast := e.plainTx(e.merchantB, 1), e.plainTx(e.merchantB, 3)
				if err := e.sim.Client().SendTransaction(e.ctx, slow); err != nil {
					return "error: " + err.Error()
				}
				e.submit(cs, slow.Hash().Hex())
				got := e.judge(cs) // seen in the pool: its sender and nonce are kept
				if err := e.sim.Client().SendTransaction(e.ctx, fast); err != nil {
					return "error: " + err.Error()
				}
				e.sim.Commit()
				got += "; " + e.judge(cs)
				if stored, err := e.st.CheckoutSession(e.ctx, cs.ID); err != nil || stored.TxHash == nil || !strings.EqualFold(*stored.TxHash, fast.Hash().Hex()) {
					return got + ", not backed by the replacement"
				}
				return got + ", backed by the replacement"
			}},
		{"an earlier plain transfer of the payer's wallet (another nonce) while the session's submitted one was dropped unmined", "pending; pending", func() string {
			e.payPlain(e.customer, e.merchantB) // mined: another order's payment
			cs := e.session(e.linkB, cust)
			dropped := e.plainTx(e.merchantB, 1)
			if err := e.sim.Client().SendTransaction(e.ctx, dropped); err != nil {
				return "error: " + err.Error()
			}
			e.submit(cs, dropped.Hash().Hex())
			got := e.judge(cs)
			e.sim.Rollback() // the node forgets it
			e.sim.Commit()
			return got + "; " + e.judge(cs)
		}},
		{"a stranger's own authorization (one unit) with the session's nonce, while the session's submitted hash is unknown to the chain",
			"pending", func() string {
				cs := e.session(e.linkA, cust)
				e.submit(cs, "0x"+strings.Repeat("ab", 32))
				e.strangerUnit(cs)
				return e.judge(cs)
			}},
		{"the payer's speed-up signed from another wallet than the session declares (the page's connected wallet)",
			"complete (bound), backed by the replacement", func() string { return e.speedUp(e.session(e.linkA, e.addr(e.exchange)), false) }},
		{"unseen submitted hash; the declared wallet's own short authorization and another wallet's full one, both with the session's nonce",
			"complete (bound), backed by the full payment", func() string {
				cs := e.session(e.linkA, cust)
				e.submit(cs, "0x"+strings.Repeat("cd", 32))
				short, _ := e.authorize(cs, e.customer, cust, e.domain)
				short.Value = big.NewInt(1)
				sig, err := devchain.SignAuthorization(e.customer, e.domain, short)
				if err != nil {
					return "error: " + err.Error()
				}
				e.mine(devchain.BroadcastAuthorization(e.ctx, e.sim.Client(), e.relayer, e.usdc, short, sig))
				full, _ := e.authorize(cs, e.exchange, e.addr(e.exchange), e.domain)
				if sig, err = devchain.SignAuthorization(e.exchange, e.domain, full); err != nil {
					return "error: " + err.Error()
				}
				h := e.mine(devchain.BroadcastAuthorization(e.ctx, e.sim.Client(), e.relayer, e.usdc, full, sig))
				got := e.judge(cs)
				if stored, err := e.st.CheckoutSession(e.ctx, cs.ID); err != nil || stored.TxHash == nil || !strings.EqualFold(*stored.TxHash, h) {
					return got + ", not backed by the full payment"
				}
				return got + ", backed by the full payment"
			}},
		{"thirty strangers' own zero-value authorizations with the session's nonce, then the payer's speed-up",
			"complete (bound), backed by the replacement; 2 receipts read", func() string {
				cs := e.session(e.linkA, cust)
				a, sig := e.authorize(cs, e.customer, cust, e.domain)
				slow, fast := e.ownAuthorizationTx(a, sig, 1), e.ownAuthorizationTx(a, sig, 3)
				e.submit(cs, slow.Hash().Hex()) // never reaches a node
				tr := e.transactor(e.relayer)
				for range 30 {
					k, _ := crypto.GenerateKey()
					z := a
					z.From, z.Value = crypto.PubkeyToAddress(k.PublicKey), big.NewInt(0)
					zsig, err := devchain.SignAuthorization(k, e.domain, z)
					if err != nil {
						return "error: " + err.Error()
					}
					data, err := devchain.AuthorizationCalldata(z, zsig)
					if err != nil {
						return "error: " + err.Error()
					}
					if _, err := tr.Send(e.ctx, &e.usdc, data); err != nil {
						return "error: " + err.Error()
					}
				}
				e.sim.Commit()
				if err := e.sim.Client().SendTransaction(e.ctx, fast); err != nil {
					return "error: " + err.Error()
				}
				e.sim.Commit()
				n, _ := e.reg.Lookup(cs.Network)
				counted := &receiptCounter{Client: e.sim.Client()}
				v, err := chain.NewEVMVerifier(e.ctx, n, counted)
				if err != nil {
					return "error: " + err.Error()
				}
				res, err := v.Verify(e.ctx, chain.VerifyRequest{Network: cs.Network, TxHash: slow.Hash().Hex(), MerchantAddress: cs.MerchantWalletAddress,
					ExpectedUnits: fmt.Sprint(bindDue), PayerAddress: cs.WalletAddress, Reference: *cs.PaymentReference})
				if err != nil {
					return "error: " + err.Error()
				}
				got := e.judge(cs)
				if !strings.EqualFold(res.PaidBy, fast.Hash().Hex()) {
					got += ", not backed by the replacement"
				} else {
					got += ", backed by the replacement"
				}
				return fmt.Sprintf("%s; %d receipts read", got, counted.receipts.Load())
			}},
		{"late payment after the session expired", "exception late 10.00", func() string {
			e := newBindEnv(t) // a chain and store of its own: no other session is open
			cs := e.session(e.linkA, e.addr(e.customer))
			if _, err := e.st.FinishSession(e.ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusExpired,
				Source: "server", At: time.Now()}); err != nil {
				return "error: " + err.Error()
			}
			h := e.payBound(cs)
			svc := &checkout.Service{Store: e.st, Networks: e.reg, Finder: e.verifier, Verifier: e.verifier, Lifetime: 30 * time.Minute}
			svc.WatchOnce(e.ctx, nil)
			return e.exception(e.mA, h)
		}},
		{"payment after the session failed on a stranger's transaction", "exception late 10.00", func() string {
			// A stranger submitted a hash of their own to the session and it
			// failed on it; the customer's payment, bound to the session,
			// came after. It is the session's late payment (before, the
			// scans skipped every session holding a hash, and it became an
			// unmatched transfer ten minutes later).
			e := newBindEnv(t)
			cs := e.session(e.linkA, e.addr(e.customer))
			junk := "0x" + strings.Repeat("5e", 32)
			if err := e.st.ClaimSessionTxHash(e.ctx, cs.ID, cs.Network, junk); err != nil {
				return "error: " + err.Error()
			}
			if err := e.st.RecordSessionTransition(e.ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(),
				Status: models.StatusBroadcast, Source: "client", TxHash: junk, At: time.Now()}); err != nil {
				return "error: " + err.Error()
			}
			if got, err := e.st.CheckoutSession(e.ctx, cs.ID); err != nil || got.TxHash == nil {
				return fmt.Sprintf("error: the stranger's hash is not the session's: %v", err)
			}
			if _, err := e.st.FinishSession(e.ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusFailed,
				Reason: models.ReasonInvalidTransfer, Source: "chain", At: time.Now()}); err != nil {
				return "error: " + err.Error()
			}
			h := e.payBound(cs)
			svc := &checkout.Service{Store: e.st, Networks: e.reg, Finder: e.verifier, Verifier: e.verifier, Lifetime: 30 * time.Minute}
			svc.WatchOnce(e.ctx, nil)
			return e.exception(e.mA, h)
		}},
		{"late payment made while the workers were down for 400 blocks", "exception late 10.00", func() string {
			e := newBindEnv(t)
			cs := e.session(e.linkA, e.addr(e.customer))
			if _, err := e.st.FinishSession(e.ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusExpired,
				Source: "server", At: time.Now()}); err != nil {
				return "error: " + err.Error()
			}
			watcher := func() *checkout.Service {
				return &checkout.Service{Store: e.st, Networks: e.reg, Finder: e.verifier, Verifier: e.verifier, Lifetime: 30 * time.Minute}
			}
			watcher().WatchOnce(e.ctx, nil) // the scans stand at the head; the worker stops
			h := e.payBound(cs)
			for range 400 {
				e.sim.Commit()
			}
			watcher().WatchOnce(e.ctx, nil) // a new worker resumes where they stood
			return e.exception(e.mA, h)
		}},
		{"transfer to the merchant's wallet with no session at all", "exception unmatched 10.00", func() string {
			e := newBindEnv(t)
			h := e.payPlain(e.exchange, e.merchantA)
			svc := &checkout.Service{Store: e.st, Networks: e.reg, Finder: e.verifier, Verifier: e.verifier, Lifetime: 30 * time.Minute,
				UnmatchedGrace: time.Millisecond}
			svc.WatchOnce(e.ctx, nil) // seen
			time.Sleep(5 * time.Millisecond)
			svc.WatchOnce(e.ctx, nil) // still unaccounted for after the grace
			return e.exception(e.mA, h)
		}},
		{"zero-value transfer to the merchant's wallet (address-poisoning spam)", "no exception", func() string {
			e := newBindEnv(t)
			h := e.mine(e.transactor(e.stranger).Transact(e.ctx, contracts.MustLoad(contracts.TestUSDC), e.usdc, "transfer", e.merchantA, big.NewInt(0)))
			svc := &checkout.Service{Store: e.st, Networks: e.reg, Finder: e.verifier, Verifier: e.verifier, Lifetime: 30 * time.Minute,
				UnmatchedGrace: time.Millisecond}
			svc.WatchOnce(e.ctx, nil)
			time.Sleep(5 * time.Millisecond)
			svc.WatchOnce(e.ctx, nil)
			return e.exception(e.mA, h)
		}},
		{"one transfer offered to another network (another chain)", "pending (not seen)", func() string {
			cs := e.session(e.linkA, cust)
			h := e.payBound(cs)
			other := simulated.NewBackend(types.GenesisAlloc{})
			defer other.Close()
			other.Commit()
			n, _ := e.reg.Lookup(chain.NetworkBaseSepolia)
			n.Name, n.ChainID = chain.NetworkEthSepolia, 1337
			v, err := chain.NewEVMVerifier(e.ctx, n, other.Client())
			if err != nil {
				return "error: " + err.Error()
			}
			req := chain.VerifyRequest{Network: n.Name, TxHash: h, MerchantAddress: e.merchantA.Hex(),
				ExpectedUnits: fmt.Sprint(bindDue), Reference: *cs.PaymentReference}
			res, err := v.Verify(e.ctx, req)
			for i := 0; err != nil && strings.Contains(err.Error(), "indexing is in progress") && i < 50; i++ {
				time.Sleep(50 * time.Millisecond) // a new simulated chain indexes its (empty) history first
				res, err = v.Verify(e.ctx, req)
			}
			if err != nil {
				return "error: " + err.Error()
			}
			if res.Verdict == chain.VerdictPending && !res.Seen {
				return "pending (not seen)"
			}
			return string(res.Verdict)
		}},
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\texpected\tobserved\t")
	fmt.Fprintln(tw, "----\t--------\t--------\t")
	failed := 0
	for _, r := range rows {
		got := r.observe()
		mark := ""
		if got != r.expected {
			mark = "  <-- MISMATCH"
			failed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t\n", r.name, r.expected, got, mark)
	}
	_ = tw.Flush()
	t.Log("binding verdict table (amount due 10 USDC; one confirmation)\n" + b.String())
	if failed > 0 {
		t.Fatalf("%d of %d cases differ from the expected outcome", failed, len(rows))
	}
}

func refused(err error) string {
	if err == nil {
		return "accepted"
	}
	msg := strings.ToLower(err.Error())
	switch {
	case strings.Contains(msg, "used") || strings.Contains(msg, "nonce"):
		return "refused by the token: nonce used"
	case strings.Contains(msg, "signature"):
		return "refused by the token: bad signature"
	}
	return "refused by the token: " + err.Error()
}

// TestRelayerRefusesWhatWouldRevert: the relayer simulates an authorization
// against the latest block, so a second one of the same payer sent before
// the first is mined (the same authorization posted twice, or one balance
// signed away to two sessions) would pass and then revert at the
// relayer's cost: it is refused (ErrRelayBusy) until the first is mined;
// after that the same authorization is refused by the token (nonce used)
// and another session's is relayed.
func TestRelayerRefusesWhatWouldRevert(t *testing.T) {
	e := newBindEnv(t)
	r := chain.NewRelayer(e.reg, map[string]*ecdsa.PrivateKey{chain.NetworkBaseSepolia: e.relayer})
	// Without Close: the relayer closes what it dialled.
	r.Dial = func(context.Context, chain.Network) (chain.RelayClient, error) { return relayOnly{e.sim.Client()}, nil }
	cust := e.addr(e.customer)
	signed := func(cs *models.CheckoutSession) chain.Authorization {
		a, sig := e.authorize(cs, e.customer, cust, e.domain)
		return chain.Authorization{From: a.From, To: a.To, Value: a.Value, ValidAfter: a.ValidAfter, ValidBefore: a.ValidBefore,
			Nonce: a.Nonce, Signature: sig}
	}
	first := signed(e.session(e.linkA, cust))
	h, err := r.Relay(e.ctx, chain.NetworkBaseSepolia, first)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Relay(e.ctx, chain.NetworkBaseSepolia, first); !errors.Is(err, chain.ErrRelayBusy) {
		t.Fatalf("the same authorization again before a block: %v", err)
	}
	other := signed(e.session(e.linkA, cust))
	if _, err := r.Relay(e.ctx, chain.NetworkBaseSepolia, other); !errors.Is(err, chain.ErrRelayBusy) {
		t.Fatalf("the payer's next authorization before a block: %v", err)
	}
	e.sim.Commit()
	if rc, err := e.sim.Client().TransactionReceipt(e.ctx, common.HexToHash(h)); err != nil || rc.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("the relayed payment: %+v %v", rc, err)
	}
	if _, err := r.Relay(e.ctx, chain.NetworkBaseSepolia, first); !errors.Is(err, chain.ErrAuthorizationRejected) {
		t.Fatalf("a used authorization: %v", err)
	}
	if _, err := r.Relay(e.ctx, chain.NetworkBaseSepolia, other); err != nil {
		t.Fatalf("another session's authorization once the first is mined: %v", err)
	}
}

// relayOnly is a client with only the relayer's methods.
type relayOnly struct{ chain.RelayClient }

// receiptCounter counts the receipts a verifier reads and its log
// queries.
type receiptCounter struct {
	simulated.Client
	receipts, logs atomic.Int32
}

func (c *receiptCounter) FilterLogs(ctx context.Context, q ethereum.FilterQuery) ([]types.Log, error) {
	c.logs.Add(1)
	return c.Client.FilterLogs(ctx, q)
}

// TestFollowPace: a submitted hash no node knows is checked every 5 s.
// The search for a transaction that replaced it runs at every check for
// two minutes after the first, then once every 30 s (it ran at every
// check for the not-found window's hour: three more calls to the node a
// check, for any stranger's made-up hash); a speed-up that lands after
// the first two minutes is still followed, at the next search.
func TestFollowPace(t *testing.T) {
	e := newBindEnv(t)
	cust := e.addr(e.customer)
	cs := e.session(e.linkA, cust)
	a, sig := e.authorize(cs, e.customer, cust, e.domain)
	slow, fast := e.ownAuthorizationTx(a, sig, 1), e.ownAuthorizationTx(a, sig, 3)
	n, _ := e.reg.Lookup(cs.Network)
	counted := &receiptCounter{Client: e.sim.Client()}
	v, err := chain.NewEVMVerifier(e.ctx, n, counted)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var at time.Duration
	v.Now = func() time.Time { return start.Add(at) }
	check := func() chain.VerifyResult {
		t.Helper()
		res, err := v.Verify(e.ctx, chain.VerifyRequest{Network: cs.Network, TxHash: slow.Hash().Hex(), MerchantAddress: cs.MerchantWalletAddress,
			ExpectedUnits: fmt.Sprint(bindDue), PayerAddress: cust.Hex(), Reference: *cs.PaymentReference})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for at = 0; at <= 5*time.Minute; at += 5 * time.Second {
		if res := check(); res.Seen || res.PaidBy != "" {
			t.Fatalf("at %s, nothing sent: %+v", at, res)
		}
	}
	// 24 searches in the first two minutes (0 to 115 s), then at 145,
	// 175, ..., 295 s: 6.
	if got := counted.logs.Load(); got != 30 {
		t.Fatalf("%d log queries over 61 checks, want 30", got)
	}
	if err := e.sim.Client().SendTransaction(e.ctx, fast); err != nil {
		t.Fatal(err)
	}
	e.sim.Commit()
	at = 305 * time.Second
	if res := check(); res.PaidBy != "" {
		t.Fatalf("followed before the next search was due: %+v", res)
	}
	at = 325 * time.Second
	if res := check(); !strings.EqualFold(res.PaidBy, fast.Hash().Hex()) || res.Verdict == chain.VerdictFailed {
		t.Fatalf("the speed-up at the next search: %+v", res)
	}
}

func (c *receiptCounter) TransactionReceipt(ctx context.Context, h common.Hash) (*types.Receipt, error) {
	c.receipts.Add(1)
	return c.Client.TransactionReceipt(ctx, h)
}

// TestPaidNothingFollowsTheReference: a submitted transaction that was
// mined and paid the merchant nothing (a stranger's, or the customer's
// mistake) is not failed at once: the session's reference is searched at
// every check for two minutes, and the session's own payment, mined in
// that time, is judged instead; with none, the transaction fails then.
func TestPaidNothingFollowsTheReference(t *testing.T) {
	e := newBindEnv(t)
	cust := e.addr(e.customer)
	n, _ := e.reg.Lookup(chain.NetworkBaseSepolia)
	v, err := chain.NewEVMVerifier(e.ctx, n, e.sim.Client())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var at time.Duration
	v.Now = func() time.Time { return start.Add(at) }
	check := func(cs *models.CheckoutSession) chain.VerifyResult {
		t.Helper()
		res, err := v.Verify(e.ctx, chain.VerifyRequest{Network: cs.Network, TxHash: *cs.TxHash, MerchantAddress: cs.MerchantWalletAddress,
			ExpectedUnits: fmt.Sprint(bindDue), PayerAddress: cust.Hex(), Reference: *cs.PaymentReference})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Nothing else lands: pending for two minutes of checks, then failed.
	alone := e.session(e.linkA, cust)
	e.submit(alone, e.payPlain(e.stranger, e.addr(e.stranger)))
	for at = 0; at < 2*time.Minute; at += 5 * time.Second {
		if res := check(alone); res.Verdict != chain.VerdictPending || res.PaidBy != "" {
			t.Fatalf("at %s: %+v", at, res)
		}
	}
	// The stranger's transaction is not the customer's: the workflow gives
	// the hash back (Foreign) rather than failing the session.
	if res := check(alone); res.Verdict != chain.VerdictFailed || res.Reason != chain.ReasonInvalidTransfer || !res.Foreign {
		t.Fatalf("after two minutes: %+v", res)
	}
	// The customer pays a minute after the stranger's hash was submitted.
	at = 0
	paid := e.session(e.linkA, cust)
	e.submit(paid, e.payPlain(e.stranger, e.addr(e.stranger)))
	if res := check(paid); res.Verdict != chain.VerdictPending {
		t.Fatalf("first check: %+v", res)
	}
	at = time.Minute
	h := e.payBound(paid)
	if res := check(paid); res.Verdict != chain.VerdictComplete || !res.Bound || !strings.EqualFold(res.PaidBy, h) {
		t.Fatalf("the customer's payment: %+v (paid %s)", res, h)
	}

	// A reverted transaction someone else sent is no verdict on the
	// session either (before, it failed TX_REVERTED at once): the
	// customer's payment a minute in completes it, and with none it fails
	// after the two minutes. The customer's own revert fails at once.
	overdraw := func(from *ecdsa.PrivateKey) string {
		t.Helper()
		data, err := contracts.MustLoad(contracts.TestUSDC).ABI.Pack("transfer", e.merchantA, big.NewInt(1_000_000_000_000))
		if err != nil {
			t.Fatal(err)
		}
		cl := e.sim.Client()
		nonce, err := cl.NonceAt(e.ctx, e.addr(from), nil)
		if err != nil {
			t.Fatal(err)
		}
		head, err := cl.HeaderByNumber(e.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		tip := big.NewInt(1_000_000_000)
		tx, err := types.SignNewTx(from, types.LatestSignerForChainID(big.NewInt(1337)), &types.DynamicFeeTx{ChainID: big.NewInt(1337),
			Nonce: nonce, GasTipCap: tip, GasFeeCap: new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2)), tip), Gas: 100_000,
			To: &e.usdc, Data: data})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.SendTransaction(e.ctx, tx); err != nil {
			t.Fatal(err)
		}
		e.sim.Commit()
		if r, err := cl.TransactionReceipt(e.ctx, tx.Hash()); err != nil || r.Status != types.ReceiptStatusFailed {
			t.Fatalf("the overdraft did not revert: %+v %v", r, err)
		}
		return tx.Hash().Hex()
	}
	at = 0
	reverted := e.session(e.linkA, cust)
	e.submit(reverted, overdraw(e.stranger))
	if res := check(reverted); res.Verdict != chain.VerdictPending {
		t.Fatalf("a stranger's revert, first check: %+v", res)
	}
	at = time.Minute
	h = e.payBound(reverted)
	if res := check(reverted); res.Verdict != chain.VerdictComplete || !res.Bound || !strings.EqualFold(res.PaidBy, h) {
		t.Fatalf("the customer's payment after a stranger's revert: %+v (paid %s)", res, h)
	}
	at = 0
	unpaid := e.session(e.linkA, cust)
	e.submit(unpaid, overdraw(e.stranger))
	for at = 0; at < 2*time.Minute; at += 30 * time.Second {
		if res := check(unpaid); res.Verdict != chain.VerdictPending {
			t.Fatalf("a stranger's revert at %s: %+v", at, res)
		}
	}
	if res := check(unpaid); res.Verdict != chain.VerdictFailed || res.Reason != chain.ReasonTxReverted || !res.Foreign {
		t.Fatalf("a stranger's revert after two minutes: %+v", res)
	}
	at = 0
	own := e.session(e.linkA, cust)
	e.submit(own, overdraw(e.customer))
	// At once, yet foreign: a transaction that moved nothing to the
	// merchant is no payment of the session, whoever sent it (the declared
	// wallet is public: any of its own transactions, submitted by a
	// stranger, would otherwise fail the session). The session waits again.
	if res := check(own); res.Verdict != chain.VerdictFailed || res.Reason != chain.ReasonTxReverted || !res.Foreign {
		t.Fatalf("the customer's own revert: %+v", res)
	}
	// The customer's own transaction that paid someone else: the same,
	// after the search.
	at = 0
	mistaken := e.session(e.linkA, cust)
	e.submit(mistaken, e.payPlain(e.customer, e.addr(e.stranger)))
	for at = 0; at < 2*time.Minute; at += 30 * time.Second {
		if res := check(mistaken); res.Verdict != chain.VerdictPending {
			t.Fatalf("the customer's transfer elsewhere at %s: %+v", at, res)
		}
	}
	if res := check(mistaken); res.Verdict != chain.VerdictFailed || !res.Foreign {
		t.Fatalf("the customer's transfer elsewhere after two minutes: %+v", res)
	}
}

// TestFindAuthorizationsAfterAReorg: a block is read without the payment,
// then a reorg replaces it with one that carries the customer's
// authorization. The scan resumed at its cursor (past that height) still
// finds it: the blocks short of the network's confirmations are read
// again. Before, the cursor had moved past the height for good, and the
// payment was left to the confirmed-transfer scan (an exception, not the
// session's payment).
func TestFindAuthorizationsAfterAReorg(t *testing.T) {
	e := newBindEnv(t)
	net, _ := e.reg.Lookup(chain.NetworkBaseSepolia)
	net.Confirmations = 3
	mv := chain.NewMultiVerifier(chain.NewRegistry(net), chain.WithEVMDialer(func(context.Context, chain.Network) (chain.EVMClient, error) {
		return e.sim.Client(), nil
	}))
	cs := e.session(e.linkA, e.addr(e.customer))
	parent, err := e.sim.Client().HeaderByNumber(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.sim.Commit() // the block that will be replaced: no payment in it
	found, next, err := mv.FindAuthorizations(e.ctx, chain.NetworkBaseSepolia, parent.Number.Uint64()+1)
	if err != nil || len(found) != 0 || next != parent.Number.Uint64()+2 {
		t.Fatalf("before the reorg: %v next %d %v", found, next, err)
	}
	if err := e.sim.Fork(parent.Hash()); err != nil {
		t.Fatal(err)
	}
	a, sig := e.authorize(cs, e.customer, e.addr(e.customer), e.domain)
	hash := e.mine(devchain.BroadcastAuthorization(e.ctx, e.sim.Client(), e.relayer, e.usdc, a, sig)) // at the replaced height
	e.sim.Commit()
	found, _, err = mv.FindAuthorizations(e.ctx, chain.NetworkBaseSepolia, next)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if f.Reference == *cs.PaymentReference && strings.EqualFold(f.TxHash, hash) {
			return
		}
	}
	t.Fatalf("the payment the reorg put at a height read before is not found: %+v", found)
}

// TestDustIsNotOfferedAgain: a stranger's dust transfer to a merchant's
// wallet that no open session could take (none declares its sender and
// is due its amount) is not offered again every 15 s for its grace (four
// queries each time, per transfer, before); it still becomes an unmatched
// exception when the grace ends. A session opened after the transfer was
// mined could not take it anyway (mined before it).
func TestDustIsNotOfferedAgain(t *testing.T) {
	e := newBindEnv(t)
	clock := time.Now()
	svc := &checkout.Service{Store: e.st, Networks: e.reg, Finder: e.verifier, Verifier: e.verifier, Lifetime: 30 * time.Minute,
		UnmatchedGrace: 10 * time.Minute, Now: func() time.Time { return clock }}
	dust := e.payPlainUnits(e.stranger, e.merchantA, 1)
	svc.WatchOnce(e.ctx, nil)
	// The stranger now opens a session declaring their wallet, due one
	// unit: offered again, the dust would be submitted to it (and with no
	// Temporal client here, the submit panics).
	cs := e.sessionDue(e.linkA, e.addr(e.stranger), 1)
	if err := e.st.MarkWorkflowStarted(e.ctx, cs.ID); err != nil { // the submit goes to the (absent) workflow
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("the dust was offered to a session again: %v", r)
			}
		}()
		clock = clock.Add(20 * time.Second)
		svc.WatchOnce(e.ctx, nil)
	}()
	if got, err := e.st.CheckoutSession(e.ctx, cs.ID); err != nil || got.TxHash != nil {
		t.Fatalf("session %+v %v", got, err)
	}
	if got := e.exception(e.mA, dust); got != "no exception" {
		t.Fatalf("before the grace ended: %s", got)
	}
	clock = clock.Add(10 * time.Minute)
	svc.WatchOnce(e.ctx, nil)
	if got := e.exception(e.mA, dust); got != "exception unmatched 0.000001" {
		t.Fatalf("after the grace: %s", got)
	}
}
