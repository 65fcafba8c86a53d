package chain

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"

	ethereum "github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
)

// transferTopic is topic 0 of the ERC-20 event Transfer(address,address,uint256).
var transferTopic = crypto.Keccak256Hash([]byte("Transfer(address,address,uint256)"))

// AuthorizationUsedTopic is topic 0 of EIP-3009's
// AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce),
// which USDC (FiatToken v2) emits just before the Transfer it authorizes.
var AuthorizationUsedTopic = crypto.Keccak256Hash([]byte("AuthorizationUsed(address,bytes32)"))

// EVMClient is the part of an Ethereum JSON-RPC client the EVM verifier uses.
// *ethclient.Client and the simulated backend's client satisfy it.
type EVMClient interface {
	ethereum.TransactionReader
	ethereum.ChainIDReader
	ethereum.BlockNumberReader
	HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error)
}

// rawRPC is implemented by ethclient.Client (and the simulated backend's
// client, which embeds one): access to the underlying JSON-RPC connection.
type rawRPC interface {
	Client() *rpc.Client
}

// DialEVM connects to n.RPCURL with go-ethereum's ethclient. It is the default
// [EVMDialer]; the chain id is checked by [NewEVMVerifier].
func DialEVM(ctx context.Context, n Network) (EVMClient, error) {
	return ethclient.DialContext(ctx, n.RPCURL)
}

// EVMVerifier verifies USDC payments on one EVM network.
//
// A transaction pays the merchant when its receipt has status 1 and the
// Transfer logs emitted by the network's USDC contract credit the merchant
// address with at least the expected amount (net of any Transfer out of the
// merchant address in the same transaction). Logs of any other contract are
// ignored, whatever they claim to be. The transaction may come from an EOA or
// a contract (smart wallet, router); only the token's logs count.
//
// A verdict is final (complete or failed) only once the receipt's block has
// the network's confirmations and is still the canonical block at its height;
// until then the result is pending, so a reorg that drops or replaces the
// block never turns into a wrong verdict.
type EVMVerifier struct {
	net    Network
	client EVMClient
	usdc   common.Address
	// follows remembers, per session reference, the search for a
	// transaction that replaced an unseen submitted one.
	follows recent[common.Hash, followState]
	// Now is the clock of the search's pace (nil: time.Now).
	Now func() time.Time
}

// NewEVMVerifier checks that client serves n's chain (by chain id) and returns
// a verifier for it. A chain id mismatch is [ErrChainIDMismatch]; a failed RPC
// call is returned as is (transient).
func NewEVMVerifier(ctx context.Context, n Network, client EVMClient) (*EVMVerifier, error) {
	if n.Family != FamilyEVM {
		return nil, fmt.Errorf("%w: %s is not an EVM network", ErrUnknownNetwork, n.Name)
	}
	if !common.IsHexAddress(n.USDC) {
		return nil, fmt.Errorf("chain: %s: bad USDC address %q", n.Name, n.USDC)
	}
	id, err := client.ChainID(ctx)
	if err != nil {
		return nil, fmt.Errorf("chain: %s: read chain id: %w", n.Name, err)
	}
	if !id.IsUint64() || id.Uint64() != n.ChainID {
		return nil, fmt.Errorf("%w: %s expects chain id %d, %s serves %s", ErrChainIDMismatch, n.Name, n.ChainID, redactURL(n.RPCURL), id)
	}
	return &EVMVerifier{net: n, client: client, usdc: common.HexToAddress(n.USDC)}, nil
}

// Network returns the network this verifier checks.
func (v *EVMVerifier) Network() Network { return v.net }

// Verify implements [Verifier].
func (v *EVMVerifier) Verify(ctx context.Context, req VerifyRequest) (VerifyResult, error) {
	return v.verify(ctx, req, !req.Alone)
}

