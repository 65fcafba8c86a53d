package refund

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/periodic"
)

// Chain is what the refund watcher reads of the chains: the transfers out
// of the merchants' wallets, and the verification of one as a refund's.
type Chain interface {
	chain.OutgoingFinder
	chain.Verifier
}

// watchedRefundsLimit bounds the pending refunds one pass looks for.
const watchedRefundsLimit = 1000

// maxDeclined bounds the refused offers the watcher remembers.
const maxDeclined = 10000

// refundCursor is the stored cursor kind of the refund watcher's EVM scans.
const refundCursor = "refunds"

// watcher is the refund watcher's state between passes.
type watcher struct {
	mu sync.Mutex
	// cursors per network; known: the source wallets each EVM cursor
	// covered (a wallet new to it is read over the recent blocks too).
	cursors map[string]chain.TransferCursor
	known   map[string]map[string]bool
	saved   map[string]time.Time
	// declined: transfers already offered to a refund and refused, not
	// offered again (network/hash/refund).
	declined map[string]bool
}

// WatchOnce looks on chain for the transfers of pending refunds whose hash
// the merchant has not submitted: a transfer from the refund's source
// wallet to its destination of exactly its amount, mined after the refund
// was created and verified as paying it, is submitted to the refund's
// workflow as the merchant's own submit would be (the workflow verifies it
// again and records the outcome). A merchant who pays a refund from a
// wallet app and never copies the hash sees it succeed all the same. The
// oldest refund is paid first where two would take the same transfer. It
// returns how many transfers it submitted.
func (s *Service) WatchOnce(ctx context.Context) int {
	if s.Chain == nil || s.Temporal == nil {
		return 0
	}
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cursors == nil {
		w.cursors, w.known, w.saved, w.declined = map[string]chain.TransferCursor{}, map[string]map[string]bool{}, map[string]time.Time{}, map[string]bool{}
	}
	rows, err := s.Store.RefundsAwaitingTransfer(ctx, s.now(), watchedRefundsLimit)
	if err != nil {
		s.log().Warn("refund watch: pending refunds not listed", "err", err)
		return 0
	}
	byNetwork := map[string][]*models.Refund{}
	var networks []string
	for i := range rows {
		r := &rows[i]
		if len(byNetwork[r.Network]) == 0 {
			networks = append(networks, r.Network)
		}
		byNetwork[r.Network] = append(byNetwork[r.Network], r)
	}
	for network := range w.cursors {
		if len(byNetwork[network]) == 0 {
			// Nothing to pay on it: the next refund's scan starts at the
			// recent blocks, not at a backlog of every transfer since.
			w.cursors[network] = chain.TransferCursor{}
			delete(w.known, network)
		}
	}
	if len(w.declined) > maxDeclined {
		w.declined = map[string]bool{} // offered again once, refused again
	}
	n := 0
	for _, network := range networks {
		n += s.watchNetwork(ctx, network, byNetwork[network])
	}
	return n
}

