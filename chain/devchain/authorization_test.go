package devchain

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"

	"github.com/paygate/paygate/chain/contracts"
)

// authEnv is a simulated chain (chain id 1337, real EVM, blocks sealed by
// hand) with two test USDC tokens, a SmartWallet and a Router deployed, the
// customer and the wallet holding USDC, and a relayer holding only ether.
type authEnv struct {
	t        *testing.T
	ctx      context.Context
	sim      *simulated.Backend
	client   simulated.Client
	deployer *contracts.Transactor
	usdc     *contracts.Artifact

	token, otherToken, wallet, router common.Address
	customer, relayer, walletOwner    *ecdsa.PrivateKey
	merchant                          common.Address
	domain                            TokenDomain
}

func newAuthEnv(t *testing.T) *authEnv {
	t.Helper()
	e := &authEnv{t: t, ctx: context.Background(), usdc: contracts.MustLoad(contracts.TestUSDC),
		customer: mustKey(t), relayer: mustKey(t), walletOwner: mustKey(t)}
	e.merchant = crypto.PubkeyToAddress(mustKey(t).PublicKey)
	eth := new(big.Int).Mul(big.NewInt(100), big.NewInt(params.Ether))
	e.sim = simulated.NewBackend(types.GenesisAlloc{
		crypto.PubkeyToAddress(DeployerKey().PublicKey): {Balance: eth},
		crypto.PubkeyToAddress(e.customer.PublicKey):    {Balance: eth},
		crypto.PubkeyToAddress(e.relayer.PublicKey):     {Balance: eth},
		crypto.PubkeyToAddress(e.walletOwner.PublicKey): {Balance: eth},
	})
	t.Cleanup(func() { _ = e.sim.Close() })
	e.client = e.sim.Client()
	var err error
	if e.deployer, err = contracts.NewTransactor(e.ctx, e.client, DeployerKey()); err != nil {
		t.Fatal(err)
	}
	e.token = e.deploy(e.usdc)
	e.otherToken = e.deploy(e.usdc)
	e.wallet = e.deploy(contracts.MustLoad(contracts.SmartWallet), crypto.PubkeyToAddress(e.walletOwner.PublicKey))
	e.router = e.deploy(contracts.MustLoad(contracts.Router))
	for _, to := range []common.Address{crypto.PubkeyToAddress(e.customer.PublicKey), e.wallet} {
		e.mine(e.deployer.Transact(e.ctx, e.usdc, e.token, "mint", to, big.NewInt(1_000_000_000)))
	}
	if e.domain, err = ReadTokenDomain(e.ctx, e.client, e.token); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *authEnv) deploy(a *contracts.Artifact, args ...any) common.Address {
	e.t.Helper()
	addr, tx, err := e.deployer.Deploy(e.ctx, a, args...)
	e.mine(tx, err)
	return addr
}

