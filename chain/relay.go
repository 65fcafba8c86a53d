package chain

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"

	ethereum "github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
)

// Authorization is a signed EIP-3009 TransferWithAuthorization.
type Authorization struct {
	From, To                common.Address
	Value                   *big.Int
	ValidAfter, ValidBefore *big.Int
	Nonce                   common.Hash
	Signature               []byte // 65-byte ECDSA, or any EIP-1271 signature of a contract wallet
}

// ErrAuthorizationRejected marks an authorization the token refuses (bad
// signature, expired, nonce used): relaying it would only burn gas.
var ErrAuthorizationRejected = errors.New("chain: the token rejects this authorization")

// transferWithAuthorizationABI is FiatToken v2.2's bytes-signature overload,
// which checks EOA signatures by ecrecover and contract wallets by EIP-1271.
var transferWithAuthorizationABI = func() abi.ABI {
	a, err := abi.JSON(strings.NewReader(`[{"type":"function","name":"transferWithAuthorization","stateMutability":"nonpayable",
	"inputs":[{"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"},
	{"name":"validAfter","type":"uint256"},{"name":"validBefore","type":"uint256"},{"name":"nonce","type":"bytes32"},
	{"name":"signature","type":"bytes"}],"outputs":[]}]`))
	if err != nil {
		panic(err)
	}
	return a
}()

// TransferWithAuthorizationData is the calldata of
// transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, signature).
func TransferWithAuthorizationData(a Authorization) ([]byte, error) {
	return transferWithAuthorizationABI.Pack("transferWithAuthorization", a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore,
		[32]byte(a.Nonce), a.Signature)
}

// RelayClient is what the relayer needs of an EVM JSON-RPC client.
type RelayClient interface {
	ethereum.ChainIDReader
	ethereum.ContractCaller
	ethereum.GasEstimator
	ethereum.PendingStateReader
	ethereum.TransactionSender
	ethereum.GasPricer1559
	HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error)
	TransactionByHash(ctx context.Context, hash common.Hash) (tx *types.Transaction, isPending bool, err error)
}

// Relayer broadcasts customers' signed authorizations from a wallet of the
// operator's, so a customer pays without holding gas. One key per network;
// a network without a key has no relayer (the customer's wallet broadcasts).
type Relayer struct {
	reg  *Registry
	keys map[string]*ecdsa.PrivateKey
	// Dial connects to a network (default: ethclient on its RPC URL).
	Dial func(ctx context.Context, n Network) (RelayClient, error)

	mu sync.Mutex // one broadcast at a time keeps the relayer's nonces in order
	// pending is the last transaction relayed for each payer (network/from)
	// until it is mined: another authorization of theirs waits for it.
	pending map[string]pendingRelay
}

type pendingRelay struct {
	hash common.Hash
	at   time.Time
}

// ErrRelayBusy: a transaction relayed for the same payer is not mined yet.
// Simulated against the latest block, a second authorization of theirs
// (the same one posted twice, or one balance signed away to several
// sessions) would pass and then revert when mined, at the relayer's cost.
var ErrRelayBusy = errors.New("chain: a relayed payment from this wallet is still waiting to be mined")

// NewRelayer returns a relayer with a key per network name.
func NewRelayer(reg *Registry, keys map[string]*ecdsa.PrivateKey) *Relayer {
	return &Relayer{reg: reg, keys: keys, Dial: func(ctx context.Context, n Network) (RelayClient, error) {
		return ethclient.DialContext(ctx, n.RPCURL)
	}}
}

// Enabled reports whether the network has a relayer.
func (r *Relayer) Enabled(network string) bool {
	if r == nil {
		return false
	}
	_, ok := r.keys[network]
	n, known := r.reg.Lookup(network)
	return ok && known && n.Family == FamilyEVM
}

// Address is the relayer's wallet on a network (zero when none).
func (r *Relayer) Address(network string) common.Address {
	if !r.Enabled(network) {
		return common.Address{}
	}
	return crypto.PubkeyToAddress(r.keys[network].PublicKey)
}