// verify checks req's transaction; follow lets an unseen one be followed to
// the transaction that replaced it (once: the replacement is not followed).
func (v *EVMVerifier) verify(ctx context.Context, req VerifyRequest, follow bool) (VerifyResult, error) {
	if req.Network != "" && req.Network != v.net.Name {
		return VerifyResult{}, fmt.Errorf("%w: verifier of %s asked about %s", ErrUnknownNetwork, v.net.Name, req.Network)
	}
	hashStr, err := ParseTxHash(FamilyEVM, req.TxHash)
	if err != nil {
		return VerifyResult{}, fmt.Errorf("%w: txHash: %v", ErrInvalidRequest, err)
	}
	merchantStr, err := ParseAddress(FamilyEVM, req.MerchantAddress)
	if err != nil {
		return VerifyResult{}, fmt.Errorf("%w: merchantAddress: %v", ErrInvalidRequest, err)
	}
	expected, err := parseExpected(req.ExpectedUnits)
	if err != nil {
		return VerifyResult{}, err
	}
	var ref common.Hash
	if req.Reference != "" {
		r, err := ParseEVMReference(req.Reference)
		if err != nil {
			return VerifyResult{}, fmt.Errorf("%w: reference: %v", ErrInvalidRequest, err)
		}
		ref = r
	}
	hash, merchant := common.HexToHash(hashStr), common.HexToAddress(merchantStr)

	res := VerifyResult{Required: max(v.net.Confirmations, 1), Verdict: VerdictPending}
	receipt, err := v.client.TransactionReceipt(ctx, hash)
	if errors.Is(err, ethereum.NotFound) {
		res.Message = "transaction not found on chain yet"
		if follow && ref != (common.Hash{}) {
			return v.replacement(ctx, req, hash, ref, merchant, res, nil)
		}
		return res, nil
	}
	if err != nil {
		return VerifyResult{}, fmt.Errorf("chain: %s: receipt of %s: %w", v.net.Name, hashStr, err)
	}
	if receipt == nil || receipt.BlockNumber == nil || receipt.TxHash != hash {
		return VerifyResult{}, fmt.Errorf("chain: %s: rpc returned an inconsistent receipt for %s", v.net.Name, hashStr)
	}
	res.Seen = true
	res.BlockNumber = receipt.BlockNumber.Uint64()
	res.BlockHash = receipt.BlockHash.Hex()

	t := v.transfers(receipt, merchant, ref)
	received, payer := t.plain, t.plainPayer
	if t.bound.Sign() > 0 {
		// The payer signed an authorization naming this session: only that
		// transfer counts, whatever else the transaction moved.
		received, payer, res.Bound = t.bound, t.boundPayer, true
	}
	res.ReceivedUnits = nonNegative(received)
	if payer != (common.Address{}) {
		res.Payer = payer.Hex()
	}
	res.Refs = t.refs

	// Re-check that the receipt's block is still the canonical block at its
	// height: a receipt served from a stale node or an orphaned block must not
	// complete a payment.
	canonical, err := v.canonicalHash(ctx, res.BlockNumber)
	if errors.Is(err, ethereum.NotFound) {
		res.Message = fmt.Sprintf("block %d is no longer on the canonical chain (reorg); waiting", res.BlockNumber)
		return res, nil
	}
	if err != nil {
		return VerifyResult{}, fmt.Errorf("chain: %s: canonical block %d: %w", v.net.Name, res.BlockNumber, err)
	}
	if canonical != receipt.BlockHash {
		res.Message = fmt.Sprintf("block %d was replaced by %s (reorg); waiting", res.BlockNumber, canonical.Hex())
		return res, nil
	}

	head, err := v.client.BlockNumber(ctx)
	if err != nil {
		return VerifyResult{}, fmt.Errorf("chain: %s: head block: %w", v.net.Name, err)
	}
	if head >= res.BlockNumber {
		res.Confirmations = head - res.BlockNumber + 1
	}

	// What the verdict will be once the block is confirmed.
	verdict, reason, msg := VerdictComplete, "", ""
	switch {
	case receipt.Status != types.ReceiptStatusSuccessful:
		verdict, reason, msg = VerdictFailed, ReasonTxReverted, "transaction reverted on chain"
	case received.Sign() <= 0:
		verdict, reason, msg = VerdictFailed, ReasonInvalidTransfer,
			fmt.Sprintf("no USDC transfer from %s to %s in this transaction", v.usdc.Hex(), merchant.Hex())
	case received.Cmp(expected) < 0:
		verdict, reason, msg = VerdictFailed, ReasonInvalidTransfer,
			fmt.Sprintf("merchant received %s units, expected %s", received, expected)
	case received.Cmp(expected) > 0:
		msg = fmt.Sprintf("merchant received %s units, %s more than expected", received, new(big.Int).Sub(received, expected))
	default:
		msg = fmt.Sprintf("merchant received %s units", received)
	}
	if res.Confirmations < res.Required {
		res.Message = fmt.Sprintf("%d of %d confirmations", res.Confirmations, res.Required)
		return res, nil
	}
	if !req.NotBefore.IsZero() && !res.Bound {
		header, err := v.client.HeaderByNumber(ctx, receipt.BlockNumber)
		if err != nil {
			return VerifyResult{}, fmt.Errorf("chain: %s: header of block %d: %w", v.net.Name, res.BlockNumber, err)
		}
		res.BlockTime = time.Unix(int64(header.Time), 0).UTC()
	}
	if reason == ReasonTxReverted && ref != (common.Hash{}) {
		// Reverted, perhaps because the payer's authorization was used
		// first by a copy of it (a front-run: anyone may relay a signed
		// authorization): the payment then happened in that transaction.
		paid, err := v.authorizationUse(ctx, v.authorizers(ctx, hash, req.PayerAddress), ref, res.BlockNumber)
		if err != nil {
			return VerifyResult{}, err
		}
		if paid != (common.Hash{}) && paid != hash {
			again := req
			again.TxHash = paid.Hex()
			out, err := v.verify(ctx, again, false)
			if err != nil || out.Reason == ReasonTxReverted {
				return out, err // a used authorization's transaction cannot revert; never loops
			}
			out.PaidBy = strings.ToLower(paid.Hex())
			return out, nil
		}
	}
	res.Verdict, res.Reason, res.Message = verdict, reason, msg
	if verdict == VerdictFailed && follow {
		res.Foreign = v.foreign(ctx, hash, req.PayerAddress, res.Payer, received)
	}
	if verdict == VerdictComplete && follow && !res.Bound && res.Payer != "" && req.PayerAddress != "" && !SameAddress(res.Payer, req.PayerAddress) {
		// USDC from another wallet (BindToSession fails it): did the
		// declared wallet send it, through a router?
		res.SentByDeclared = v.sentBy(ctx, hash, req.PayerAddress)
	}
	if follow && ref != (common.Hash{}) && received.Sign() <= 0 {
		// A transaction that paid the merchant nothing: mined and moving
		// no USDC there, or reverted and not sent by the declared wallet
		// (any reverted transaction on the chain, submitted by anyone who
		// knows the session's id). The customer's own revert fails as it
		// is.
		if receipt.Status == types.ReceiptStatusSuccessful || !v.sentBy(ctx, hash, req.PayerAddress) {
			return v.replacement(ctx, req, hash, ref, merchant, res, &res)
		}
	}
	return res, nil
}

