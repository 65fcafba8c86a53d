package chain

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"sync"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
)

// SolanaClient is the part of a Solana JSON-RPC client the Solana verifier
// uses; *rpc.Client satisfies it.
type SolanaClient interface {
	GetTransaction(ctx context.Context, sig solana.Signature, opts *rpc.GetTransactionOpts) (*rpc.GetTransactionResult, error)
}

// DialSolana returns a solana-go RPC client for n.RPCURL. It is the default
// [SolanaDialer]; nothing is sent until the first verification.
func DialSolana(_ context.Context, n Network) (SolanaClient, error) {
	if _, err := url.ParseRequestURI(n.RPCURL); err != nil {
		return nil, fmt.Errorf("bad RPC URL: %w", err)
	}
	return rpc.New(n.RPCURL), nil
}

// SolanaVerifier verifies USDC payments on one Solana cluster.
//
// It reads the transaction at the finalized commitment (so a found
// transaction cannot be rolled back and no confirmation counting is needed),
// with maxSupportedTransactionVersion 0 so that versioned transactions with
// address lookup tables are returned. The amount received is the raw-amount
// delta, between meta.preTokenBalances and meta.postTokenBalances, of token
// accounts of the network's USDC mint that belong to the classic SPL Token
// program and are owned by the merchant wallet; a token account missing from
// the pre balances (created in the same transaction) starts at 0. Balances of
// any other mint or program (Token-2022 look-alikes included) are ignored.
type SolanaVerifier struct {
	net    Network
	client SolanaClient
	mint   solana.PublicKey
	// follows remembers, per reference, what following an unseen
	// signature ruled out, and its pace.
	follows recent[string, sigSet]
	// Now is the clock of the search's pace (nil: time.Now).
	Now func() time.Time
}

// NewSolanaVerifier returns a verifier for the Solana network n.
func NewSolanaVerifier(n Network, client SolanaClient) (*SolanaVerifier, error) {
	if n.Family != FamilySolana {
		return nil, fmt.Errorf("%w: %s is not a Solana network", ErrUnknownNetwork, n.Name)
	}
	mint, err := solana.PublicKeyFromBase58(n.USDC)
	if err != nil {
		return nil, fmt.Errorf("chain: %s: bad USDC mint %q: %w", n.Name, n.USDC, err)
	}
	return &SolanaVerifier{net: n, client: client, mint: mint}, nil
}

// Network returns the network this verifier checks.
func (v *SolanaVerifier) Network() Network { return v.net }

// Verify implements [Verifier].
func (v *SolanaVerifier) Verify(ctx context.Context, req VerifyRequest) (VerifyResult, error) {
	return v.verify(ctx, req, !req.Alone)
}

