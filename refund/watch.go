package refund

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
	"github.com/paygate/paygate/periodic"
)

// Chain is what the refund watcher reads of the chains: the transfers out
// of the merchants' wallets, and the verification of one as a refund's.
type Chain interface {
	chain.OutgoingFinder
	chain.Verifier
}

// Bounds of the refund watcher's memory and work.
const (
	// refundCursor is the stored cursor kind of its EVM scans.
	refundCursor = "refunds"
	// catchUpRanges bounds the log ranges one pass reads on a network
	// whose cursor is behind (a worker that was down, a network idle).
	catchUpRanges = 10
	// maxRetry bounds the transfers kept per network to offer again.
	maxRetry = 1000
	// maxDeclined bounds the refused offers it remembers.
	maxDeclined = 10000
	// candidateRefunds bounds the refunds one transfer is offered to.
	candidateRefunds = 50
	// busyPause is how long a refund whose workflow did not answer is left
	// alone (its transfer kept to offer again): a stuck workflow must not
	// hold up every pass for the update's timeout.
	busyPause = time.Minute
)

// watcher is the refund watcher's state between passes.
type watcher struct {
	mu sync.Mutex
	// cursors per network (EVM: the next block, also stored; Solana: each
	// wallet's newest signature read); known: the source wallets an EVM
	// cursor covered on its last pass (another is read over the recent
	// blocks too).
	cursors map[string]chain.TransferCursor
	known   map[string]map[string]bool
	saved   map[string]time.Time
	// retry: transfers to offer again on the next pass, per network (the
	// node, the store or a workflow could not answer).
	retry map[string][]chain.Incoming
	// declined: transfers offered to a refund and refused for good, not
	// offered again (network/hash/refund); paused: refunds whose workflow
	// did not answer, until when.
	declined map[string]bool
	paused   map[string]time.Time
}

// errSubmitBusy answers a watcher's submit that found another submit of
// the refund in progress: offered again on the next pass.
var errSubmitBusy = errors.New("refund: a transaction hash is being attached to this refund")

// WatchOnce looks on chain for the transfers of pending refunds whose hash
// the merchant has not submitted: a transfer from the refund's source
// wallet to its destination of exactly its amount, verified as paying it
// (chain.VerifyRefund: mined after the refund was created, less the block
// clocks' slack), is submitted to the refund's workflow as the merchant's
// own submit would be (the workflow verifies it again and records the
// outcome). A merchant who pays a refund from a wallet app and never
// copies the hash sees it succeed all the same. Where one transfer could
// pay two refunds, the older takes it. It returns how many transfers it
// submitted.
func (s *Service) WatchOnce(ctx context.Context) int {
	if s.Chain == nil || (s.Temporal == nil && s.submitFound == nil) {
		return 0
	}
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cursors == nil {
		w.cursors, w.known, w.saved = map[string]chain.TransferCursor{}, map[string]map[string]bool{}, map[string]time.Time{}
		w.retry, w.declined, w.paused = map[string][]chain.Incoming{}, map[string]bool{}, map[string]time.Time{}
	}
	if len(w.declined) > maxDeclined {
		w.declined = map[string]bool{} // offered again once, refused again
	}
	for id, until := range w.paused {
		if !s.now().Before(until) {
			delete(w.paused, id)
		}
	}
	sources, err := s.Store.RefundSourcesAwaitingTransfer(ctx, s.now())
	if err != nil {
		s.log().Warn("refund watch: pending refunds not listed", "err", err)
		return 0
	}
	byNetwork := map[string][]models.RefundSource{}
	for _, src := range sources {
		byNetwork[src.Network] = append(byNetwork[src.Network], src)
	}
	for network := range w.retry {
		if len(byNetwork[network]) == 0 {
			delete(w.retry, network) // nothing left to pay there
		}
	}
	networks := make([]string, 0, len(byNetwork))
	for network := range byNetwork {
		networks = append(networks, network)
	}
	sort.Strings(networks)
	n := 0
	for _, network := range networks {
		if ctx.Err() != nil {
			break
		}
		n += s.watchNetwork(ctx, network, byNetwork[network])
	}
	return n
}