// foreign says whether a failed transaction is no payment of the declared
// wallet's for the session (chain.VerifyResult.Foreign): it moved no USDC
// to the merchant (whoever sent it: the declared wallet is public, and any
// transaction of its own, reverted or paying someone else, would otherwise
// fail the session in a stranger's hands), or the USDC came from another
// wallet and another account sent it (sentBy: one the client cannot read
// or decode counts as another's). No declared wallet: never. A transfer
// mined before the session is foreign too (BindToSession).
func (v *EVMVerifier) foreign(ctx context.Context, hash common.Hash, declared, payer string, received *big.Int) bool {
	if _, err := ParseAddress(FamilyEVM, declared); err != nil {
		return false
	}
	if received.Sign() <= 0 {
		return true
	}
	if payer != "" && SameAddress(payer, declared) {
		return false
	}
	return !v.sentBy(ctx, hash, declared)
}

// sentBy says whether the mined transaction hash was sent by declared, a
// session's payer wallet (none declared: taken as sent by it, so its
// verdict stands). A transaction the client cannot read or decode (a node
// error, a type go-ethereum does not know, such as an OP Stack deposit
// anyone can make revert) is taken as not sent by it: the cost is the
// two-minute search, where an error here would hold the session's check
// forever.
func (v *EVMVerifier) sentBy(ctx context.Context, hash common.Hash, declared string) bool {
	p, err := ParseAddress(FamilyEVM, declared)
	if err != nil {
		return true
	}
	tx, _, err := v.client.TransactionByHash(ctx, hash)
	if err != nil {
		return false
	}
	from, err := types.Sender(v.signer(), tx)
	return err == nil && from == common.HexToAddress(p)
}