// verify checks req's transaction; follow lets an unseen one be followed to
// another transaction of the payer's carrying the session's reference
// (once: that one is not followed).
func (v *SolanaVerifier) verify(ctx context.Context, req VerifyRequest, follow bool) (VerifyResult, error) {
	if req.Network != "" && req.Network != v.net.Name {
		return VerifyResult{}, fmt.Errorf("%w: verifier of %s asked about %s", ErrUnknownNetwork, v.net.Name, req.Network)
	}
	sigStr, err := ParseTxHash(FamilySolana, req.TxHash)
	if err != nil {
		return VerifyResult{}, fmt.Errorf("%w: txHash: %v", ErrInvalidRequest, err)
	}
	merchantStr, err := ParseAddress(FamilySolana, req.MerchantAddress)
	if err != nil {
		return VerifyResult{}, fmt.Errorf("%w: merchantAddress: %v", ErrInvalidRequest, err)
	}
	expected, err := parseExpected(req.ExpectedUnits)
	if err != nil {
		return VerifyResult{}, err
	}
	sig := solana.MustSignatureFromBase58(sigStr)
	merchant := solana.MustPublicKeyFromBase58(merchantStr)
	var ref solana.PublicKey
	if req.Reference != "" {
		if ref, err = solana.PublicKeyFromBase58(req.Reference); err != nil {
			return VerifyResult{}, fmt.Errorf("%w: reference: %v", ErrInvalidRequest, err)
		}
	}

	required := v.net.Confirmations
	if required == 0 {
		required = 1
	}
	res := VerifyResult{Required: required, Verdict: VerdictPending}

	tx, err := v.get(ctx, sig, rpc.CommitmentFinalized)
	if errors.Is(err, rpc.ErrNotFound) {
		// Not final yet; tell the caller whether it is at least confirmed
		// (the session moves to txn_confirming).
		conf, cerr := v.get(ctx, sig, rpc.CommitmentConfirmed)
		switch {
		case errors.Is(cerr, rpc.ErrNotFound):
			res.Message = "transaction not found on chain yet"
			if follow && !ref.IsZero() {
				return v.replacement(ctx, req, sig, ref, res, false)
			}
		case cerr != nil:
			return VerifyResult{}, cerr
		default:
			res.Seen = true
			res.BlockNumber = conf.Slot
			res.Message = "transaction confirmed, waiting for finalization"
		}
		return res, nil
	}
	if err != nil {
		return VerifyResult{}, err
	}
	res.Seen = true
	res.BlockNumber = tx.Slot
	res.Confirmations = required

	if tx.Meta == nil {
		return VerifyResult{}, fmt.Errorf("chain: %s: transaction %s has no meta in the RPC answer", v.net.Name, sigStr)
	}
	var decoded *solana.Transaction
	if tx.Transaction != nil {
		decoded, _ = tx.Transaction.GetTransaction()
		// Guard against an RPC answering for another signature.
		if decoded != nil && len(decoded.Signatures) > 0 && decoded.Signatures[0] != sig {
			return VerifyResult{}, fmt.Errorf("chain: %s: rpc returned transaction %s for %s", v.net.Name, decoded.Signatures[0], sigStr)
		}
	}
	if tx.Meta.Err != nil {
		res.Verdict, res.Reason = VerdictFailed, ReasonTxReverted
		res.Message = fmt.Sprintf("transaction failed on chain: %v", tx.Meta.Err)
		res.ReceivedUnits = "0"
		// Paid nothing: not the session's payment, whoever signed it
		// (VerifyResult.Foreign).
		res.Foreign = req.PayerAddress != ""
		if tx.BlockTime != nil {
			res.BlockTime = tx.BlockTime.Time().UTC()
		}
		if follow && !ref.IsZero() && !sentBy(decoded, req.PayerAddress) {
			return v.paidNothing(ctx, req, sig, ref, res)
		}
		return res, nil
	}
	carries, refs := references(decoded, tx.Meta, ref)
	res.Refs = refs
	res.Bound = carries

	received, payer, ignored, err := v.delta(tx, merchant)
	if err != nil {
		return VerifyResult{}, fmt.Errorf("chain: %s: transaction %s: %w", v.net.Name, sigStr, err)
	}
	res.ReceivedUnits = nonNegative(received)
	res.Payer = payer
	if tx.BlockTime != nil {
		res.BlockTime = tx.BlockTime.Time().UTC()
	}

	// A short payment is foreign when neither the USDC received nor the
	// fee came from the declared wallet; one that paid nothing always is
	// (chain.VerifyResult.Foreign).
	foreign := !sentBy(decoded, req.PayerAddress) && (payer == "" || payer != req.PayerAddress)
	switch {
	case received.Sign() <= 0:
		res.Verdict, res.Reason, res.Foreign = VerdictFailed, ReasonInvalidTransfer, req.PayerAddress != ""
		res.Message = fmt.Sprintf("no USDC (mint %s, SPL Token program) received by %s in this transaction", v.mint, merchant)
		if ignored != "" {
			res.Message += "; ignored " + ignored
		}
		if follow && !ref.IsZero() {
			return v.paidNothing(ctx, req, sig, ref, res)
		}
	case received.Cmp(expected) < 0:
		res.Verdict, res.Reason, res.Foreign = VerdictFailed, ReasonInvalidTransfer, foreign
		res.Message = fmt.Sprintf("merchant received %s units, expected %s", received, expected)
	case received.Cmp(expected) > 0:
		res.Verdict = VerdictComplete
		res.Message = fmt.Sprintf("merchant received %s units, %s more than expected", received, new(big.Int).Sub(received, expected))
	default:
		res.Verdict = VerdictComplete
		res.Message = fmt.Sprintf("merchant received %s units", received)
	}
	if res.Verdict == VerdictComplete && req.PayerAddress != "" && payer != req.PayerAddress {
		res.SentByDeclared = sentBy(decoded, req.PayerAddress) // BindToSession: a router's transfer it sent
	}
	return res, nil
}