// mine seals the transaction into a block and returns its receipt.
func (e *authEnv) mine(tx *types.Transaction, err error) *types.Receipt {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
	e.sim.Commit()
	r, err := e.client.TransactionReceipt(e.ctx, tx.Hash())
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *authEnv) head() *types.Header {
	e.t.Helper()
	h, err := e.client.HeaderByNumber(e.ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

func (e *authEnv) balance(token, who common.Address) *big.Int {
	e.t.Helper()
	out, err := contracts.Call(e.ctx, e.client, e.usdc, token, "balanceOf", who)
	if err != nil {
		e.t.Fatal(err)
	}
	return out[0].(*big.Int)
}

// authorization is what a checkout asks the customer to sign: a fresh
// random nonce (the session's paymentReference), valid for an hour.
func (e *authEnv) authorization(from common.Address, value int64) Authorization {
	var nonce [32]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		e.t.Fatal(err)
	}
	return Authorization{From: from, To: e.merchant, Value: big.NewInt(value), ValidAfter: big.NewInt(0),
		ValidBefore: new(big.Int).SetUint64(e.head().Time + 3600), Nonce: nonce}
}

func (e *authEnv) sign(key *ecdsa.PrivateKey, d TokenDomain, a Authorization) []byte {
	e.t.Helper()
	sig, err := SignAuthorization(key, d, a)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(sig) != 65 || (sig[64] != 27 && sig[64] != 28) {
		e.t.Fatalf("signature %x", sig)
	}
	return sig
}

// wantRefused checks that both the simulation and the broadcast are refused
// for the given reason, and that a transaction forced on chain reverts.
func (e *authEnv) wantRefused(a Authorization, sig []byte, kind error) {
	e.t.Helper()
	err := SimulateAuthorization(e.ctx, e.client, e.token, a, sig)
	var rerr *RevertError
	if !errors.As(err, &rerr) || !errors.Is(err, kind) {
		e.t.Fatalf("simulate: %v, want %v", err, kind)
	}
	e.t.Logf("refused: %v", err)
	if _, err := BroadcastAuthorization(e.ctx, e.client, e.relayer, e.token, a, sig); !errors.Is(err, kind) {
		e.t.Fatalf("broadcast: %v, want %v", err, kind)
	}
	data, err := AuthorizationCalldata(a, sig)
	if err != nil {
		e.t.Fatal(err)
	}
	tr, err := contracts.NewTransactor(e.ctx, e.client, e.relayer)
	if err != nil {
		e.t.Fatal(err)
	}
	tr.GasLimit = 300_000 // past estimation, which refuses a reverting call
	if r := e.mine(tr.Send(e.ctx, &e.token, data)); r.Status != types.ReceiptStatusFailed {
		e.t.Fatalf("forced transaction status %d", r.Status)
	}
}

// wantPaid checks a receipt holds AuthorizationUsed(authorizer, nonce) and
// then the Transfer it pays for, both from the token, and nothing else.
func (e *authEnv) wantPaid(r *types.Receipt, a Authorization) {
	e.t.Helper()
	if r.Status != types.ReceiptStatusSuccessful || len(r.Logs) != 2 {
		e.t.Fatalf("receipt status %d with %d logs", r.Status, len(r.Logs))
	}
	used, transfer := r.Logs[0], r.Logs[1]
	ev := e.usdc.ABI.Events
	if used.Address != e.token || len(used.Topics) != 3 || used.Topics[0] != ev["AuthorizationUsed"].ID ||
		common.BytesToAddress(used.Topics[1][:]) != a.From || used.Topics[2] != common.Hash(a.Nonce) {
		e.t.Fatalf("first log is not AuthorizationUsed(%s, %x): %+v", a.From, a.Nonce, used)
	}
	if transfer.Address != e.token || len(transfer.Topics) != 3 || transfer.Topics[0] != ev["Transfer"].ID ||
		common.BytesToAddress(transfer.Topics[1][:]) != a.From || common.BytesToAddress(transfer.Topics[2][:]) != a.To ||
		new(big.Int).SetBytes(transfer.Data).Cmp(a.Value) != 0 {
		e.t.Fatalf("second log is not Transfer(%s -> %s, %s): %+v", a.From, a.To, a.Value, transfer)
	}
	out, err := contracts.Call(e.ctx, e.client, e.usdc, e.token, "authorizationState", a.From, a.Nonce)
	if err != nil || out[0] != true {
		e.t.Fatalf("authorizationState %v %v", out, err)
	}
}

// TestAuthorizationDigestMatchesToken checks the Go digest against the
// token's own domain separator and type hash, hashed by hand, so the EIP-712
// encoding is proven on both sides independently.
func TestAuthorizationDigestMatchesToken(t *testing.T) {
	e := newAuthEnv(t)
	if e.domain != (TokenDomain{Name: "USD Coin (paygate dev)", Version: "2", ChainID: 1337, VerifyingContract: e.token}) {
		t.Fatalf("domain %+v", e.domain)
	}
	call := func(method string) [32]byte {
		out, err := contracts.Call(e.ctx, e.client, e.usdc, e.token, method)
		if err != nil {
			t.Fatal(err)
		}
		return out[0].([32]byte)
	}
	td := AuthorizationTypedData(e.domain, Authorization{})
	sep, err := td.HashStruct("EIP712Domain", td.Domain.Map())
	if err != nil {
		t.Fatal(err)
	}
	if onChain := call("DOMAIN_SEPARATOR"); !bytes.Equal(sep, onChain[:]) {
		t.Fatalf("domain separator: go %x, token %x", sep, onChain)
	}
	typeHash := crypto.Keccak256Hash([]byte("TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"))
	if onChain := call("TRANSFER_WITH_AUTHORIZATION_TYPEHASH"); common.Hash(onChain) != typeHash || !bytes.Equal(td.TypeHash(TransferWithAuthorizationType), typeHash[:]) {
		t.Fatalf("type hash: token %x, go %x", onChain, td.TypeHash(TransferWithAuthorizationType))
	}
	a := e.authorization(crypto.PubkeyToAddress(e.customer.PublicKey), 12_500_000)
	word := func(v *big.Int) []byte { return common.LeftPadBytes(v.Bytes(), 32) }
	structHash := crypto.Keccak256(bytes.Join([][]byte{
		typeHash[:], common.LeftPadBytes(a.From[:], 32), common.LeftPadBytes(a.To[:], 32),
		word(a.Value), word(a.ValidAfter), word(a.ValidBefore), a.Nonce[:]}, nil))
	sepOnChain := call("DOMAIN_SEPARATOR")
	want := crypto.Keccak256Hash([]byte{0x19, 0x01}, sepOnChain[:], structHash)
	if got := AuthorizationDigest(e.domain, a); got != want {
		t.Fatalf("digest %s, by hand %s", got, want)
	}
	// A wallet given the typed data as JSON hashes the same.
	raw, err := AuthorizationTypedData(e.domain, a).Domain.ChainId.MarshalText()
	if err != nil || string(raw) != "0x539" {
		t.Fatalf("chainId %s %v", raw, err)
	}
	if err := (Authorization{Value: big.NewInt(-1)}).Validate(); err == nil {
		t.Fatal("negative value accepted")
	}
	if _, err := SignAuthorization(e.customer, e.domain, Authorization{ValidBefore: new(big.Int).Lsh(big.NewInt(1), 256)}); err == nil {
		t.Fatal("2^256 accepted")
	}
}

// TestTransferWithAuthorization covers the token's EIP-3009 checks end to
// end: a relayer broadcasts what the customer signed; replays, other chains,
// other tokens, expired or early authorizations and forged signatures revert.
func TestTransferWithAuthorization(t *testing.T) {
	e := newAuthEnv(t)
	customer := crypto.PubkeyToAddress(e.customer.PublicKey)

	t.Run("relayed", func(t *testing.T) {
		a := e.authorization(customer, 12_500_000)
		sig := e.sign(e.customer, e.domain, a)
		if err := SimulateAuthorization(e.ctx, e.client, e.token, a, sig); err != nil {
			t.Fatal(err)
		}
		before := e.balance(e.token, e.merchant)
		r := e.mine(BroadcastAuthorization(e.ctx, e.client, e.relayer, e.token, a, sig))
		e.wantPaid(r, a)
		if got := new(big.Int).Sub(e.balance(e.token, e.merchant), before); got.Int64() != 12_500_000 {
			t.Fatalf("merchant received %s", got)
		}
		// The same authorization again: the nonce is spent.
		e.wantRefused(a, sig, ErrAuthorizationUsed)
	})
	t.Run("customer broadcasts itself, v r s overload", func(t *testing.T) {
		a := e.authorization(customer, 1)
		sig := e.sign(e.customer, e.domain, a)
		tr, err := contracts.NewTransactor(e.ctx, e.client, e.customer)
		if err != nil {
			t.Fatal(err)
		}
		data, err := e.usdc.PackSig("transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)",
			a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce, sig[64], [32]byte(sig[:32]), [32]byte(sig[32:64]))
		if err != nil {
			t.Fatal(err)
		}
		e.wantPaid(e.mine(tr.Send(e.ctx, &e.token, data)), a)
	})
	t.Run("wrong chain id", func(t *testing.T) {
		a := e.authorization(customer, 1)
		d := e.domain
		d.ChainID = 1338
		e.wantRefused(a, e.sign(e.customer, d, a), ErrInvalidSignature)
	})
	t.Run("another token's domain", func(t *testing.T) {
		a := e.authorization(customer, 1)
		d := e.domain
		d.VerifyingContract = e.otherToken
		e.wantRefused(a, e.sign(e.customer, d, a), ErrInvalidSignature)
	})
	t.Run("another version", func(t *testing.T) {
		a := e.authorization(customer, 1)
		d := e.domain
		d.Version = "1"
		e.wantRefused(a, e.sign(e.customer, d, a), ErrInvalidSignature)
	})
	t.Run("expired", func(t *testing.T) {
		a := e.authorization(customer, 1)
		a.ValidBefore = new(big.Int).SetUint64(e.head().Time)
		e.wantRefused(a, e.sign(e.customer, e.domain, a), ErrAuthorizationExpired)
	})
	t.Run("not yet valid", func(t *testing.T) {
		a := e.authorization(customer, 1)
		a.ValidAfter = new(big.Int).SetUint64(e.head().Time + 600)
		e.wantRefused(a, e.sign(e.customer, e.domain, a), ErrAuthorizationNotYetValid)
	})
	t.Run("forged by a stranger", func(t *testing.T) {
		a := e.authorization(customer, 1)
		e.wantRefused(a, e.sign(mustKey(t), e.domain, a), ErrInvalidSignature)
	})
	t.Run("tampered amount", func(t *testing.T) {
		a := e.authorization(customer, 1)
		sig := e.sign(e.customer, e.domain, a)
		a.Value = big.NewInt(1_000)
		e.wantRefused(a, sig, ErrInvalidSignature)
	})
	t.Run("malleable high s", func(t *testing.T) {
		a := e.authorization(customer, 1)
		sig := e.sign(e.customer, e.domain, a)
		// (r, n-s, v^1) recovers the same signer; EIP-2 tokens refuse it.
		s := new(big.Int).Sub(crypto.S256().Params().N, new(big.Int).SetBytes(sig[32:64]))
		high := append(append(append([]byte{}, sig[:32]...), math.U256Bytes(s)...), sig[64]^1)
		e.wantRefused(a, high, ErrInvalidSignature)
	})
	t.Run("v not 27 or 28", func(t *testing.T) {
		a := e.authorization(customer, 1)
		sig := e.sign(e.customer, e.domain, a)
		sig[64] -= 27
		e.wantRefused(a, sig, ErrInvalidSignature)
	})
	t.Run("more than the balance", func(t *testing.T) {
		a := e.authorization(customer, 1)
		a.Value = new(big.Int).Lsh(big.NewInt(1), 100)
		e.wantRefused(a, e.sign(e.customer, e.domain, a), ErrInsufficientBalance)
	})
	if _, err := AuthorizationCalldata(e.authorization(customer, 1), nil); err == nil {
		t.Fatal("empty signature packed")
	}
}

// TestSmartWalletAuthorization: an EIP-1271 wallet is the authorizer; its
// owner signs the digest and the token asks the wallet.
func TestSmartWalletAuthorization(t *testing.T) {
	e := newAuthEnv(t)
	a := e.authorization(e.wallet, 2_000_000)
	sig := e.sign(e.walletOwner, e.domain, a)
	if err := SimulateAuthorization(e.ctx, e.client, e.token, a, sig); err != nil {
		t.Fatal(err)
	}
	e.wantPaid(e.mine(BroadcastAuthorization(e.ctx, e.client, e.relayer, e.token, a, sig)), a)

	// Another key's signature for the wallet, and the customer's own
	// signature presented as the wallet's, are refused by the wallet.
	b := e.authorization(e.wallet, 1)
	e.wantRefused(b, e.sign(e.customer, e.domain, b), ErrInvalidSignature)
	e.wantRefused(b, []byte{1, 2, 3}, ErrInvalidSignature)

	// The owner moves the wallet's USDC with execute; nobody else can.
	sw := contracts.MustLoad(contracts.SmartWallet)
	inner, _ := e.usdc.ABI.Pack("transfer", e.merchant, big.NewInt(5))
	owner, _ := contracts.NewTransactor(e.ctx, e.client, e.walletOwner)
	before := e.balance(e.token, e.merchant)
	if r := e.mine(owner.Transact(e.ctx, sw, e.wallet, "execute", e.token, inner)); r.Status != types.ReceiptStatusSuccessful {
		t.Fatal("execute by the owner failed")
	}
	if got := new(big.Int).Sub(e.balance(e.token, e.merchant), before); got.Int64() != 5 {
		t.Fatalf("execute moved %s", got)
	}
	stranger, _ := contracts.NewTransactor(e.ctx, e.client, e.customer)
	if _, err := stranger.Transact(e.ctx, sw, e.wallet, "execute", e.token, inner); err == nil {
		t.Fatal("execute by a stranger accepted")
	}
}

// signTyped signs EIP-712 typed data of another primary type of the token.
func signTyped(t *testing.T, key *ecdsa.PrivateKey, d TokenDomain, primary string, fields []apitypes.Type, msg apitypes.TypedDataMessage) []byte {
	t.Helper()
	td := AuthorizationTypedData(d, Authorization{})
	td.Types = apitypes.Types{"EIP712Domain": td.Types["EIP712Domain"], primary: fields}
	td.PrimaryType, td.Message = primary, msg
	hash, _, err := apitypes.TypedDataAndHash(td)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := crypto.Sign(hash, key)
	if err != nil {
		t.Fatal(err)
	}
	sig[64] += 27
	return sig
}

// TestReceiveAndCancelAuthorization covers receiveWithAuthorization (only
// the payee may submit it) and cancelAuthorization (the nonce can no longer
// pay).
func TestReceiveAndCancelAuthorization(t *testing.T) {
	e := newAuthEnv(t)
	customer := crypto.PubkeyToAddress(e.customer.PublicKey)
	relayerAddr := crypto.PubkeyToAddress(e.relayer.PublicKey)
	a := e.authorization(customer, 3)
	a.To = relayerAddr // the payee submits it
	fields := authorizationTypes[TransferWithAuthorizationType]
	sig := signTyped(t, e.customer, e.domain, "ReceiveWithAuthorization", fields, AuthorizationTypedData(e.domain, a).Message)
	const recv = "receiveWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)"
	data, err := e.usdc.PackSig(recv, a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce, sig)
	if err != nil {
		t.Fatal(err)
	}
	cust, _ := contracts.NewTransactor(e.ctx, e.client, e.customer)
	if _, err := cust.Send(e.ctx, &e.token, data); err == nil || revertError(err) == nil || revertError(err).Reason[:17] != "CallerMustBePayee" {
		t.Fatalf("receive by a non-payee: %v", err)
	}
	rel, _ := contracts.NewTransactor(e.ctx, e.client, e.relayer)
	if r := e.mine(rel.Send(e.ctx, &e.token, data)); r.Status != types.ReceiptStatusSuccessful || len(r.Logs) != 2 {
		t.Fatalf("receive by the payee: status %d, %d logs", r.Status, len(r.Logs))
	}
	// A TransferWithAuthorization signature does not work as a Receive one.
	b := e.authorization(customer, 3)
	b.To = relayerAddr
	data, _ = e.usdc.PackSig(recv, b.From, b.To, b.Value, b.ValidAfter, b.ValidBefore, b.Nonce, e.sign(e.customer, e.domain, b))
	if _, err := rel.Send(e.ctx, &e.token, data); !errors.Is(revertErrorOrNil(err), ErrInvalidSignature) {
		t.Fatalf("transfer signature used to receive: %v", err)
	}

	// Cancel: the customer burns a nonce it signed for, and the authorization dies.
	c := e.authorization(customer, 4)
	csig := e.sign(e.customer, e.domain, c)
	cancel := signTyped(t, e.customer, e.domain, "CancelAuthorization",
		[]apitypes.Type{{Name: "authorizer", Type: "address"}, {Name: "nonce", Type: "bytes32"}},
		apitypes.TypedDataMessage{"authorizer": customer.Hex(), "nonce": hexutil.Encode(c.Nonce[:])})
	data, _ = e.usdc.PackSig("cancelAuthorization(address,bytes32,bytes)", customer, c.Nonce, cancel)
	r := e.mine(rel.Send(e.ctx, &e.token, data))
	if r.Status != types.ReceiptStatusSuccessful || len(r.Logs) != 1 || r.Logs[0].Topics[0] != e.usdc.ABI.Events["AuthorizationCanceled"].ID {
		t.Fatalf("cancel: status %d, logs %+v", r.Status, r.Logs)
	}
	e.wantRefused(c, csig, ErrAuthorizationUsed)
}

func revertErrorOrNil(err error) error {
	if r := revertError(err); r != nil {
		return r
	}
	return err
}

// TestRouter: route pulls the payer's tokens into the router and pays out
// from it; routeWithAuthorization does the same with an authorization made
// out to the router, so its nonce is in the receipt but the Transfer after it
// pays the router.
func TestRouter(t *testing.T) {
	e := newAuthEnv(t)
	customer := crypto.PubkeyToAddress(e.customer.PublicKey)
	router := contracts.MustLoad(contracts.Router)
	cust, _ := contracts.NewTransactor(e.ctx, e.client, e.customer)
	e.mine(cust.Transact(e.ctx, e.usdc, e.token, "approve", e.router, big.NewInt(10)))
	r := e.mine(cust.Transact(e.ctx, router, e.router, "route", e.token, e.merchant, big.NewInt(10)))
	transfers := transfersIn(r, e.usdc.ABI, e.token)
	if len(transfers) != 2 || transfers[0] != [2]common.Address{customer, e.router} || transfers[1] != [2]common.Address{e.router, e.merchant} {
		t.Fatalf("route transfers %v", transfers)
	}

	a := e.authorization(customer, 7)
	a.To = e.router
	sig := e.sign(e.customer, e.domain, a)
	r = e.mine(cust.Transact(e.ctx, router, e.router, "routeWithAuthorization", e.token, a.From, e.merchant, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce, sig))
	if r.Status != types.ReceiptStatusSuccessful || len(r.Logs) != 3 || r.Logs[0].Topics[0] != e.usdc.ABI.Events["AuthorizationUsed"].ID {
		t.Fatalf("routeWithAuthorization: status %d, logs %d", r.Status, len(r.Logs))
	}
	transfers = transfersIn(r, e.usdc.ABI, e.token)
	if len(transfers) != 2 || transfers[0] != [2]common.Address{customer, e.router} || transfers[1] != [2]common.Address{e.router, e.merchant} {
		t.Fatalf("routeWithAuthorization transfers %v", transfers)
	}
}

func transfersIn(r *types.Receipt, a abi.ABI, token common.Address) [][2]common.Address {
	var out [][2]common.Address
	for _, l := range r.Logs {
		if l.Address == token && l.Topics[0] == a.Events["Transfer"].ID {
			out = append(out, [2]common.Address{common.BytesToAddress(l.Topics[1][:]), common.BytesToAddress(l.Topics[2][:])})
		}
	}
	return out
}

// rpcRevert is a node's "execution reverted" answer (code 3 with data).
type rpcRevert struct{ data string }

func (e rpcRevert) Error() string          { return "execution reverted" }
func (e rpcRevert) ErrorCode() int         { return 3 }
func (e rpcRevert) ErrorData() interface{} { return e.data }

// TestRevertReasonsOfFiatToken: on a real network the token is FiatToken,
// which reverts with strings; they map to the same reasons.
func TestRevertReasonsOfFiatToken(t *testing.T) {
	str, _ := abi.NewType("string", "", nil)
	for reason, want := range map[string]error{
		"FiatTokenV2: authorization is expired":          ErrAuthorizationExpired,
		"FiatTokenV2: authorization is not yet valid":    ErrAuthorizationNotYetValid,
		"FiatTokenV2: authorization is used or canceled": ErrAuthorizationUsed,
		"FiatTokenV2: invalid signature":                 ErrInvalidSignature,
		"ECRecover: invalid signature 's' value":         ErrInvalidSignature,
		"ERC20: transfer amount exceeds balance":         ErrInsufficientBalance,
		"Pausable: paused":                               nil,
	} {
		packed, _ := abi.Arguments{{Type: str}}.Pack(reason)
		data := append(crypto.Keccak256([]byte("Error(string)"))[:4], packed...)
		r := revertError(fmt.Errorf("estimate gas: %w", rpcRevert{hexutil.Encode(data)}))
		if r == nil || r.Reason != reason || r.Kind != want {
			t.Errorf("%q: %+v", reason, r)
		}
	}
	if r := revertError(rpcRevert{"0x"}); r == nil || r.Reason != "execution reverted" || r.Kind != nil {
		t.Errorf("bare revert: %+v", r)
	}
	if r := revertError(errors.New("connection refused")); r != nil {
		t.Errorf("a network error decoded as a revert: %+v", r)
	}
}