// watchNetwork scans one network for its pending refunds' transfers.
func (s *Service) watchNetwork(ctx context.Context, network string, pending []*models.Refund) int {
	w := &s.watch
	fam, ok := chain.FamilyOf(network)
	if !ok {
		return 0
	}
	var wallets []string
	seen := map[string]bool{}
	since := pending[0].CreatedAt.Add(-models.BlockClockSlack) // the oldest first
	for _, r := range pending {
		if k := strings.ToLower(r.SourceWallet); !seen[k] {
			seen[k] = true
			wallets = append(wallets, r.SourceWallet)
		}
	}
	cur, ok := w.cursors[network]
	if !ok && fam == chain.FamilyEVM {
		block, err := s.Store.ChainCursorOf(ctx, network, refundCursor)
		if err != nil {
			s.log().Warn("refund watch: stored cursor not read; scanning the recent blocks", "network", network, "err", err)
		}
		cur = chain.TransferCursor{Block: block}
	}
	found, next, err := s.Chain.FindTransfersFrom(ctx, network, wallets, since, cur)
	if err != nil {
		s.log().Warn("refund watch: transfers not read whole", "network", network, "err", err)
		if fam == chain.FamilyEVM {
			return 0 // the cursor stays: the next pass reads these blocks again
		}
		// Solana: the wallets read are kept, the others keep their place.
	}
	if fam == chain.FamilyEVM && cur.Block > 0 {
		// A wallet the cursor did not cover (a new refund's) is read over
		// the recent blocks too: the cursor moved past them without it.
		var fresh []string
		for _, a := range wallets {
			if !w.known[network][strings.ToLower(a)] {
				fresh = append(fresh, a)
			}
		}
		if len(fresh) > 0 {
			back, _, err := s.Chain.FindTransfersFrom(ctx, network, fresh, since, chain.TransferCursor{})
			if err != nil {
				return 0 // the next pass tries again, cursor unmoved
			}
			found = append(found, back...)
		}
	}
	if w.known[network] == nil {
		w.known[network] = map[string]bool{}
	}
	for _, a := range wallets {
		w.known[network][strings.ToLower(a)] = true
	}
	n := 0
	taken := map[string]bool{}
	for _, in := range found {
		for _, r := range pending {
			if taken[r.ID] || !s.pays(in, r, fam) {
				continue
			}
			submitted, retry := s.offer(ctx, network, fam, in, r)
			if retry {
				return n // the cursor stays: the next pass offers it again
			}
			if submitted {
				taken[r.ID] = true
				n++
				break
			}
		}
	}
	w.cursors[network] = next
	if fam == chain.FamilyEVM {
		s.saveCursor(ctx, network, next.Block)
	}
	return n
}

// pays says whether a transfer matches a pending refund: from its source
// wallet to its destination, exactly its amount.
func (s *Service) pays(in chain.Incoming, r *models.Refund, fam chain.Family) bool {
	units, err := strconv.ParseInt(in.Units, 10, 64)
	if err != nil || units <= 0 || units != r.Amount.Units() {
		return false
	}
	if fam == chain.FamilyEVM {
		return chain.SameAddress(in.From, r.SourceWallet) && chain.SameAddress(in.To, r.DestinationWallet)
	}
	return in.From == r.SourceWallet && in.To == r.DestinationWallet
}

// offer verifies a matching transfer as the refund's and submits it. It
// reports whether the refund took it, and whether to offer it again on
// the next pass (the node or the workflow could not answer).
func (s *Service) offer(ctx context.Context, network string, fam chain.Family, in chain.Incoming, r *models.Refund) (submitted, retry bool) {
	w := &s.watch
	hash, err := chain.ParseTxHash(fam, in.TxHash)
	if err != nil {
		return false, false
	}
	key := network + "/" + hash + "/" + r.ID
	if w.declined[key] {
		return false, false
	}
	res, err := chain.VerifyRefund(ctx, s.Chain, chain.RefundTransfer{Network: network, TxHash: hash, From: r.SourceWallet,
		To: r.DestinationWallet, Units: strconv.FormatInt(r.Amount.Units(), 10), NotBefore: r.CreatedAt.Add(-models.BlockClockSlack)})
	switch {
	case err != nil:
		s.log().Warn("refund watch: transfer not verified", "refundId", r.ID, "txHash", hash, "err", err)
		return false, true
	case res.Verdict == chain.VerdictPending:
		return false, true // not confirmed yet (a reorg): asked again
	case res.Verdict != chain.VerdictComplete:
		// Mined before the refund existed (a payment of the same amount
		// made earlier): not this refund's.
		w.declined[key] = true
		return false, false
	}
	_, err = s.submit(ctx, models.Scope{MerchantID: r.MerchantID, Mode: r.Mode}, r.ID, hash, true)
	var ae *apperr.Error
	switch {
	case err == nil:
		s.log().Info("refund watch: transfer found on chain and submitted", "refundId", r.ID, "txHash", hash)
		return true, false
	case errors.As(err, &ae) && !errors.Is(err, apperr.ErrUnavailable):
		// The refund moved on meanwhile (submitted by hand, ended) or the
		// transfer backs another refund: nothing to do.
		w.declined[key] = true
		return false, false
	default:
		s.log().Warn("refund watch: transfer not submitted", "refundId", r.ID, "txHash", hash, "err", err)
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