// paidNothing answers for a submitted transaction that paid the merchant
// nothing: final and moving no USDC there, or failed and not signed by the
// declared wallet (any such signature, submitted by anyone who knows the
// session's id). As on EVM, the session's own payment is looked for first,
// at every check for followBurst, and judged instead when found; failed is
// the answer only after that.
func (v *SolanaVerifier) paidNothing(ctx context.Context, req VerifyRequest, sig solana.Signature, ref solana.PublicKey, failed VerifyResult) (VerifyResult, error) {
	if _, ok := v.client.(solanaSignatureLister); !ok {
		return failed, nil // nothing to search with
	}
	pending := failed
	pending.Verdict, pending.Reason, pending.Foreign = VerdictPending, "", false
	pending.Message = failed.Message + "; looking for the session's own payment before failing it"
	st := v.follows.get(ref.String())
	if !st.burstOver(clock(v.Now)) {
		return v.replacement(ctx, req, sig, ref, pending, false)
	}
	// The burst is over: one search whatever the pace (a payment that
	// landed since is still taken), and pending while one it found is
	// not final yet.
	out, err := v.replacement(ctx, req, sig, ref, pending, true)
	if err != nil || out.PaidBy != "" || st.isWaiting() {
		return out, err
	}
	return failed, nil
}

// sentBy says whether tx's fee payer (its first signer) is declared, a
// session's payer wallet ("" or an unreadable transaction: taken as sent by
// it, so its verdict stands).
func sentBy(tx *solana.Transaction, declared string) bool {
	if declared == "" || tx == nil || len(tx.Message.AccountKeys) == 0 {
		return true
	}
	return tx.Message.AccountKeys[0].String() == declared
}

// solanaFollowPages bounds the pages of a session's reference's
// signatures read when its submitted transaction is unseen.
const solanaFollowPages = 5

