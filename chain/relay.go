package chain

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
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
	TransactionReceipt(ctx context.Context, hash common.Hash) (*types.Receipt, error)
	NonceAt(ctx context.Context, account common.Address, blockNumber *big.Int) (uint64, error)
}

// Relayer broadcasts customers' signed authorizations from a wallet of the
// operator's, so a customer pays without holding gas. One key per network;
// a network without a key has no relayer (the customer's wallet broadcasts).
//
// Its transactions are kept in a ledger ([RelayLedger]; in memory when
// none is set) that every replica sharing the key sees: a broadcast holds
// the ledger's lock of the relayer's wallet and takes the next nonce after
// the ledger's pending ones as well as the node's (nodes behind a load
// balancer do not share their pools), and [Relayer.Tend] sends again, at
// higher fees, what stays unmined (a fee too low for a rising base fee, a
// transaction a node dropped), so one stuck nonce never holds up every
// relayed payment after it.
type Relayer struct {
	reg  *Registry
	keys map[string]*ecdsa.PrivateKey
	// Dial connects to a network (default: ethclient on its RPC URL).
	Dial func(ctx context.Context, n Network) (RelayClient, error)
	// Ledger keeps the relayed transactions (default: in memory, this
	// process only).
	Ledger RelayLedger
	// BumpAfter is how long a relayed transaction may stay unmined before
	// Tend sends it again at higher fees (default 45 s).
	BumpAfter time.Duration
	// MaxFeeCap bounds the fee cap a bump may offer, in wei per gas (nil:
	// no bound): past it the transaction waits for the base fee to fall.
	MaxFeeCap *big.Int
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu  sync.Mutex
	mem *memLedger
}

// RelayedTx is one nonce of a relayer's wallet and what was sent with it.
type RelayedTx struct {
	Network string
	Relayer common.Address
	Nonce   uint64
	// Payer is the authorization's signer; Reference its nonce (the
	// session's payment reference); ValidBefore its expiry (unix seconds).
	Payer       common.Address
	Reference   common.Hash
	ValidBefore int64
	// To, Data and Gas are the call; Tip and FeeCap the fees of the last
	// transaction sent.
	To     common.Address
	Data   []byte
	Gas    uint64
	Tip    *big.Int
	FeeCap *big.Int
	// Hashes are every transaction sent with this nonce, oldest first (a
	// bump is a new hash); the last one is the current.
	Hashes []common.Hash
	// CancelFrom, when positive, is the index in Hashes of the first empty
	// transaction sent in place of the call (its authorization expired):
	// a hash from there on that is mined cancelled it, one before paid.
	CancelFrom int
	// Status: pending, mined (one of Hashes), cancelled (the authorization
	// expired unmined: the nonce was spent on an empty transaction),
	// superseded (the nonce was spent by a transaction not in the ledger),
	// or filled (no payer: the relayer's empty transaction for a nonce
	// missing from the ledger, mined).
	Status string
	// MinedHash is the hash that was mined (mined, cancelled).
	MinedHash common.Hash
	SentAt    time.Time
}

// fillsGap: t is the relayer's own empty transaction for a nonce missing
// from the ledger (fillGap), which carries no authorization.
func (t *RelayedTx) fillsGap() bool { return t.Payer == (common.Address{}) }

// Relayed transaction statuses.
const (
	RelayPending    = "pending"
	RelayMined      = "mined"
	RelayCancelled  = "cancelled"
	RelaySuperseded = "superseded"
	// RelayFilled: an empty transaction of the relayer's own that spent a
	// nonce missing from the ledger (a gap), mined.
	RelayFilled = "filled"
)