// watchNetwork reads one network's transfers out of the wallets that owe
// refunds there, and offers each to the refunds it may pay.
func (s *Service) watchNetwork(ctx context.Context, network string, sources []models.RefundSource) int {
	w := &s.watch
	fam, ok := chain.FamilyOf(network)
	if !ok {
		return 0
	}
	// The wallets as stored, by the form a transfer names them in.
	stored := map[string]string{}
	var wallets []string
	since := sources[0].Oldest
	for _, src := range sources {
		k := walletKey(fam, src.SourceWallet)
		if _, ok := stored[k]; !ok {
			stored[k] = src.SourceWallet
			wallets = append(wallets, src.SourceWallet)
		}
		if src.Oldest.Before(since) {
			since = src.Oldest
		}
	}
	since = since.Add(-models.BlockClockSlack)
	cur, ok := w.cursors[network]
	if !ok && fam == chain.FamilyEVM {
		block, err := s.Store.ChainCursorOf(ctx, network, refundCursor)
		if err != nil {
			s.log().Warn("refund watch: stored cursor not read; scanning the recent blocks", "network", network, "err", err)
		}
		cur = chain.TransferCursor{Block: block}
	}
	found, next, err := s.scan(ctx, network, fam, wallets, since, cur)
	if err != nil {
		s.log().Warn("refund watch: transfers not read whole", "network", network, "err", err)
		if fam == chain.FamilyEVM && next.Block == cur.Block {
			return 0 // the cursor stays: the next pass reads these blocks again
		}
	}
	if fam == chain.FamilyEVM && cur.Block > 0 {
		// A wallet the cursor did not cover on its last pass (a new
		// refund's) is read over the recent blocks too: the cursor may have
		// moved past its transfer without it.
		var fresh []string
		for _, a := range wallets {
			if !w.known[network][walletKey(fam, a)] {
				fresh = append(fresh, a)
			}
		}
		if len(fresh) > 0 {
			back, _, err := s.Chain.FindTransfersFrom(ctx, network, fresh, since, chain.TransferCursor{})
			if err != nil {
				s.log().Warn("refund watch: new wallets' recent transfers not read", "network", network, "err", err)
				return 0 // the next pass tries again, cursor unmoved
			}
			found = append(found, back...)
		}
	}
	if fam == chain.FamilySolana {
		// A wallet the node failed on keeps its place; one no longer owing
		// a refund is forgotten (read back to its next refund's creation).
		after := map[string]string{}
		for _, a := range wallets {
			if sig, ok := next.After[a]; ok {
				after[a] = sig
			} else if sig, ok := cur.After[a]; ok {
				after[a] = sig
			}
		}
		next = chain.TransferCursor{After: after}
	}
	known := make(map[string]bool, len(wallets))
	for _, a := range wallets {
		known[walletKey(fam, a)] = true
	}
	w.known[network] = known
	w.cursors[network] = next
	if fam == chain.FamilyEVM {
		s.saveCursor(ctx, network, next.Block)
	}

	// What earlier passes could not settle first, then what is new; each
	// transfer once.
	offered := map[string]bool{}
	queue := append(w.retry[network], found...)
	w.retry[network] = nil
	n := 0
	for _, in := range queue {
		k := strings.ToLower(in.TxHash) + "/" + walletKey(fam, in.From) + "/" + walletKey(fam, in.To) + "/" + in.Units
		source, ok := stored[walletKey(fam, in.From)]
		if offered[k] || !ok {
			continue
		}
		offered[k] = true
		submitted, retry := s.settle(ctx, network, fam, source, in)
		if submitted {
			n++
		}
		if retry && len(w.retry[network]) < maxRetry {
			w.retry[network] = append(w.retry[network], in)
		}
	}
	return n
}

// scan reads the transfers out of wallets after cur; an EVM cursor behind
// the chain reads up to catchUpRanges log ranges in one pass. An error
// after some ranges were read answers them with the cursor after them.
func (s *Service) scan(ctx context.Context, network string, fam chain.Family, wallets []string, since time.Time, cur chain.TransferCursor) ([]chain.Incoming, chain.TransferCursor, error) {
	var all []chain.Incoming
	for i := 0; ; i++ {
		found, next, err := s.Chain.FindTransfersFrom(ctx, network, wallets, since, cur)
		if err != nil && fam == chain.FamilyEVM {
			return all, cur, err
		}
		all = append(all, found...)
		behind := fam == chain.FamilyEVM && cur.Block > 0 && next.Block >= cur.Block+chain.MaxLogRange
		if err != nil || !behind || i+1 >= catchUpRanges {
			return all, next, err
		}
		cur = next
	}
}

// walletKey is the form in which two spellings of a wallet compare equal
// (EVM addresses are case-insensitive).
func walletKey(fam chain.Family, wallet string) string {
	if fam == chain.FamilyEVM {
		return strings.ToLower(wallet)
	}
	return wallet
}