// replacement answers for a submitted transaction the chain has not got
// (it may still land, or its blockhash expired and the payer paid again
// with a new transaction: a new signature). A finalized transaction that
// carries the session's reference and pays the session in full, or else
// one from the declared wallet (the customer's own short payment fails
// visibly), is judged instead (PaidBy); a stranger's carrying the
// reference with less is never followed, so it cannot fail the session.
// Signatures ruled out are remembered per reference and not read again.
//
// force searches whatever the pace (paidNothing's last search).
func (v *SolanaVerifier) replacement(ctx context.Context, req VerifyRequest, sig solana.Signature, ref solana.PublicKey, unseen VerifyResult, force bool) (VerifyResult, error) {
	sl, ok := v.client.(solanaSignatureLister)
	if !ok {
		return unseen, nil
	}
	follow := v.follows.get(ref.String())
	if !follow.due(clock(v.Now)) && !force {
		return unseen, nil
	}
	// Every signature back to the session's start (pages of a thousand, a
	// few at most): a stranger's flood of transactions carrying the
	// reference cannot push the payer's out of view.
	var sigs []*rpc.TransactionSignature
	limit := solanaSignaturesPerReference
	opts := &rpc.GetSignaturesForAddressOpts{Limit: &limit, Commitment: rpc.CommitmentFinalized}
	for page := 0; page < solanaFollowPages; page++ {
		got, err := sl.GetSignaturesForAddressWithOpts(ctx, ref, opts)
		if err != nil {
			return VerifyResult{}, fmt.Errorf("chain: %s: signatures of reference %s: %w", v.net.Name, ref, err)
		}
		sigs = append(sigs, got...)
		if len(got) < limit || got[len(got)-1] == nil {
			break
		}
		last := got[len(got)-1]
		if !req.NotBefore.IsZero() && last.BlockTime != nil && last.BlockTime.Time().Before(req.NotBefore) {
			break
		}
		opts.Before = last.Signature
	}
	var own *VerifyResult
	waiting := false
	defer func() { follow.wait(waiting) }()
	for i := len(sigs) - 1; i >= 0; i-- { // oldest first
		if sigs[i] == nil || sigs[i].Err != nil || sigs[i].Signature == sig || follow.has(sigs[i].Signature.String()) {
			continue
		}
		again := req
		again.TxHash = sigs[i].Signature.String()
		out, err := v.verify(ctx, again, false)
		if err != nil {
			return VerifyResult{}, err
		}
		if out.Verdict == VerdictPending {
			waiting = true // not final yet: read again on the next check
			continue
		}
		out.PaidBy = again.TxHash
		switch {
		case out.Bound && out.Verdict == VerdictComplete:
			return out, nil
		case out.Bound && req.PayerAddress != "" && out.Payer == req.PayerAddress:
			if own == nil {
				own = &out
			}
		default:
			follow.add(again.TxHash)
		}
	}
	if own != nil {
		return *own, nil
	}
	return unseen, nil
}

// sigSet is a set of signatures a follow ruled out (final, not the
// session's), and the follow's pace.
type sigSet struct {
	mu   sync.Mutex
	sigs map[string]bool
	pace followPace
	// waiting: the last search found a signature not final yet, read
	// again at the next check whatever the pace.
	waiting bool
}

// due reports whether a search is due at now, and if so records it.
func (s *sigSet) due(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.waiting && !s.pace.due(now) {
		return false
	}
	s.pace.searched(now)
	return true
}

// burstOver reports whether the searches' first burst (followBurst from
// the first) has passed at now.
func (s *sigSet) burstOver(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.pace.first.IsZero() && now.Sub(s.pace.first) >= followBurst
}

// isWaiting reports whether the last search found a signature not final
// yet.
func (s *sigSet) isWaiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

func (s *sigSet) wait(waiting bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = waiting
}

func (s *sigSet) has(sig string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sigs[sig]
}

func (s *sigSet) add(sig string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sigs == nil {
		s.sigs = map[string]bool{}
	}
	s.sigs[sig] = true
}

func (v *SolanaVerifier) get(ctx context.Context, sig solana.Signature, c rpc.CommitmentType) (*rpc.GetTransactionResult, error) {
	version := uint64(0)
	tx, err := v.client.GetTransaction(ctx, sig, &rpc.GetTransactionOpts{
		// base64: the verifier reads only meta; a binary envelope never fails
		// to decode because of a message shape the library does not know.
		Encoding:                       solana.EncodingBase64,
		Commitment:                     c,
		MaxSupportedTransactionVersion: &version,
	})
	if errors.Is(err, rpc.ErrNotFound) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("chain: %s: getTransaction(%s, %s): %w", v.net.Name, c, sig, err)
	}
	if tx == nil {
		return nil, rpc.ErrNotFound
	}
	return tx, nil
}