// RelayLedger keeps a relayer's transactions where every replica sharing
// its key sees them.
type RelayLedger interface {
	// Locked runs fn holding the lock of relayer's wallet on network: one
	// broadcast or bump at a time across every replica.
	Locked(ctx context.Context, network string, relayer common.Address, fn func(ctx context.Context) error) error
	// Pending lists the relayer's pending transactions on network, by nonce.
	Pending(ctx context.Context, network string, relayer common.Address) ([]RelayedTx, error)
	// PayerPending lists the pending transactions relayed for payer on
	// network (by any relayer).
	PayerPending(ctx context.Context, network string, payer common.Address) ([]RelayedTx, error)
	// Save inserts or replaces the transaction of (network, relayer, nonce).
	Save(ctx context.Context, t RelayedTx) error
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
	var hash common.Hash
	err = r.ledger().Locked(ctx, network, from, func(ctx context.Context) error {
		if err := r.payerFree(ctx, c, n, a.From); err != nil {
			return err
		}
		nonce, err := c.PendingNonceAt(ctx, from)
		if err != nil {
			return fmt.Errorf("chain: relay on %s: nonce: %w", network, err)
		}
		pending, err := r.ledger().Pending(ctx, network, from)
		if err != nil {
			return fmt.Errorf("chain: relay on %s: ledger: %w", network, err)
		}
		for _, p := range pending {
			// A node that has not seen another replica's transaction
			// (or has dropped it: Tend sends it again) answers a nonce
			// already taken.
			nonce = max(nonce, p.Nonce+1)
		}
		tip, feeCap, err := r.fees(ctx, c, nil, nil)
		if err != nil {
			return fmt.Errorf("chain: relay on %s: %w", network, err)
		}
		validBefore := int64(math.MaxInt64)
		if a.ValidBefore.IsInt64() {
			validBefore = a.ValidBefore.Int64()
		}
		t := RelayedTx{Network: network, Relayer: from, Nonce: nonce, Payer: a.From, Reference: a.Nonce, ValidBefore: validBefore,
			To: usdc, Data: data, Gas: gas + gas/5, Tip: tip, FeeCap: feeCap, Status: RelayPending}
		tx, err := r.send(ctx, c, key, id, &t)
		if err != nil {
			return fmt.Errorf("chain: relay on %s: %w", network, scrubRPC(err, n.RPCURL))
		}
		hash = tx.Hash()
		return nil
	})
	if err != nil {
		return "", err
	}
	return hash.Hex(), nil
}

// payerFree refuses a payer with a relayed transaction not mined yet (sent
// within relayPendingFor): simulated against the latest block, their next
// authorization would pass and then revert. The ledger says what is
// pending, whichever replica sent it (a node behind a load balancer may
// not have seen another replica's transaction); a receipt of any of its
// hashes frees the payer.
func (r *Relayer) payerFree(ctx context.Context, c RelayClient, n Network, payer common.Address) error {
	held, err := r.ledger().PayerPending(ctx, n.Name, payer)
	if err != nil {
		return fmt.Errorf("chain: relay on %s: ledger: %w", n.Name, err)
	}
	for i := range held {
		p := &held[i]
		if r.now().Sub(p.SentAt) >= relayPendingFor {
			continue
		}
		mined, _, err := r.minedHash(ctx, c, p)
		if err != nil {
			return fmt.Errorf("chain: relay on %s: %w", n.Name, scrubRPC(err, n.RPCURL))
		}
		if mined == (common.Hash{}) {
			return ErrRelayBusy
		}
	}
	return nil
}

// fees are the tip and fee cap of a transaction sent now: the node's
// suggested tip and twice the base fee over it, and, for a bump of a
// transaction sent at prevTip and prevCap, at least 12.5% over each (what
// nodes require of a replacement), within MaxFeeCap.
func (r *Relayer) fees(ctx context.Context, c RelayClient, prevTip, prevCap *big.Int) (*big.Int, *big.Int, error) {
	tip, err := c.SuggestGasTipCap(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("tip: %w", err)
	}
	head, err := c.HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("head: %w", err)
	}
	if prevTip != nil {
		tip = bigMax(tip, bump(prevTip))
	}
	feeCap := new(big.Int).Mul(tip, big.NewInt(2))
	if head.BaseFee != nil {
		feeCap = new(big.Int).Add(tip, new(big.Int).Mul(head.BaseFee, big.NewInt(2)))
	}
	if prevCap != nil {
		feeCap = bigMax(feeCap, bump(prevCap))
	}
	if r.MaxFeeCap != nil && feeCap.Cmp(r.MaxFeeCap) > 0 {
		feeCap = new(big.Int).Set(r.MaxFeeCap)
		if tip.Cmp(feeCap) > 0 {
			tip = new(big.Int).Set(feeCap)
		}
	}
	return tip, feeCap, nil
}