// replacement answers for a submitted transaction the chain has not got:
// still waiting in the node's pool, or replaced there by another
// transaction from the same sender and nonce (a wallet's "speed up", a
// relayer's fee bump: a new hash, the same signed authorization), which
// then carried the session's authorization and is judged instead (PaidBy).
//
// Anyone can sign an authorization of their own with the session's
// reference as its nonce, so a use is followed only when it pays the
// session in full, or comes from the declared wallet (the customer's own
// short payment fails visibly); a full payment is preferred. The search
// is incremental per reference (the blocks since the last check, a few
// more for reorgs), and uses still unconfirmed are remembered.
//
// With paidNothing (the failed verdict of a submitted transaction that was
// mined and moved no USDC to the merchant, or reverted and was not the
// declared wallet's: a mistaken hash, or any hash submitted by someone who
// knows the session's id), the session's own
// payment is looked for the same way, at every check for followBurst, and
// judged instead when found; the transaction is failed only after that.
func (v *EVMVerifier) replacement(ctx context.Context, req VerifyRequest, hash, ref common.Hash, merchant common.Address, unseen VerifyResult, paidNothing *VerifyResult) (VerifyResult, error) {
	lf, ok := v.client.(ethereum.LogFilterer)
	if !ok {
		if paidNothing != nil {
			return *paidNothing, nil
		}
		return unseen, nil
	}
	st := v.follows.get(ref)
	st.mu.Lock()
	defer st.mu.Unlock()
	// Found uses wait to be judged at every check; otherwise the search
	// keeps its pace (followPace).
	now := clock(v.Now)
	if paidNothing != nil {
		if !st.pace.first.IsZero() && now.Sub(st.pace.first) >= followBurst && len(st.uses) == 0 {
			return *paidNothing, nil
		}
		unseen = *paidNothing
		unseen.Verdict, unseen.Reason, unseen.Foreign = VerdictPending, "", false
		unseen.Message = paidNothing.Message + "; looking for the session's own payment before failing it"
	} else {
		if len(st.uses) == 0 && !st.pace.due(now) {
			return unseen, nil
		}
		if tx, _, err := v.client.TransactionByHash(ctx, hash); err == nil {
			// In the pool: not replaced. Its sender and account nonce
			// are kept: a transaction of theirs with that nonce found
			// later is this one replaced (a plain transfer's speed-up).
			if from, err := types.Sender(v.signer(), tx); err == nil {
				st.sender, st.nonce, st.pooled = from, tx.Nonce(), true
			}
			return unseen, nil
		} else if !errors.Is(err, ethereum.NotFound) {
			return VerifyResult{}, fmt.Errorf("chain: %s: transaction %s: %w", v.net.Name, hash.Hex(), err)
		}
	}
	head, err := v.client.BlockNumber(ctx)
	if err != nil {
		return VerifyResult{}, fmt.Errorf("chain: %s: head block: %w", v.net.Name, err)
	}
	st.pace.searched(now)
	if st.ruledOut == nil {
		st.ruledOut = map[common.Hash]bool{}
	}
	from := head - min(head, authorizationLookback)
	if st.searched > 0 {
		from = max(from, min(head, st.searched-min(st.searched, followReorgDepth)))
	}
	logs, err := filterLogsSplitting(ctx, lf, ethereum.FilterQuery{FromBlock: bigUint(from), ToBlock: bigUint(head),
		Addresses: []common.Address{v.usdc}, Topics: [][]common.Hash{{AuthorizationUsedTopic}, nil, {ref}}})
	if err != nil {
		return VerifyResult{}, fmt.Errorf("chain: %s: authorization logs %d-%d: %w", v.net.Name, from, head, err)
	}
	// Candidates, from the logs alone: the declared wallet's use (one at
	// most: a nonce is used once per authorizer), or a transaction that
	// also moved at least the amount due to the merchant. Anyone may use
	// the nonce with an authorization of their own, by the hundred: those
	// cost no receipt read.
	expected, _ := new(big.Int).SetString(req.ExpectedUnits, 10)
	var declared common.Address
	if p, err := ParseAddress(FamilyEVM, req.PayerAddress); err == nil {
		declared = common.HexToAddress(p)
	}
	var others []types.Log
	for _, l := range logs {
		if l.Removed || l.TxHash == hash || len(l.Topics) < 3 || st.ruledOut[l.TxHash] || slices.Contains(st.uses, l.TxHash) {
			continue
		}
		if declared != (common.Address{}) && common.BytesToAddress(l.Topics[1].Bytes()) == declared {
			st.uses = append(st.uses, l.TxHash)
			continue
		}
		others = append(others, l)
	}
	if st.pooled {
		if err := v.sameNonce(ctx, lf, st, hash, merchant, from, head); err != nil {
			return VerifyResult{}, err
		}
	}
	if len(others) > 0 {
		paid, err := v.paidAtLeast(ctx, lf, merchant, expected, from, head)
		if err != nil {
			return VerifyResult{}, err
		}
		for _, l := range others {
			if paid[l.TxHash] {
				st.uses = append(st.uses, l.TxHash)
			} else {
				st.ruledOut[l.TxHash] = true
			}
		}
	}
	st.searched = head

	// Judge them, a few a check: a full payment first, else the declared
	// wallet's own.
	var full, own *VerifyResult
	next := make([]common.Hash, 0, len(st.uses))
	for i, use := range st.uses {
		if i >= followJudgedPerCheck {
			next = append(next, st.uses[i:]...)
			break
		}
		again := req
		again.TxHash = use.Hex()
		out, err := v.verify(ctx, again, false)
		if err != nil {
			st.uses = append(next, st.uses[i:]...)
			return VerifyResult{}, err
		}
		received, _ := new(big.Int).SetString(out.ReceivedUnits, 10)
		isFull := out.Bound && received != nil && expected != nil && received.Cmp(expected) >= 0
		// The submitted transaction re-signed with a higher fee (same
		// sender, same nonce) is judged as the submitted one would
		// have been, bound or not.
		isOwn := (out.Bound && out.Payer != "" && strings.EqualFold(out.Payer, req.PayerAddress)) || st.replacements[use]
		switch {
		case !out.Seen || (out.Verdict == VerdictPending && !isFull && !isOwn):
			next = append(next, use) // reorged away, or not judged yet
			continue
		case !isFull && !isOwn:
			st.ruledOut[use] = true // a stranger's: never this session's payment
			continue
		}
		next = append(next, use)
		out.PaidBy = strings.ToLower(use.Hex())
		if isFull && full == nil {
			full = &out
		} else if !isFull && own == nil {
			own = &out
		}
	}
	st.uses = next
	switch {
	case full != nil:
		return *full, nil
	case own != nil:
		return *own, nil
	}
	return unseen, nil
}