// references reports whether the transaction names ref among its account
// keys (Solana Pay: the transfer instruction carries the reference as a
// read-only, non-signer account), and lists the read-only non-signer keys
// (static and loaded from lookup tables) other than ref: the references it
// may carry for someone else.
func references(tx *solana.Transaction, meta *rpc.TransactionMeta, ref solana.PublicKey) (bool, []string) {
	var keys []solana.PublicKey
	found := false
	if tx != nil {
		h := tx.Message.Header
		n := len(tx.Message.AccountKeys)
		for i, k := range tx.Message.AccountKeys {
			if !ref.IsZero() && k == ref {
				found = true
			}
			if i >= int(h.NumRequiredSignatures) && i >= n-int(h.NumReadonlyUnsignedAccounts) {
				keys = append(keys, k)
			}
		}
	}
	if meta != nil {
		for _, k := range meta.LoadedAddresses.Writable {
			if !ref.IsZero() && k == ref {
				found = true
			}
		}
		for _, k := range meta.LoadedAddresses.ReadOnly {
			if !ref.IsZero() && k == ref {
				found = true
			}
			keys = append(keys, k)
		}
	}
	var refs []string
	for _, k := range keys {
		if k != ref {
			refs = append(refs, k.String())
		}
	}
	return found, refs
}

// delta returns the net raw USDC amount received by token accounts that the
// merchant owns, the owner whose USDC balance fell the most (the payer), and a
// description of USDC-looking balances it ignored.
func (v *SolanaVerifier) delta(tx *rpc.GetTransactionResult, merchant solana.PublicKey) (*big.Int, string, string, error) {
	perOwner, ignored, err := v.ownerDeltas(tx)
	if err != nil {
		return nil, "", "", err
	}
	received := new(big.Int)
	if d := perOwner[merchant]; d != nil {
		received.Set(d)
	}
	var payer string
	var most *big.Int
	for owner, d := range perOwner {
		if owner == merchant || d.Sign() >= 0 {
			continue
		}
		if most == nil || d.Cmp(most) < 0 || (d.Cmp(most) == 0 && owner.String() < payer) {
			most, payer = d, owner.String()
		}
	}
	return received, payer, ignored, nil
}

// ownerDeltas returns how the canonical USDC balance of each owner of token
// accounts (of the token program) moved in the transaction, and a
// description of USDC-looking balances it ignored.
func (v *SolanaVerifier) ownerDeltas(tx *rpc.GetTransactionResult) (map[solana.PublicKey]*big.Int, string, error) {
	perOwner := map[solana.PublicKey]*big.Int{}
	var ignored string
	if tx == nil || tx.Meta == nil {
		return perOwner, "", nil
	}
	add := func(balances []rpc.TokenBalance, sign int) error {
		for _, b := range balances {
			if b.Mint != v.mint {
				continue
			}
			if b.ProgramId == nil || *b.ProgramId != solana.TokenProgramID {
				prog := "unknown program"
				if b.ProgramId != nil {
					prog = "program " + b.ProgramId.String()
				}
				ignored = "a token account of " + prog
				continue
			}
			if b.Owner == nil || b.UiTokenAmount == nil {
				continue
			}
			amt, ok := new(big.Int).SetString(b.UiTokenAmount.Amount, 10)
			if !ok || amt.Sign() < 0 {
				return fmt.Errorf("bad token amount %q for account index %d", b.UiTokenAmount.Amount, b.AccountIndex)
			}
			if sign < 0 {
				amt.Neg(amt)
			}
			if perOwner[*b.Owner] == nil {
				perOwner[*b.Owner] = new(big.Int)
			}
			perOwner[*b.Owner].Add(perOwner[*b.Owner], amt)
		}
		return nil
	}
	if err := add(tx.Meta.PostTokenBalances, +1); err != nil {
		return nil, "", err
	}
	if err := add(tx.Meta.PreTokenBalances, -1); err != nil {
		return nil, "", err
	}
	return perOwner, ignored, nil
}

// redactURL keeps only the scheme and host of an RPC URL for error messages:
// provider URLs often carry an API key in the path or query.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "the configured RPC URL"
	}
	return u.Scheme + "://" + u.Host
}