// settle offers a transfer out of source to the pending refunds it may
// pay, oldest first: of exactly its amount, to its destination. It
// reports whether one took it, and whether to offer it again on the next
// pass (the store, the node or a workflow could not answer).
func (s *Service) settle(ctx context.Context, network string, fam chain.Family, source string, in chain.Incoming) (submitted, retry bool) {
	units, err := strconv.ParseInt(in.Units, 10, 64)
	if err != nil || units <= 0 {
		return false, false
	}
	hash, err := chain.ParseTxHash(fam, in.TxHash)
	if err != nil {
		return false, false
	}
	refunds, err := s.Store.RefundsAwaitingTransferFrom(ctx, network, source, money.Amount(units), s.now(), candidateRefunds)
	if err != nil {
		s.log().Warn("refund watch: refunds of a transfer not listed", "network", network, "txHash", hash, "err", err)
		return false, true
	}
	for i := range refunds {
		r := &refunds[i]
		if walletKey(fam, r.DestinationWallet) != walletKey(fam, in.To) {
			continue
		}
		took, again := s.offer(ctx, network, hash, r)
		if took || again {
			return took, again
		}
	}
	return false, false
}

// offer verifies a transfer as the refund's and submits it. It reports
// whether the refund took it, and whether to offer it again later.
func (s *Service) offer(ctx context.Context, network, hash string, r *models.Refund) (submitted, retry bool) {
	w := &s.watch
	key := network + "/" + hash + "/" + r.ID
	if w.declined[key] {
		return false, false
	}
	if _, paused := w.paused[r.ID]; paused {
		return false, true
	}
	res, err := chain.VerifyRefund(ctx, s.Chain, chain.RefundTransfer{Network: network, TxHash: hash, From: r.SourceWallet,
		To: r.DestinationWallet, Units: strconv.FormatInt(r.Amount.Units(), 10), NotBefore: r.CreatedAt.Add(-models.BlockClockSlack)})
	switch {
	case err != nil:
		s.log().Warn("refund watch: transfer not verified", "refundId", r.ID, "txHash", hash, "err", err)
		return false, true
	case res.Verdict == chain.VerdictPending:
		return false, true // not confirmed (a reorg took its block): asked again
	case res.Verdict != chain.VerdictComplete:
		// Mined before the refund existed (a transfer of the same amount
		// for something else): not this refund's.
		w.declined[key] = true
		return false, false
	}
	submit := s.submitFound
	if submit == nil {
		submit = func(ctx context.Context, sc models.Scope, id, hash string) error {
			_, err := s.submit(ctx, sc, id, hash, true)
			return err
		}
	}
	err = submit(ctx, models.Scope{MerchantID: r.MerchantID, Mode: r.Mode}, r.ID, hash)
	var ae *apperr.Error
	switch {
	case err == nil:
		s.log().Info("refund watch: transfer found on chain and submitted", "refundId", r.ID, "txHash", hash)
		return true, false
	case errors.Is(err, errSubmitBusy):
		return false, true // the merchant's own submit is being handled: asked again
	case errors.As(err, &ae) && !errors.Is(err, apperr.ErrUnavailable):
		// The refund moved on meanwhile (submitted by hand, ended) or the
		// transfer backs another refund: nothing to do.
		w.declined[key] = true
		return false, false
	default:
		s.log().Warn("refund watch: transfer not submitted; the refund is left alone a minute", "refundId", r.ID, "txHash", hash, "err", err)
		w.paused[r.ID] = s.now().Add(busyPause)
		return false, true
	}
}

// saveCursor stores a network's EVM cursor, at most every few seconds (a
// restart reads those blocks again, which submits nothing twice).
func (s *Service) saveCursor(ctx context.Context, network string, block uint64) {
	w := &s.watch
	if at, ok := w.saved[network]; ok && s.now().Sub(at) < 5*time.Second {
		return
	}
	if err := s.Store.SaveChainCursor(ctx, network, refundCursor, block); err != nil {
		s.log().Warn("refund watch: cursor not stored", "network", network, "err", err)
		return
	}
	w.saved[network] = s.now()
}

// RunWatcher looks for pending refunds' transfers every interval until ctx
// ends.
func (s *Service) RunWatcher(ctx context.Context, interval time.Duration) {
	periodic.Run(ctx, interval, func(ctx context.Context) { s.WatchOnce(ctx) })
}