// sameNonce adds to st's uses the transfers to the merchant, mined in
// blocks from..to, of a transaction signed by the submitted one's sender
// with its account nonce: the submitted transaction replaced in the pool
// (a wallet's speed-up of a plain transfer, which carries no reference to
// be found by). Others of the sender are ruled out.
func (v *EVMVerifier) sameNonce(ctx context.Context, lf ethereum.LogFilterer, st *followState, hash common.Hash, merchant common.Address, from, to uint64) error {
	logs, err := filterLogsSplitting(ctx, lf, ethereum.FilterQuery{FromBlock: bigUint(from), ToBlock: bigUint(to), Addresses: []common.Address{v.usdc},
		Topics: [][]common.Hash{{transferTopic}, {common.BytesToHash(st.sender.Bytes())}, {common.BytesToHash(merchant.Bytes())}}})
	if err != nil {
		return fmt.Errorf("chain: %s: transfer logs %d-%d: %w", v.net.Name, from, to, err)
	}
	if st.replacements == nil {
		st.replacements = map[common.Hash]bool{}
	}
	for _, l := range logs {
		if l.Removed || l.TxHash == hash || st.ruledOut[l.TxHash] || slices.Contains(st.uses, l.TxHash) {
			continue
		}
		tx, _, err := v.client.TransactionByHash(ctx, l.TxHash)
		if err != nil {
			return fmt.Errorf("chain: %s: transaction %s: %w", v.net.Name, l.TxHash.Hex(), err)
		}
		if signer, err := types.Sender(v.signer(), tx); err == nil && signer == st.sender && tx.Nonce() == st.nonce {
			st.uses = append(st.uses, l.TxHash)
			st.replacements[l.TxHash] = true
			continue
		}
		st.ruledOut[l.TxHash] = true
	}
	return nil
}

