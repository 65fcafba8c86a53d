package chain

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"time"

	ethereum "github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	gethrpc "github.com/ethereum/go-ethereum/rpc"
	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
)

// Found is a transaction that carries a session's payment reference.
type Found struct {
	// Reference is the payment reference the transaction carries.
	Reference string
	// TxHash is the transaction hash (EVM) or signature (Solana).
	TxHash string
	// Block is the block (EVM) or slot (Solana) holding it.
	Block uint64
}

// ReferenceFinder finds payments by their session's reference, so a
// customer who paid and closed the page still completes.
type ReferenceFinder interface {
	// FindByReference looks for transactions of network that carry any of
	// refs. On EVM it scans the canonical token's AuthorizationUsed logs
	// from block `from` (0: the last few hundred blocks) to the head and
	// returns the next block to scan; on Solana it asks for the signatures
	// of each reference key (Solana Pay) and `from` is unused; a key the
	// node fails on is skipped, and the error that says so comes with what
	// the other keys found. Every transaction carrying a reference is
	// returned, in chain order: a reference proves nothing about who paid
	// (anyone may sign an EIP-3009 authorization with a session's
	// reference as its nonce, or carry its key), so the caller verifies
	// each before it takes one as the session's payment.
	FindByReference(ctx context.Context, network string, refs []string, from uint64) ([]Found, uint64, error)
}

// MaxLogRange bounds one eth_getLogs call (providers cap the range).
const MaxLogRange = 2000

// FindByReference implements [ReferenceFinder].
func (m *MultiVerifier) FindByReference(ctx context.Context, network string, refs []string, from uint64) ([]Found, uint64, error) {
	v, err := m.verifier(ctx, network)
	if err != nil {
		return nil, from, err
	}
	switch v := v.(type) {
	case *EVMVerifier:
		return v.findAuthorizations(ctx, refs, from)
	case *SolanaVerifier:
		found, err := v.findReferences(ctx, refs)
		return found, from, err
	}
	return nil, from, fmt.Errorf("%w: %s cannot search by reference", ErrUnknownNetwork, network)
}

// AuthorizationFinder lists every EIP-3009 authorization used on an EVM
// network's canonical token, whatever its nonce: the caller tells its own
// references apart (in its store), so no list of references bounds what
// it can find. (A list has a size: sessions opened by the thousand could
// push a genuine one out of it.)
type AuthorizationFinder interface {
	// FindAuthorizations returns the canonical token's AuthorizationUsed
	// logs from block `from` (0: the last few hundred blocks) to the head,
	// each as a Found whose Reference is the nonce, in chain order, and the
	// next block to scan.
	FindAuthorizations(ctx context.Context, network string, from uint64) ([]Found, uint64, error)
}

// FindAuthorizations implements [AuthorizationFinder].
func (m *MultiVerifier) FindAuthorizations(ctx context.Context, network string, from uint64) ([]Found, uint64, error) {
	v, err := m.verifier(ctx, network)
	if err != nil {
		return nil, from, err
	}
	ev, ok := v.(*EVMVerifier)
	if !ok {
		return nil, from, fmt.Errorf("%w: %s has no EIP-3009 authorizations", ErrUnknownNetwork, network)
	}
	return ev.findAuthorizations(ctx, nil, from)
}