// Relay simulates the authorization against the network's USDC (an
// eth_call, so a bad signature, an expired or used nonce, or a short
// balance is refused without spending gas: [ErrAuthorizationRejected]),
// then signs and sends it from the relayer's wallet and returns the hash.
func (r *Relayer) Relay(ctx context.Context, network string, a Authorization) (string, error) {
	if !r.Enabled(network) {
		return "", fmt.Errorf("%w: no relayer for %q", ErrUnknownNetwork, network)
	}
	n, _ := r.reg.Lookup(network)
	key := r.keys[network]
	from := crypto.PubkeyToAddress(key.PublicKey)
	data, err := TransferWithAuthorizationData(a)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrAuthorizationRejected, err)
	}
	c, err := r.Dial(ctx, n)
	if err != nil {
		return "", fmt.Errorf("chain: relay on %s: dial: %w", network, scrubRPC(err, n.RPCURL))
	}
	if cl, ok := c.(interface{ Close() }); ok {
		defer cl.Close()
	}
	id, err := c.ChainID(ctx)
	if err != nil {
		return "", fmt.Errorf("chain: relay on %s: chain id: %w", network, scrubRPC(err, n.RPCURL))
	}
	if !id.IsUint64() || id.Uint64() != n.ChainID {
		return "", fmt.Errorf("%w: %s expects chain id %d, the RPC serves %s", ErrChainIDMismatch, network, n.ChainID, id)
	}
	usdc := common.HexToAddress(n.USDC)
	msg := ethereum.CallMsg{From: from, To: &usdc, Data: data}
	if _, err := c.CallContract(ctx, msg, nil); err != nil {
		return "", fmt.Errorf("%w: %v", ErrAuthorizationRejected, err)
	}
	gas, err := c.EstimateGas(ctx, msg)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrAuthorizationRejected, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	payer := network + "/" + strings.ToLower(a.From.Hex())
	if prev, ok := r.pending[payer]; ok {
		// Busy only while the node holds it as pending: mined, or unknown
		// to the node (dropped, replaced, another chain), it holds nothing.
		_, isPending, err := c.TransactionByHash(ctx, prev.hash)
		switch {
		case err == nil && isPending && time.Since(prev.at) < relayPendingFor:
			return "", ErrRelayBusy
		case err != nil && !errors.Is(err, ethereum.NotFound):
			return "", fmt.Errorf("chain: relay on %s: transaction %s: %w", network, prev.hash.Hex(), scrubRPC(err, n.RPCURL))
		}
		delete(r.pending, payer)
	}
	nonce, err := c.PendingNonceAt(ctx, from)
	if err != nil {
		return "", fmt.Errorf("chain: relay on %s: nonce: %w", network, err)
	}
	tip, err := c.SuggestGasTipCap(ctx)
	if err != nil {
		return "", fmt.Errorf("chain: relay on %s: tip: %w", network, err)
	}
	head, err := c.HeaderByNumber(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("chain: relay on %s: head: %w", network, err)
	}
	feeCap := new(big.Int).Mul(tip, big.NewInt(2))
	if head.BaseFee != nil {
		feeCap.Add(tip, new(big.Int).Mul(head.BaseFee, big.NewInt(2)))
	}
	tx, err := types.SignNewTx(key, types.LatestSignerForChainID(id), &types.DynamicFeeTx{
		ChainID: id, Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap, Gas: gas + gas/5, To: &usdc, Data: data,
	})
	if err != nil {
		return "", fmt.Errorf("chain: relay on %s: sign: %w", network, err)
	}
	if err := c.SendTransaction(ctx, tx); err != nil {
		return "", fmt.Errorf("chain: relay on %s: send: %w", network, scrubRPC(err, n.RPCURL))
	}
	if r.pending == nil || len(r.pending) > 10_000 {
		r.pending = map[string]pendingRelay{}
	}
	r.pending[payer] = pendingRelay{hash: tx.Hash(), at: time.Now()}
	return tx.Hash().Hex(), nil
}

// relayPendingFor is how long a relayed transaction that is not mined
// holds its payer's next one (a transaction dropped by the network must
// not hold them for ever).
const relayPendingFor = 10 * time.Minute