// signer recovers transactions' senders on the verifier's chain.
func (v *EVMVerifier) signer() types.Signer {
	return types.LatestSignerForChainID(new(big.Int).SetUint64(v.net.ChainID))
}

// paidAtLeast lists the transactions of blocks from..to whose USDC
// Transfer logs paid the merchant at least units in one transfer.
func (v *EVMVerifier) paidAtLeast(ctx context.Context, lf ethereum.LogFilterer, merchant common.Address, units *big.Int, from, to uint64) (map[common.Hash]bool, error) {
	logs, err := filterLogsSplitting(ctx, lf, ethereum.FilterQuery{FromBlock: bigUint(from), ToBlock: bigUint(to),
		Addresses: []common.Address{v.usdc}, Topics: [][]common.Hash{{transferTopic}, nil, {common.BytesToHash(merchant.Bytes())}}})
	if err != nil {
		return nil, fmt.Errorf("chain: %s: transfer logs %d-%d: %w", v.net.Name, from, to, err)
	}
	out := map[common.Hash]bool{}
	for _, l := range logs {
		if !l.Removed && units != nil && new(big.Int).SetBytes(l.Data).Cmp(units) >= 0 {
			out[l.TxHash] = true
		}
	}
	return out, nil
}

// followJudgedPerCheck bounds the candidates judged (a receipt read each)
// in one check; the rest wait for the next.
const followJudgedPerCheck = 8

// followReorgDepth is how many blocks a reference's incremental search
// reads again, for uses a reorg moved.
const followReorgDepth = 64

// followBurst is how long after its first search a reference's
// replacement is searched at every check; followEvery the pace after it.
const (
	followBurst = 2 * time.Minute
	followEvery = 30 * time.Second
)

// followPace spaces the searches for a reference's replacement: at every
// check for followBurst after the first (a wallet's speed-up, a payment
// made again, lands within a block or two), then once every followEvery,
// so a hash or signature no node will ever know (anyone may submit one,
// and it is checked for the not-found window's hour) costs the node a few
// more calls a minute, not more at every check.
type followPace struct{ first, last time.Time }

// due reports whether a search is due at now.
func (p *followPace) due(now time.Time) bool {
	return p.first.IsZero() || now.Sub(p.first) < followBurst || now.Sub(p.last) >= followEvery
}

// searched records a search at now.
func (p *followPace) searched(now time.Time) {
	if p.first.IsZero() {
		p.first = now
	}
	p.last = now
}

// clock is now's time (nil: time.Now).
func clock(now func() time.Time) time.Time {
	if now != nil {
		return now()
	}
	return time.Now()
}

// followState is what the search for a reference's replacement knows.
type followState struct {
	mu       sync.Mutex
	pace     followPace
	searched uint64        // the last block searched
	uses     []common.Hash // candidates found and not ruled out, oldest first
	// ruledOut are uses that cannot be the session's payment (another
	// wallet's, short), never judged again.
	ruledOut map[common.Hash]bool
	// sender and nonce of the submitted transaction, read from the node's
	// pool while it waited there (pooled): a transfer of theirs with that
	// nonce is the submitted one replaced; replacements are those found.
	sender       common.Address
	nonce        uint64
	pooled       bool
	replacements map[common.Hash]bool
}

// recent keeps a value per key for an hour after its last use (pruned
// once it holds over a thousand).
type recent[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]*recentEntry[V]
}

type recentEntry[V any] struct {
	v  *V
	at time.Time
}

// get returns k's value, a new zero one the first time.
func (r *recent[K, V]) get(k K) *V {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[K]*recentEntry[V]{}
	}
	now := time.Now()
	if len(r.m) > 1000 {
		for key, e := range r.m {
			if now.Sub(e.at) > time.Hour {
				delete(r.m, key)
			}
		}
	}
	e, ok := r.m[k]
	if !ok {
		e = &recentEntry[V]{v: new(V)}
		r.m[k] = e
	}
	e.at = now
	return e.v
}