// findAuthorizations lists the AuthorizationUsed logs whose nonce is one of
// refs (nil: every one) from block `from`.
func (v *EVMVerifier) findAuthorizations(ctx context.Context, refs []string, from uint64) ([]Found, uint64, error) {
	lf, ok := v.client.(ethereum.LogFilterer)
	if !ok {
		return nil, from, fmt.Errorf("chain: %s: the RPC client cannot filter logs", v.net.Name)
	}
	head, err := v.client.BlockNumber(ctx)
	if err != nil {
		return nil, from, fmt.Errorf("chain: %s: head block: %w", v.net.Name, err)
	}
	from = resumeFrom(from, head)
	if from == 0 && head > 300 {
		from = head - 300
	}
	if from > head {
		return nil, from, nil
	}
	// The blocks read before that are still short of the network's
	// confirmations are read again: a reorg may have put a payment into
	// one of them after it was read (the caller's store skips what it
	// attached already).
	if conf := uint64(max(v.net.Confirmations, 1)); head+1 >= conf {
		from = min(from, head+1-conf)
	}
	to := head
	if to-from >= MaxLogRange {
		to = from + MaxLogRange - 1
	}
	// The topic lists of the calls: refs in groups of 200 (a bound on one
	// call's filter), or one call without a nonce filter.
	var groups [][]common.Hash
	if refs == nil {
		groups = [][]common.Hash{nil}
	} else {
		nonces := make([]common.Hash, 0, len(refs))
		for _, r := range refs {
			if h, err := ParseEVMReference(r); err == nil {
				nonces = append(nonces, h)
			}
		}
		for start := 0; start < len(nonces); start += 200 {
			groups = append(groups, nonces[start:min(start+200, len(nonces))])
		}
		if len(groups) == 0 {
			return nil, to + 1, nil
		}
	}
	var found []Found
	for _, group := range groups {
		logs, err := filterLogsSplitting(ctx, lf, ethereum.FilterQuery{
			FromBlock: bigUint(from), ToBlock: bigUint(to), Addresses: []common.Address{v.usdc},
			Topics: [][]common.Hash{{AuthorizationUsedTopic}, nil, group},
		})
		if err != nil {
			return nil, from, fmt.Errorf("chain: %s: logs %d-%d: %w", v.net.Name, from, to, err)
		}
		for _, l := range logs {
			if l.Removed || len(l.Topics) != 3 {
				continue
			}
			found = append(found, Found{Reference: l.Topics[2].Hex(), TxHash: l.TxHash.Hex(), Block: l.BlockNumber})
		}
	}
	return found, to + 1, nil
}

// solanaSignatureLister is the part of a Solana RPC client that lists the
// transactions touching an account; *rpc.Client satisfies it.
type solanaSignatureLister interface {
	GetSignaturesForAddressWithOpts(ctx context.Context, account solana.PublicKey, opts *rpc.GetSignaturesForAddressOpts) ([]*rpc.TransactionSignature, error)
}

// solanaSignaturesPerReference bounds the signatures asked of one reference
// key per pass (the newest ones; the node's maximum is 1,000). A reference
// is a fresh key per session, so only its payments and whatever a stranger
// adds to them touch it.
const solanaSignaturesPerReference = 1000