// bump is v raised by 12.5%, rounded up, and by one at least.
func bump(v *big.Int) *big.Int {
	out := new(big.Int).Mul(v, big.NewInt(9))
	out.Add(out, big.NewInt(7)).Div(out, big.NewInt(8))
	if out.Cmp(v) <= 0 {
		out.Add(v, big.NewInt(1))
	}
	return out
}

func bigMax(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

// send signs t's call with its nonce and fees, broadcasts it, and records
// it in the ledger with its new hash.
func (r *Relayer) send(ctx context.Context, c RelayClient, key *ecdsa.PrivateKey, chainID *big.Int, t *RelayedTx) (*types.Transaction, error) {
	to := t.To
	tx, err := types.SignNewTx(key, types.LatestSignerForChainID(chainID), &types.DynamicFeeTx{
		ChainID: chainID, Nonce: t.Nonce, GasTipCap: t.Tip, GasFeeCap: t.FeeCap, Gas: t.Gas, To: &to, Data: t.Data,
	})
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	if err := c.SendTransaction(ctx, tx); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	t.Hashes = append(t.Hashes, tx.Hash())
	t.SentAt = r.now()
	if err := r.ledger().Save(ctx, *t); err != nil {
		// Sent, not recorded: the next relay's nonce comes from the node,
		// and this transaction is not tended. Said, not hidden.
		return tx, fmt.Errorf("ledger: %w (transaction %s was sent)", err, tx.Hash().Hex())
	}
	return tx, nil
}

// Tend looks at the relayer's pending transactions on network: mined ones
// (any of their hashes) are marked so; one whose nonce the wallet spent
// otherwise is superseded; the lowest unmined one, unmined for BumpAfter,
// is sent again with fees raised (a new hash: the session follows its
// authorization to it; the ones behind it wait for it to be mined),
// or, once its authorization has expired (it could only revert), replaced
// by an empty transaction to the relayer itself so the nonce is spent and
// the transactions after it can be mined. Nonces below the lowest one that
// the ledger does not hold and the node's pool holds nothing at (a gap)
// are spent on empty transactions likewise (fillGap). It returns how many
// it sent.
func (r *Relayer) Tend(ctx context.Context, network string) (int, error) {
	if !r.Enabled(network) {
		return 0, nil
	}
	n, _ := r.reg.Lookup(network)
	key := r.keys[network]
	from := crypto.PubkeyToAddress(key.PublicKey)
	pending, err := r.ledger().Pending(ctx, network, from)
	if err != nil || len(pending) == 0 {
		return 0, err
	}
	c, err := r.Dial(ctx, n)
	if err != nil {
		return 0, fmt.Errorf("chain: tend relayer on %s: dial: %w", network, scrubRPC(err, n.RPCURL))
	}
	if cl, ok := c.(interface{ Close() }); ok {
		defer cl.Close()
	}
	id, err := c.ChainID(ctx)
	if err != nil {
		return 0, fmt.Errorf("chain: tend relayer on %s: chain id: %w", network, scrubRPC(err, n.RPCURL))
	}
	if !id.IsUint64() || id.Uint64() != n.ChainID {
		return 0, fmt.Errorf("%w: %s expects chain id %d, the RPC serves %s", ErrChainIDMismatch, network, n.ChainID, id)
	}
	sent := 0
	err = r.ledger().Locked(ctx, network, from, func(ctx context.Context) error {
		// Read again under the lock: another replica may have tended them.
		pending, err := r.ledger().Pending(ctx, network, from)
		if err != nil {
			return err
		}
		spent, err := c.NonceAt(ctx, from, nil)
		if err != nil {
			return fmt.Errorf("chain: tend relayer on %s: nonce: %w", network, scrubRPC(err, n.RPCURL))
		}
		first := true // only the lowest unmined nonce is sent again: the ones behind it wait for it
		for i := range pending {
			t := &pending[i]
			if mined, at, err := r.minedHash(ctx, c, t); err != nil {
				return fmt.Errorf("chain: tend relayer on %s: %w", network, scrubRPC(err, n.RPCURL))
			} else if mined != (common.Hash{}) {
				t.Status, t.MinedHash = RelayMined, mined
				if t.CancelFrom > 0 && at >= t.CancelFrom {
					t.Status = RelayCancelled
				}
				if t.fillsGap() {
					t.Status = RelayFilled
				}
				if err := r.ledger().Save(ctx, *t); err != nil {
					return err
				}
				continue
			}
			if t.Nonce < spent {
				t.Status = RelaySuperseded
				if err := r.ledger().Save(ctx, *t); err != nil {
					return err
				}
				continue
			}
			if !first {
				continue
			}
			first = false
			if r.now().Sub(t.SentAt) < r.bumpAfter() {
				continue
			}
			if t.Nonce > spent {
				filled, err := r.fillGap(ctx, c, key, id, t.Network, spent, t.Nonce)
				if err != nil {
					return fmt.Errorf("chain: tend relayer on %s: %w", network, scrubRPC(err, n.RPCURL))
				}
				if filled > 0 {
					sent += filled
					continue
				}
			}
			tip, feeCap, err := r.fees(ctx, c, t.Tip, t.FeeCap)
			if err != nil {
				return fmt.Errorf("chain: tend relayer on %s: %w", network, scrubRPC(err, n.RPCURL))
			}
			if tip.Cmp(bump(t.Tip)) < 0 || feeCap.Cmp(bump(t.FeeCap)) < 0 {
				// MaxFeeCap leaves no room for a replacement nodes accept:
				// it waits for the base fee to fall.
				continue
			}
			if !t.fillsGap() && t.CancelFrom == 0 && r.now().Add(relayExpiryMargin).Unix() >= t.ValidBefore {
				// The authorization expires before a block could take
				// it: the transaction could only revert. Spend the nonce.
				t.To, t.Data, t.Gas, t.CancelFrom = from, nil, 21_000, len(t.Hashes)
			}
			t.Tip, t.FeeCap = tip, feeCap
			if _, err := r.send(ctx, c, key, id, t); err != nil {
				return fmt.Errorf("chain: tend relayer on %s: nonce %d: %w", network, t.Nonce, scrubRPC(err, n.RPCURL))
			}
			sent++
		}
		return nil
	})
	return sent, err
}

// maxGapFill bounds the nonces one Tend spends on a gap.
const maxGapFill = 16

// fillGap spends the nonces from spent up to (not with) next, which the
// ledger does not hold, on empty transactions to the relayer itself, and
// records each in the ledger (no payer; "filled" once mined). Such a gap
// is a transaction sent from the key by something else that never made it
// into a block, or one sent whose ledger write failed and that the node
// then lost: nothing would ever be mined past it. It fills nothing while
// the node holds a transaction at the gap's first nonce (its pending nonce
// is past it): that one is real, only slow, and is not replaced.
func (r *Relayer) fillGap(ctx context.Context, c RelayClient, key *ecdsa.PrivateKey, chainID *big.Int, network string, spent, next uint64) (int, error) {
	from := crypto.PubkeyToAddress(key.PublicKey)
	pooled, err := c.PendingNonceAt(ctx, from)
	if err != nil {
		return 0, fmt.Errorf("pending nonce: %w", err)
	}
	if pooled > spent {
		return 0, nil
	}
	filled := 0
	for nonce := spent; nonce < next && filled < maxGapFill; nonce++ {
		tip, feeCap, err := r.fees(ctx, c, nil, nil)
		if err != nil {
			return filled, err
		}
		g := RelayedTx{Network: network, Relayer: from, Nonce: nonce, To: from, Gas: 21_000, Tip: tip, FeeCap: feeCap, Status: RelayPending}
		if _, err := r.send(ctx, c, key, chainID, &g); err != nil {
			return filled, fmt.Errorf("gap nonce %d: %w", nonce, err)
		}
		filled++
	}
	return filled, nil
}

// minedHash is the hash of t's transactions that has a receipt, if any,
// and its index in t.Hashes.
func (r *Relayer) minedHash(ctx context.Context, c RelayClient, t *RelayedTx) (common.Hash, int, error) {
	for i := len(t.Hashes) - 1; i >= 0; i-- {
		rc, err := c.TransactionReceipt(ctx, t.Hashes[i])
		if errors.Is(err, ethereum.NotFound) {
			continue
		}
		if err != nil {
			return common.Hash{}, 0, fmt.Errorf("receipt of %s: %w", t.Hashes[i].Hex(), err)
		}
		if rc != nil {
			return t.Hashes[i], i, nil
		}
	}
	return common.Hash{}, 0, nil
}

// RunTender tends every relayer network's transactions each interval
// until ctx ends (the worker runs it); faults are logged.
func (r *Relayer) RunTender(ctx context.Context, interval time.Duration, logf func(msg string, args ...any)) {
	if r == nil || len(r.keys) == 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for network := range r.keys {
			if sent, err := r.Tend(ctx, network); err != nil && ctx.Err() == nil {
				logf("relayer: tending its transactions failed", "network", network, "err", err)
			} else if sent > 0 {
				logf("relayer: transactions sent again at higher fees", "network", network, "count", sent)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Relayer) ledger() RelayLedger {
	if r.Ledger != nil {
		return r.Ledger
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		r.mem = &memLedger{rows: map[string]RelayedTx{}}
	}
	return r.mem
}

func (r *Relayer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Relayer) bumpAfter() time.Duration {
	if r.BumpAfter > 0 {
		return r.BumpAfter
	}
	return 45 * time.Second
}

// relayExpiryMargin: an authorization expiring within it is not sent
// again (a block could take it after its expiry: it would revert).
const relayExpiryMargin = 30 * time.Second

// memLedger is the ledger of one process (no Ledger set).
type memLedger struct {
	lock sync.Mutex // the relayer's lock (one process: one lock for all)
	mu   sync.Mutex
	rows map[string]RelayedTx
}

func (m *memLedger) Locked(ctx context.Context, _ string, _ common.Address, fn func(ctx context.Context) error) error {
	m.lock.Lock()
	defer m.lock.Unlock()
	return fn(ctx)
}

func (m *memLedger) Pending(_ context.Context, network string, relayer common.Address) ([]RelayedTx, error) {
	return m.list(func(t RelayedTx) bool { return t.Network == network && t.Relayer == relayer }), nil
}

func (m *memLedger) PayerPending(_ context.Context, network string, payer common.Address) ([]RelayedTx, error) {
	return m.list(func(t RelayedTx) bool { return t.Network == network && t.Payer == payer }), nil
}

func (m *memLedger) list(keep func(RelayedTx) bool) []RelayedTx {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []RelayedTx
	for _, t := range m.rows {
		if t.Status == RelayPending && keep(t) {
			t.Hashes = append([]common.Hash(nil), t.Hashes...)
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b RelayedTx) int { return cmp.Compare(a.Nonce, b.Nonce) })
	return out
}

func (m *memLedger) Save(_ context.Context, t RelayedTx) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.rows) > 10_000 {
		for k, v := range m.rows {
			if v.Status != RelayPending {
				delete(m.rows, k)
			}
		}
	}
	t.Hashes = append([]common.Hash(nil), t.Hashes...)
	m.rows[fmt.Sprintf("%s/%s/%d", t.Network, t.Relayer.Hex(), t.Nonce)] = t
	return nil
}

// relayPendingFor is how long a relayed transaction that is not mined
// holds its payer's next one (a transaction dropped by the network must
// not hold them for ever).
const relayPendingFor = 10 * time.Minute