// authorizationLookback is how many blocks before a reverted transaction's
// the verifier looks for the transaction that used its authorization: the
// copy was mined first, while the payer's waited (two thousand blocks are
// over an hour on the fastest networks here, longer than a session).
const authorizationLookback = MaxLogRange - 1

// TransferWithAuthorizationSelector is the selector of FiatToken v2.2's
// transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes),
// the call the hosted page's script encodes.
var TransferWithAuthorizationSelector = crypto.Keccak256([]byte("transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)"))[:4]

// transferWithAuthorizationSelectors are the selectors of USDC's
// transferWithAuthorization: v2.2's with the signature as bytes and the
// older one with v, r and s.
var transferWithAuthorizationSelectors = [][]byte{
	TransferWithAuthorizationSelector,
	crypto.Keccak256([]byte("transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)"))[:4],
}

// authorizers are the wallets whose authorization a reverted transaction
// may have carried: the authorizer its call names, when it called the
// token's transferWithAuthorization directly (the hosted page has the
// connected wallet sign, which need not be the one the session declares),
// and the session's declared payer.
func (v *EVMVerifier) authorizers(ctx context.Context, hash common.Hash, declared string) []common.Address {
	var out []common.Address
	if tx, _, err := v.client.TransactionByHash(ctx, hash); err == nil && tx.To() != nil && *tx.To() == v.usdc && len(tx.Data()) >= 36 {
		d := tx.Data()
		for _, sel := range transferWithAuthorizationSelectors {
			if string(d[:4]) == string(sel) {
				if a, ok := topicAddress(common.BytesToHash(d[4:36])); ok {
					out = append(out, a)
				}
				break
			}
		}
	}
	if p, err := ParseAddress(FamilyEVM, declared); err == nil {
		if a := common.HexToAddress(p); len(out) == 0 || out[0] != a {
			out = append(out, a)
		}
	}
	return out
}

// authorizationUse finds the transaction that used one of the authorizers'
// EIP-3009 authorization with this nonce, mined at or before block; zero
// if none (or no authorizer: no authorization to look for).
func (v *EVMVerifier) authorizationUse(ctx context.Context, authorizers []common.Address, nonce common.Hash, block uint64) (common.Hash, error) {
	if len(authorizers) == 0 {
		return common.Hash{}, nil
	}
	lf, ok := v.client.(ethereum.LogFilterer)
	if !ok {
		return common.Hash{}, nil
	}
	topics := make([]common.Hash, len(authorizers))
	for i, a := range authorizers {
		topics[i] = common.BytesToHash(a.Bytes())
	}
	from := block - min(block, authorizationLookback)
	logs, err := filterLogsSplitting(ctx, lf, ethereum.FilterQuery{
		FromBlock: bigUint(from), ToBlock: bigUint(block), Addresses: []common.Address{v.usdc},
		Topics: [][]common.Hash{{AuthorizationUsedTopic}, topics, {nonce}},
	})
	if err != nil {
		return common.Hash{}, fmt.Errorf("chain: %s: authorization logs %d-%d: %w", v.net.Name, from, block, err)
	}
	for _, l := range logs {
		if !l.Removed {
			return l.TxHash, nil
		}
	}
	return common.Hash{}, nil
}

// evmTransfers is what a receipt moved to or from the merchant in the
// canonical token, split by binding.
type evmTransfers struct {
	// bound is what reached the merchant through an EIP-3009 authorization
	// whose nonce is the session's reference; boundPayer its authorizer.
	bound      *big.Int
	boundPayer common.Address
	// plain is the net of every other transfer to (plus) and from (minus)
	// the merchant; plainPayer the sender of the first one. A transfer
	// authorized with another nonce is among them: the nonce is in refs,
	// and the store fails the session when it is another session's
	// reference (that session's payment); a nonce of the payer's own (a
	// gasless wallet, an agent paying by EIP-3009) makes it a plain
	// transfer like any other, not a payment lost to a failed session.
	plain      *big.Int
	plainPayer common.Address
	// refs are the nonces of every authorization used in the receipt.
	refs []string
}