func (v *SolanaVerifier) findReferences(ctx context.Context, refs []string) ([]Found, error) {
	sl, ok := v.client.(solanaSignatureLister)
	if !ok {
		return nil, fmt.Errorf("chain: %s: the RPC client cannot list signatures", v.net.Name)
	}
	var found []Found
	var failed []error
	limit := solanaSignaturesPerReference
	for _, r := range refs {
		key, err := solana.PublicKeyFromBase58(r)
		if err != nil {
			continue
		}
		sigs, err := sl.GetSignaturesForAddressWithOpts(ctx, key, &rpc.GetSignaturesForAddressOpts{Limit: &limit, Commitment: rpc.CommitmentConfirmed})
		if err != nil {
			// One reference the node fails on must not hide the others'
			// payments (it is asked again on the next pass); a node that
			// fails on all of them is an error.
			failed = append(failed, fmt.Errorf("signatures of %s: %w", r, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		// Every successful one, oldest first: anyone can put a session's
		// reference key in a transfer of their own, so the first is not
		// necessarily the customer's; the caller judges each.
		for i := len(sigs) - 1; i >= 0; i-- {
			if sigs[i] == nil || sigs[i].Err != nil {
				continue
			}
			found = append(found, Found{Reference: r, TxHash: sigs[i].Signature.String(), Block: sigs[i].Slot})
		}
	}
	if len(failed) > 0 {
		return found, fmt.Errorf("chain: %s: %d of %d references not searched: %w", v.net.Name, len(failed), len(refs), errors.Join(failed...))
	}
	return found, nil
}

// SolanaPaymentScanner finds, on a Solana network, the references carried
// by the transactions that reached merchant wallets' USDC accounts: a scan
// whose cost is the wallets' and their new transactions', not the watched
// sessions', for when there are more sessions than a scan by reference
// asks about (FindByReference: one call per reference).
type SolanaPaymentScanner interface {
	// FindReferencesPaidTo reads the signatures of each wallet's associated
	// USDC account newer than after[wallet] (the newest 1,000 when none),
	// none whose block time is before since (when set), then each new
	// transaction, and returns every read-only, non-signer
	// account key of the successful ones as a Found (Reference: the key;
	// most are not references at all, the caller keeps its own), and the
	// newest signature read per wallet. A wallet the node fails on keeps
	// what was read and its place after it (the rest is read on the next
	// pass), and the error says so.
	FindReferencesPaidTo(ctx context.Context, network string, wallets []string, after map[string]string, since time.Time) ([]Found, map[string]string, error)
}

// FindReferencesPaidTo implements [SolanaPaymentScanner]: FindPaymentsTo's
// reads, without the transfers.
func (m *MultiVerifier) FindReferencesPaidTo(ctx context.Context, network string, wallets []string, after map[string]string, since time.Time) ([]Found, map[string]string, error) {
	found, _, newest, err := m.FindPaymentsTo(ctx, network, wallets, after, since)
	return found, newest, err
}

// SolanaTransferScanner is a SolanaPaymentScanner that also reports, from
// the same reads, the USDC each transaction brought a wallet: a plain
// transfer (a wallet's "send", or any payment that carries no reference)
// is seen as on EVM, where the token's Transfer logs show every one.
type SolanaTransferScanner interface {
	// FindPaymentsTo is FindReferencesPaidTo, and the transactions read
	// that raised a wallet's USDC balance, as Incoming (From: the owner
	// whose USDC fell the most).
	FindPaymentsTo(ctx context.Context, network string, wallets []string, after map[string]string, since time.Time) ([]Found, []Incoming, map[string]string, error)
}

// FindPaymentsTo implements [SolanaTransferScanner].
func (m *MultiVerifier) FindPaymentsTo(ctx context.Context, network string, wallets []string, after map[string]string, since time.Time) ([]Found, []Incoming, map[string]string, error) {
	v, err := m.verifier(ctx, network)
	if err != nil {
		return nil, nil, nil, err
	}
	sv, ok := v.(*SolanaVerifier)
	if !ok {
		return nil, nil, nil, fmt.Errorf("%w: %s is not a Solana network", ErrUnknownNetwork, network)
	}
	type read struct {
		found []Found
		in    *Incoming
	}
	reads, newest, err := eachWalletTransaction(ctx, sv, wallets, after, since,
		func(owner solana.PublicKey, sig *rpc.TransactionSignature, tx *rpc.GetTransactionResult) []read {
			decoded, _ := tx.Transaction.GetTransaction()
			_, keys := references(decoded, tx.Meta, solana.PublicKey{})
			var r read
			for _, k := range keys {
				r.found = append(r.found, Found{Reference: k, TxHash: sig.Signature.String(), Block: sig.Slot})
			}
			if received, payer, _, derr := sv.delta(tx, owner); derr == nil && received.Sign() > 0 {
				r.in = &Incoming{TxHash: sig.Signature.String(), From: payer, To: owner.String(), Units: received.String(), Block: sig.Slot, Refs: keys}
			}
			return []read{r}
		})
	var found []Found
	var in []Incoming
	for _, r := range reads {
		found = append(found, r.found...)
		if r.in != nil {
			in = append(in, *r.in)
		}
	}
	return found, in, newest, err
}

// eachWalletTransaction reads, oldest first, each successful transaction
// that touched a wallet's associated USDC account after its place
// after[wallet] (every one since it), or, for a wallet without a place, the
// newest solanaSignaturesPerReference (when since is set: every one back to
// since, none whose block time is before it), and returns what read makes
// of them and the place reached per wallet (see walletPlace). At most
// solanaReadsPerPass transactions are read per wallet and pass, and at most
// solanaListPages pages of signatures listed: a wallet with more new ones
// (a busy wallet, a week read back after a restart, or a stranger's flood
// of dust transfers into it) is listed down over the next passes and read
// from its oldest, so none is skipped and none read twice. A wallet the
// node fails on (its list, or one of its transactions) keeps what was read
// and its place after it, so the next pass reads on from there; the error
// says so.
func eachWalletTransaction[T any](ctx context.Context, v *SolanaVerifier, wallets []string, after map[string]string, since time.Time,
	read func(owner solana.PublicKey, sig *rpc.TransactionSignature, tx *rpc.GetTransactionResult) []T) ([]T, map[string]string, error) {
	sl, ok := v.client.(solanaSignatureLister)
	if !ok {
		return nil, nil, fmt.Errorf("chain: %s: the RPC client cannot list signatures", v.net.Name)
	}
	newest := map[string]string{}
	var out []T
	var failed []error
	for _, w := range wallets {
		owner, err := solana.PublicKeyFromBase58(w)
		if err != nil {
			continue
		}
		ata, _, err := solana.FindAssociatedTokenAddress(owner, v.mint)
		if err != nil {
			continue
		}
		from, below := splitPlace(after[w])
		sigs, lower, err := walletSignatures(ctx, sl, ata, from, below, since)
		if err != nil {
			failed = append(failed, fmt.Errorf("signatures of %s: %w", w, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if lower != "" {
			// More than a pass lists: the listing goes on down from there
			// on the next pass; nothing newer is read before what is older.
			newest[w] = joinPlace(from, lower)
			continue
		}
		if sig, err := solana.SignatureFromBase58(below); err == nil {
			// Everything older than below is listed: below itself (listed
			// on an earlier pass, not read) comes next, then newer ones.
			sigs = append([]*rpc.TransactionSignature{{Signature: sig}}, sigs...)
		}
		// Oldest first; place is the newest signature read so far, where a
		// failure or the pass's bound leaves the wallet (the next pass reads
		// on from there, still below what the listing left for later).
		place, complete, reads, i := from, true, 0, len(sigs)-1
		for ; i >= 0; i-- {
			sig := sigs[i]
			if sig == nil {
				continue
			}
			if sig.Err == nil && (since.IsZero() || sig.BlockTime == nil || !sig.BlockTime.Time().Before(since)) {
				if reads == solanaReadsPerPass {
					break
				}
				reads++
				tx, err := v.get(ctx, sig.Signature, rpc.CommitmentConfirmed)
				if err != nil {
					failed = append(failed, err)
					complete = false
					break
				}
				if tx.Meta == nil || tx.Meta.Err == nil {
					out = append(out, read(owner, sig, tx)...)
				}
			}
			place = sig.Signature.String()
		}
		if i >= 0 {
			place = joinPlace(place, below)
		}
		if place != "" {
			newest[w] = place
		}
		if !complete && ctx.Err() != nil {
			break // out of time: the others keep their places
		}
	}
	if len(failed) > 0 {
		return out, newest, fmt.Errorf("chain: %s: %d wallets not read whole: %w", v.net.Name, len(failed), errors.Join(failed...))
	}
	return out, newest, nil
}

// A wallet's place is the signature read last ("": none yet) or, while the
// wallet has more new signatures than a pass lists, "from|below": those
// newer than from (back to the scan's since when from is "") and older than
// below are still to list and read, then below, then the newer ones. The
// callers keep it as it is given.
func splitPlace(p string) (from, below string) {
	from, below, _ = strings.Cut(p, "|")
	return from, below
}

func joinPlace(from, below string) string {
	if below == "" {
		return from
	}
	return from + "|" + below
}

// solanaListPages bounds the pages of signatures listed per wallet and
// pass: ten thousand signatures, ten calls, as a pass must end (a node
// limiting its rate). A listing longer than that goes on over the next
// passes (walletPlace), nothing read meanwhile.
const solanaListPages = 10

// solanaReadsPerPass bounds the transactions read per wallet and pass
// (each is a getTransaction): the rest wait for the next pass, in order.
const solanaReadsPerPass = 1000

// walletSignatures lists an account's signatures newer than the signature
// from and older than below (when set), page after page, or, when neither
// is set, the newest solanaSignaturesPerReference (when since is set: page
// after page back to since; a signature without a block time counts as
// within it), newest first. A listing that would take more than
// solanaListPages pages answers none, and lower: the oldest signature
// listed, where the next pass goes on.
func walletSignatures(ctx context.Context, sl solanaSignatureLister, account solana.PublicKey, from, below string, since time.Time) (sigs []*rpc.TransactionSignature, lower string, err error) {
	limit := solanaSignaturesPerReference
	opts := &rpc.GetSignaturesForAddressOpts{Limit: &limit, Commitment: rpc.CommitmentConfirmed}
	bounded := !since.IsZero()
	if sig, err := solana.SignatureFromBase58(from); err == nil {
		opts.Until, bounded = sig, true
	}
	if sig, err := solana.SignatureFromBase58(below); err == nil {
		opts.Before, bounded = sig, true
	}
	var all []*rpc.TransactionSignature
	for page := 0; ; page++ {
		got, err := sl.GetSignaturesForAddressWithOpts(ctx, account, opts)
		if err != nil {
			return nil, "", err
		}
		all = append(all, got...)
		if !bounded || len(got) < limit {
			return all, "", nil
		}
		var last *rpc.TransactionSignature
		for i := len(got) - 1; i >= 0 && last == nil; i-- {
			last = got[i]
		}
		if last == nil {
			return nil, "", fmt.Errorf("a page of %d signatures without one", len(got))
		}
		if !since.IsZero() && last.BlockTime != nil && last.BlockTime.Time().Before(since) {
			return all, "", nil
		}
		if page+1 >= solanaListPages {
			return nil, last.Signature.String(), nil
		}
		opts.Before = last.Signature
	}
}

func bigUint(n uint64) *big.Int { return new(big.Int).SetUint64(n) }

// tooMuchAsked reads a node's refusal of eth_getLogs as "too many results
// or too wide a range" (providers word it their own way: "query returned
// more than 10000 results", "Log response size exceeded", "block range is
// too wide", "exceed maximum block range"), not as a rate limit or a
// missing block, which smaller ranges would only make worse.
func tooMuchAsked(msg string) bool {
	m := strings.ToLower(msg)
	if strings.Contains(m, "rate") || strings.Contains(m, "requests") {
		return false
	}
	for _, s := range []string{"more than", "too many", "too large", "too wide", "range", "exceed", "response size", "limit"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// filterLogsSplitting asks for q's logs; a range the node refuses (an
// error answered, not a failed call: providers cap the logs one call
// returns, 10,000 at the commonest, or its range) is asked again in
// halves, down to single blocks, so a busy token's unfiltered logs are
// read whole.
func filterLogsSplitting(ctx context.Context, lf ethereum.LogFilterer, q ethereum.FilterQuery) ([]types.Log, error) {
	logs, err := lf.FilterLogs(ctx, q)
	var refused gethrpc.Error // the node answered with an error (not a transport failure)
	if err == nil || ctx.Err() != nil || !errors.As(err, &refused) || !tooMuchAsked(refused.Error()) {
		return logs, err
	}
	from, to := q.FromBlock.Uint64(), q.ToBlock.Uint64()
	if to <= from {
		return nil, err
	}
	mid := from + (to-from)/2
	lo, hi := q, q
	lo.ToBlock, hi.FromBlock = bigUint(mid), bigUint(mid+1)
	a, err := filterLogsSplitting(ctx, lf, lo)
	if err != nil {
		return nil, err
	}
	b, err := filterLogsSplitting(ctx, lf, hi)
	if err != nil {
		return nil, err
	}
	return append(a, b...), nil
}

// resumeFrom is the block a scan resumes at: from, unless the chain is
// behind it by more than a few blocks (a dev chain started afresh under a
// stored cursor, a node of another chain, a node far behind): then the
// recent blocks (0), scanned again harmlessly (what was attached stays
// attached). A node a block or two behind is waited for.
func resumeFrom(from, head uint64) uint64 {
	if from > head+maxCursorAhead {
		return 0
	}
	return from
}

// maxCursorAhead is how far a cursor may be past the node's head before
// the scan starts again at the recent blocks.
const maxCursorAhead = 10

// Incoming is a transfer of the canonical token to a watched wallet.
type Incoming struct {
	TxHash string
	From   string
	To     string
	// Units is the amount in integer token units (decimal string).
	Units string
	Block uint64
	// Refs (Solana) are the transaction's read-only non-signer account
	// keys, as VerifyResult.Refs: a Solana Pay reference is among them.
	// Empty on EVM, whose Transfer logs do not say.
	Refs []string `json:",omitempty"`
}

// TransferFinder lists token transfers to wallets, so money that reaches
// a merchant without a session is seen.
type TransferFinder interface {
	// FindTransfersTo returns the canonical token's transfers to any of
	// wallets in blocks from `from` (0: the last few hundred) up to the
	// newest block with the network's confirmations, and the next block
	// to scan. EVM networks only.
	FindTransfersTo(ctx context.Context, network string, wallets []string, from uint64) ([]Incoming, uint64, error)
}

// FindTransfersTo implements [TransferFinder].
func (m *MultiVerifier) FindTransfersTo(ctx context.Context, network string, wallets []string, from uint64) ([]Incoming, uint64, error) {
	v, err := m.verifier(ctx, network)
	if err != nil {
		return nil, from, err
	}
	ev, ok := v.(*EVMVerifier)
	if !ok {
		return nil, from, fmt.Errorf("%w: %s: transfers are scanned on EVM networks only", ErrUnknownNetwork, network)
	}
	return ev.findTransfers(ctx, wallets, from, time.Time{}, topicTo)
}

// OutgoingFinder lists token transfers out of wallets, so a refund the
// merchant paid without submitting its hash is still found.
type OutgoingFinder interface {
	// FindTransfersFrom returns the canonical token's transfers out of any
	// of wallets after cur and up to what the network counts as confirmed,
	// and the cursor to resume at. From cur's zero value it reads from
	// since (EVM: the first block mined at or after it; Solana: none whose
	// block time is before it), or the recent transfers when since is zero.
	// EVM reads at most MaxLogRange blocks a call. On Solana each wallet's
	// new transactions are read, oldest first, and a transaction's
	// transfers are the USDC its other owners gained while the wallet's
	// balance fell; a wallet the node fails on keeps what was read and its
	// place after it, and the error says so.
	FindTransfersFrom(ctx context.Context, network string, wallets []string, since time.Time, cur TransferCursor) ([]Incoming, TransferCursor, error)
}

// TransferCursor is where a scan of transfers stands: the next block to
// read (EVM), or each wallet's newest signature read (Solana).
type TransferCursor struct {
	Block uint64
	After map[string]string
}

// firstBlockAt finds the first block up to last mined at or after t (last
// + 1 when none is), by a binary search over the headers' times.
func (v *EVMVerifier) firstBlockAt(ctx context.Context, t time.Time, last uint64) (uint64, error) {
	lo, hi := uint64(0), last+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		h, err := v.client.HeaderByNumber(ctx, bigUint(mid))
		if err != nil {
			return 0, fmt.Errorf("chain: %s: header %d: %w", v.net.Name, mid, err)
		}
		if time.Unix(int64(h.Time), 0).Before(t) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// FindTransfersFrom implements [OutgoingFinder].
func (m *MultiVerifier) FindTransfersFrom(ctx context.Context, network string, wallets []string, since time.Time, cur TransferCursor) ([]Incoming, TransferCursor, error) {
	v, err := m.verifier(ctx, network)
	if err != nil {
		return nil, cur, err
	}
	switch v := v.(type) {
	case *EVMVerifier:
		found, next, err := v.findTransfers(ctx, wallets, cur.Block, since, topicFrom)
		return found, TransferCursor{Block: next}, err
	case *SolanaVerifier:
		found, newest, err := eachWalletTransaction(ctx, v, wallets, cur.After, since, v.outgoing)
		return found, TransferCursor{After: newest}, err
	}
	return nil, cur, fmt.Errorf("%w: %s: transfers are not scanned on this network", ErrUnknownNetwork, network)
}

// outgoing reads a transaction of the owner's USDC account as the
// transfers out of it: each other owner that gained USDC while the owner's
// balance fell received what it gained (a transaction moving the owner's
// USDC to several wallets is several transfers).
func (v *SolanaVerifier) outgoing(owner solana.PublicKey, sig *rpc.TransactionSignature, tx *rpc.GetTransactionResult) []Incoming {
	deltas, _, err := v.ownerDeltas(tx)
	if err != nil || deltas[owner] == nil || deltas[owner].Sign() >= 0 {
		return nil
	}
	var out []Incoming
	for to, d := range deltas {
		if to != owner && d.Sign() > 0 {
			out = append(out, Incoming{TxHash: sig.Signature.String(), From: owner.String(), To: to.String(), Units: d.String(), Block: sig.Slot})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].To < out[j].To })
	return out
}

// Where a Transfer log names a wallet: its second topic is the sender,
// its third the receiver.
const (
	topicFrom = 1
	topicTo   = 2
)

// findTransfers lists the canonical token's transfers whose sender
// (topicFrom) or receiver (topicTo) is one of wallets; a scan from 0 with
// since set starts at the first block mined at or after since (not at the
// last few hundred).
func (v *EVMVerifier) findTransfers(ctx context.Context, wallets []string, from uint64, since time.Time, side int) ([]Incoming, uint64, error) {
	lf, ok := v.client.(ethereum.LogFilterer)
	if !ok {
		return nil, from, fmt.Errorf("chain: %s: the RPC client cannot filter logs", v.net.Name)
	}
	head, err := v.client.BlockNumber(ctx)
	if err != nil {
		return nil, from, fmt.Errorf("chain: %s: head block: %w", v.net.Name, err)
	}
	conf := max(v.net.Confirmations, 1)
	if head+1 < conf {
		return nil, from, nil
	}
	last := head + 1 - conf // newest block with enough confirmations
	from = resumeFrom(from, last)
	switch {
	case from == 0 && !since.IsZero():
		if from, err = v.firstBlockAt(ctx, since, last); err != nil {
			return nil, 0, err
		}
	case from == 0 && last > 300:
		from = last - 300
	}
	if from > last {
		return nil, from, nil
	}
	to := last
	if to-from >= MaxLogRange {
		to = from + MaxLogRange - 1
	}
	var topics []common.Hash
	for _, w := range wallets {
		if common.IsHexAddress(w) {
			topics = append(topics, common.BytesToHash(common.HexToAddress(w).Bytes()))
		}
	}
	var out []Incoming
	for start := 0; start < len(topics); start += 200 {
		end := min(start+200, len(topics))
		filter := [][]common.Hash{{transferTopic}, nil, nil}
		filter[side] = topics[start:end]
		// Split when the node refuses the range (a busy wallet's logs).
		logs, err := filterLogsSplitting(ctx, lf, ethereum.FilterQuery{
			FromBlock: bigUint(from), ToBlock: bigUint(to), Addresses: []common.Address{v.usdc}, Topics: filter,
		})
		if err != nil {
			return nil, from, fmt.Errorf("chain: %s: logs %d-%d: %w", v.net.Name, from, to, err)
		}
		for _, l := range logs {
			if l.Removed || len(l.Topics) != 3 || len(l.Data) != 32 {
				continue
			}
			f, okF := topicAddress(l.Topics[1])
			t, okT := topicAddress(l.Topics[2])
			if !okF || !okT || f == t {
				continue
			}
			out = append(out, Incoming{TxHash: l.TxHash.Hex(), From: f.Hex(), To: t.Hex(),
				Units: new(big.Int).SetBytes(l.Data).String(), Block: l.BlockNumber})
		}
	}
	return out, to + 1, nil
}
