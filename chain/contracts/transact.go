package contracts

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"sync"

	ethereum "github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
)

// Backend is what a [Transactor] needs from an Ethereum client; both
// ethclient.Client and the simulated backend's client satisfy it.
//
// go-ethereum's accounts/abi/bind would do the same job, but it links the
// keystore and with it a module (fsnotify) the main go.mod does not list; this
// small transactor keeps the module graph unchanged.
type Backend interface {
	ethereum.ChainIDReader
	ethereum.ContractCaller
	ethereum.GasEstimator
	ethereum.GasPricer1559
	ethereum.TransactionSender
	ethereum.PendingStateReader
	HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error)
}

// Transactor signs and broadcasts EIP-1559 transactions from one key, as a
// wallet does.
type Transactor struct {
	backend Backend
	key     *ecdsa.PrivateKey
	chainID *big.Int
	from    common.Address

	mu   sync.Mutex
	next uint64 // next nonce this transactor will use, at least
	// GasLimit, when non-zero, is used instead of estimating gas. Set it to
	// broadcast a transaction that will revert (estimation refuses those).
	GasLimit uint64
}

// NewTransactor returns a transactor for key on the chain behind backend; it
// reads the chain id once, for EIP-155 replay protection.
func NewTransactor(ctx context.Context, backend Backend, key *ecdsa.PrivateKey) (*Transactor, error) {
	if key == nil {
		return nil, errors.New("contracts: nil key")
	}
	id, err := backend.ChainID(ctx)
	if err != nil {
		return nil, fmt.Errorf("contracts: chain id: %w", err)
	}
	return &Transactor{backend: backend, key: key, chainID: id, from: crypto.PubkeyToAddress(key.PublicKey)}, nil
}

// From returns the sending address.
func (t *Transactor) From() common.Address { return t.from }

// Send signs and broadcasts a call of data to the contract at to (nil deploys
// a contract). It returns once the transaction is in the node's pool.
func (t *Transactor) Send(ctx context.Context, to *common.Address, data []byte) (*types.Transaction, error) {
	// The pool may not reflect a transaction sent a moment ago, so the nonce
	// is the larger of the pool's and our own count.
	t.mu.Lock()
	defer t.mu.Unlock()
	nonce, err := t.backend.PendingNonceAt(ctx, t.from)
	if err != nil {
		return nil, fmt.Errorf("contracts: nonce: %w", err)
	}
	nonce = max(nonce, t.next)
	head, err := t.backend.HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("contracts: head: %w", err)
	}
	tip, err := t.backend.SuggestGasTipCap(ctx)
	if err != nil {
		return nil, fmt.Errorf("contracts: gas tip: %w", err)
	}
	feeCap := new(big.Int).Add(tip, new(big.Int).Mul(head.BaseFee, big.NewInt(2)))
	gas := t.GasLimit
	if gas == 0 {
		gas, err = t.backend.EstimateGas(ctx, ethereum.CallMsg{From: t.from, To: to, Data: data, GasTipCap: tip, GasFeeCap: feeCap})
		if err != nil {
			return nil, fmt.Errorf("contracts: estimate gas: %w", err)
		}
	}
	tx, err := types.SignNewTx(t.key, types.LatestSignerForChainID(t.chainID), &types.DynamicFeeTx{
		ChainID: t.chainID, Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap, Gas: gas, To: to, Data: data,
	})
	if err != nil {
		return nil, fmt.Errorf("contracts: sign: %w", err)
	}
	if err := t.backend.SendTransaction(ctx, tx); err != nil {
		return nil, fmt.Errorf("contracts: send: %w", err)
	}
	t.next = nonce + 1
	return tx, nil
}

// Transact packs a call of method with args against the contract a deployed
// at addr and sends it.
func (t *Transactor) Transact(ctx context.Context, a *Artifact, addr common.Address, method string, args ...any) (*types.Transaction, error) {
	data, err := a.ABI.Pack(method, args...)
	if err != nil {
		return nil, fmt.Errorf("contracts: pack %s.%s: %w", a.Name, method, err)
	}
	return t.Send(ctx, &addr, data)
}

// Deploy sends the creation transaction of a with constructor args and returns
// the address the contract will have once the transaction is mined.
func (t *Transactor) Deploy(ctx context.Context, a *Artifact, args ...any) (common.Address, *types.Transaction, error) {
	ctor, err := a.ABI.Pack("", args...)
	if err != nil {
		return common.Address{}, nil, fmt.Errorf("contracts: pack constructor of %s: %w", a.Name, err)
	}
	data := append(append([]byte{}, a.Bytecode...), ctor...)
	tx, err := t.Send(ctx, nil, data)
	if err != nil {
		return common.Address{}, nil, err
	}
	return crypto.CreateAddress(t.from, tx.Nonce()), tx, nil
}

// Call runs a read-only method of the contract a at addr on the latest block
// and returns its decoded outputs.
func Call(ctx context.Context, backend ethereum.ContractCaller, a *Artifact, addr common.Address, method string, args ...any) ([]any, error) {
	data, err := a.ABI.Pack(method, args...)
	if err != nil {
		return nil, fmt.Errorf("contracts: pack %s.%s: %w", a.Name, method, err)
	}
	out, err := backend.CallContract(ctx, ethereum.CallMsg{To: &addr, Data: data}, nil)
	if err != nil {
		return nil, fmt.Errorf("contracts: call %s.%s: %w", a.Name, method, err)
	}
	return a.ABI.Unpack(method, out)
}