// transfers reads the canonical token's logs of a receipt. USDC emits
// AuthorizationUsed(authorizer, nonce) immediately before the Transfer it
// authorizes (FiatToken v2: mark the nonce used, then transfer), so a
// Transfer from the authorizer that directly follows its AuthorizationUsed
// is the authorized one. Logs of any other contract are ignored.
func (v *EVMVerifier) transfers(r *types.Receipt, merchant common.Address, ref common.Hash) evmTransfers {
	out := evmTransfers{bound: new(big.Int), plain: new(big.Int)}
	var pending *struct {
		authorizer common.Address
		nonce      common.Hash
	}
	for _, l := range r.Logs {
		if l == nil || l.Removed || l.Address != v.usdc || len(l.Topics) == 0 {
			continue
		}
		if l.Topics[0] == AuthorizationUsedTopic && len(l.Topics) == 3 {
			a, ok := topicAddress(l.Topics[1])
			if ok {
				pending = &struct {
					authorizer common.Address
					nonce      common.Hash
				}{a, l.Topics[2]}
				out.refs = append(out.refs, l.Topics[2].Hex())
			}
			continue
		}
		if l.Topics[0] != transferTopic || len(l.Topics) != 3 || len(l.Data) != 32 {
			continue
		}
		auth := pending
		pending = nil
		from, okFrom := topicAddress(l.Topics[1])
		to, okTo := topicAddress(l.Topics[2])
		if !okFrom || !okTo || from == to {
			continue
		}
		value := new(big.Int).SetBytes(l.Data)
		// Without a reference (records, sessions older than references)
		// an authorized transfer counts like any other.
		authorized := auth != nil && auth.authorizer == from && ref != (common.Hash{})
		switch {
		case to == merchant && authorized && auth.nonce == ref:
			out.bound.Add(out.bound, value)
			if out.boundPayer == (common.Address{}) {
				out.boundPayer = from
			}
		case to == merchant:
			out.plain.Add(out.plain, value)
			if out.plainPayer == (common.Address{}) {
				out.plainPayer = from
			}
		case from == merchant:
			out.plain.Sub(out.plain, value)
		}
	}
	return out
}

// ParseEVMReference parses a session's EVM payment reference: 0x and 64
// hex digits, the nonce of its EIP-3009 authorization.
func ParseEVMReference(s string) (common.Hash, error) {
	if len(s) != 66 || (s[:2] != "0x" && s[:2] != "0X") {
		return common.Hash{}, errors.New("must be 0x and 64 hex digits")
	}
	b, err := hexutil.Decode("0x" + s[2:])
	if err != nil || len(b) != 32 {
		return common.Hash{}, errors.New("must be 0x and 64 hex digits")
	}
	return common.BytesToHash(b), nil
}

// topicAddress decodes an indexed address topic; the 12 high bytes must be zero.
func topicAddress(t common.Hash) (common.Address, bool) {
	for _, b := range t[:12] {
		if b != 0 {
			return common.Address{}, false
		}
	}
	return common.BytesToAddress(t[12:]), true
}

// canonicalHash returns the hash of the canonical block at height n. When the
// client exposes its JSON-RPC connection the hash is the one the node
// reports; otherwise it is computed from the header, which is exact for
// Ethereum but could differ on a chain whose header has fields go-ethereum
// does not know.
func (v *EVMVerifier) canonicalHash(ctx context.Context, n uint64) (common.Hash, error) {
	if raw, ok := v.client.(rawRPC); ok && raw.Client() != nil {
		var blk *struct {
			Hash   common.Hash    `json:"hash"`
			Number hexutil.Uint64 `json:"number"`
		}
		if err := raw.Client().CallContext(ctx, &blk, "eth_getBlockByNumber", hexutil.EncodeUint64(n), false); err != nil {
			return common.Hash{}, err
		}
		if blk == nil {
			return common.Hash{}, ethereum.NotFound
		}
		if uint64(blk.Number) != n {
			return common.Hash{}, fmt.Errorf("asked for block %d, got %d", n, blk.Number)
		}
		return blk.Hash, nil
	}
	h, err := v.client.HeaderByNumber(ctx, new(big.Int).SetUint64(n))
	if err != nil {
		return common.Hash{}, err
	}
	return h.Hash(), nil
}
