package refund

import (
	"context"
	"errors"
	"fmt"
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
	// catchUpRanges bounds the log ranges one pass reads for a group of
	// wallets (EVM: a wallet new to the watcher reads back to its oldest
	// refund's creation, a day of blocks and more).
	catchUpRanges = 10
	// networkBudget bounds one pass's work on a network (a node that
	// hangs must not hold the others up).
	networkBudget = time.Minute
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
	// recentFor is how long transfers read are kept to offer again to a
	// refund listed later: a transfer may pay a refund created up to the
	// block clocks' slack after it (a merchant who paid first), and the
	// refund shows up a pass after its creation.
	recentFor = models.BlockClockSlack + time.Minute
	// maxRecent bounds the transfers kept so per network.
	maxRecent = 10000
	// warnEvery bounds the warnings about one thing that keeps failing.
	warnEvery = 5 * time.Minute
	// recordingFor is how long a late recording is taken to run
	// (RefundLateTransferWorkflow: the transfer was confirmed when it
	// started; unseen, it gives up after the not-found window).
	recordingFor = time.Hour
)

// watcher is the refund watcher's state between passes.
type watcher struct {
	mu sync.Mutex
	// places: where each source wallet's reading stands, per network (EVM:
	// the next block; Solana: the newest signature read). A wallet without
	// one (new, or back after its refunds were paid, or after a restart)
	// is read back to its oldest refund's creation (an expired one's too:
	// a worker down over its window's end did not read the transfer sent
	// inside it), less the block clocks' slack, so nothing is kept across
	// restarts.
	places map[string]map[string]walletPlace
	// marks: each wallet's new-refund mark (RefundSource's count, expired
	// count and newest id) as the last pass listed it; recent: the transfers read in
	// the last recentFor, to offer again to a wallet whose mark changed.
	marks  map[string]map[string]string
	recent map[string][]recentTransfer
	// retry: transfers to offer again on the next pass, per network (the
	// node, the store or a workflow could not answer; or one no pending
	// refund took waits out the late offer's delay).
	retry map[string][]recentTransfer
	// declined: transfers offered to a refund and refused for good, not
	// offered again (network/hash/refund); paused: refunds whose workflow
	// did not answer, until when; warned: when a warning was last logged.
	declined map[string]bool
	paused   map[string]time.Time
	warned   map[string]time.Time
	// recording: expired refunds a late recording runs for (started by
	// the watcher, or by the merchant's submit of the hash), with its hash
	// and until when it is taken to run: its workflow decides; its
	// transfer waits for it, and another is not offered to the refund
	// meanwhile but kept to offer again (to a twin, or to it if the
	// recording fails).
	recording map[string]lateRecording
	// proofs: the wallets' provers read in this network's pass, by
	// address (nil: none proved it).
	proofs map[string]map[string]bool
}

// lateRecording is a late recording running for a refund.
type lateRecording struct {
	hash  string
	until time.Time
}

// recentTransfer is a transfer read, and when.
type recentTransfer struct {
	in     chain.Incoming
	readAt time.Time
}

// walletPlace is where a wallet's reading stands: the next block (EVM) or
// the newest signature read (Solana).
type walletPlace struct {
	block uint64
	sig   string
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
// pay two refunds of a merchant, the older takes it; where it could pay
// refunds of two merchants (who both named the wallet theirs), neither is
// submitted. It returns how many transfers it submitted.
func (s *Service) WatchOnce(ctx context.Context) int {
	if s.Chain == nil || (s.Temporal == nil && s.submitFound == nil) {
		return 0
	}
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.places == nil {
		w.places, w.retry = map[string]map[string]walletPlace{}, map[string][]recentTransfer{}
		w.marks, w.recent = map[string]map[string]string{}, map[string][]recentTransfer{}
		w.declined, w.paused, w.warned = map[string]bool{}, map[string]time.Time{}, map[string]time.Time{}
		w.recording = map[string]lateRecording{}
	}
	if len(w.declined) > maxDeclined {
		w.declined = map[string]bool{} // offered again once, refused again
	}
	for id, until := range w.paused {
		if !s.now().Before(until) {
			delete(w.paused, id)
		}
	}
	for id, rec := range w.recording {
		// Over: its time is up, or the refund is no longer expired
		// without a transfer (recorded, by this hash or another).
		r, err := s.Store.RefundByID(ctx, id)
		if !s.now().Before(rec.until) || (err == nil && !r.ExpiredWithoutTransfer()) {
			delete(w.recording, id)
		}
	}
	for k, at := range w.warned {
		if s.now().Sub(at) >= warnEvery {
			delete(w.warned, k)
		}
	}
	sources, err := s.Store.RefundSourcesAwaitingTransfer(ctx, s.now())
	if err != nil {
		s.warn("list", "refund watch: pending refunds not listed", "err", err)
		return 0
	}
	byNetwork := map[string][]models.RefundSource{}
	for _, src := range sources {
		byNetwork[src.Network] = append(byNetwork[src.Network], src)
	}
	for network := range w.places {
		if len(byNetwork[network]) == 0 {
			delete(w.places, network) // nothing left to pay there
			delete(w.marks, network)
			delete(w.recent, network)
			delete(w.retry, network)
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
		nctx, cancel := context.WithTimeout(ctx, networkBudget)
		n += s.watchNetwork(nctx, network, byNetwork[network])
		cancel()
	}
	return n
}

// watchNetwork reads one network's transfers out of the wallets that owe
// refunds there, and offers each to the refunds it may pay.
func (s *Service) watchNetwork(ctx context.Context, network string, sources []models.RefundSource) int {
	w := &s.watch
	w.proofs = map[string]map[string]bool{}
	fam, ok := chain.FamilyOf(network)
	if !ok {
		return 0
	}
	// The wallets as stored, by the form a transfer names them in, with
	// their oldest refund's creation (several rows when a wallet is stored
	// in two spellings).
	stored := map[string][]string{}
	oldest, marks, expiredToo := map[string]time.Time{}, map[string]string{}, map[string]bool{}
	for _, src := range sources {
		k := walletKey(fam, src.SourceWallet)
		if at, ok := oldest[k]; !ok || src.Oldest.Before(at) {
			oldest[k] = src.Oldest
		}
		// A refund expiring changes the mark too: a transfer read while it
		// was closing is offered to it again, late.
		marks[k] += fmt.Sprintf("%d/%d/%s;", src.Count, src.Expired, src.NewestID)
		expiredToo[k] = expiredToo[k] || src.Expired > 0
		stored[k] = append(stored[k], src.SourceWallet)
	}
	places := w.places[network]
	// A wallet read before whose mark changed has a new refund: its
	// transfer may have been read before the refund existed (a merchant
	// who paid, then created the refund, within the block clocks' slack),
	// so the wallet's recent transfers are offered again.
	changed := map[string]bool{}
	for k := range stored {
		if _, known := places[k]; known && w.marks[network][k] != marks[k] {
			changed[k] = true
		}
	}
	w.marks[network] = marks
	next := make(map[string]walletPlace, len(stored))
	var found []chain.Incoming
	for _, g := range readGroups(fam, stored, oldest, expiredToo, places) {
		got, reached, err := s.scan(ctx, network, fam, g.wallets, g.since.Add(-models.BlockClockSlack), g.cur)
		found = append(found, got...)
		if err != nil {
			s.warn("scan/"+network, "refund watch: transfers not read whole; read on from where they stand on the next pass",
				"network", network, "err", err)
		}
		for _, wallet := range g.wallets {
			k := walletKey(fam, wallet)
			switch {
			case fam == chain.FamilyEVM && reached.Block > g.cur.Block:
				next[k] = walletPlace{block: reached.Block}
			case fam == chain.FamilySolana && reached.After[wallet] != "":
				next[k] = walletPlace{sig: reached.After[wallet]}
			default:
				if p, ok := places[k]; ok {
					next[k] = p // nothing read: where it stood (a new wallet stays new)
				}
			}
		}
	}
	w.places[network] = next
	// Kept to offer again: what was read in the last recentFor.
	now := s.now()
	recent := w.recent[network][:0]
	for _, r := range w.recent[network] {
		if now.Sub(r.readAt) < recentFor {
			recent = append(recent, r)
		}
	}
	var again, read []recentTransfer
	for _, r := range recent {
		if changed[walletKey(fam, r.in.From)] {
			again = append(again, r)
		}
	}
	for _, in := range found {
		read = append(read, recentTransfer{in: in, readAt: now})
	}
	recent = append(recent, read...)
	if len(recent) > maxRecent {
		recent = recent[len(recent)-maxRecent:]
	}
	w.recent[network] = recent

	// What earlier passes could not settle first, then what is new; each
	// transfer once.
	offered := map[string]bool{}
	queue := append(append(w.retry[network], again...), read...)
	w.retry[network] = nil
	n, dropped := 0, 0
	for _, t := range queue {
		in := t.in
		k := strings.ToLower(in.TxHash) + "/" + walletKey(fam, in.From) + "/" + walletKey(fam, in.To) + "/" + in.Units
		spellings, ok := stored[walletKey(fam, in.From)]
		if offered[k] || !ok {
			continue
		}
		offered[k] = true
		submitted, retry := s.settle(ctx, network, fam, spellings, t)
		if submitted {
			n++
		}
		if retry {
			if len(w.retry[network]) < maxRetry {
				w.retry[network] = append(w.retry[network], t)
			} else {
				dropped++
			}
		}
	}
	if dropped > 0 {
		s.warn("dropped/"+network, "refund watch: more transfers to offer again than it keeps; the rest are found again only by a submit by hand",
			"network", network, "dropped", dropped)
	}
	return n
}

// readGroup is wallets read together: at the same place (EVM: the new
// ones all from the oldest of their refunds, those that owe expired
// refunds, which read back up to a week, apart from those that owe
// pending ones alone), or one Solana wallet.
type readGroup struct {
	key     string
	wallets []string
	cur     chain.TransferCursor
	since   time.Time
}

// readGroups groups a network's wallets (stored, by key) for reading.
func readGroups(fam chain.Family, stored map[string][]string, oldest map[string]time.Time, expiredToo map[string]bool,
	places map[string]walletPlace) []*readGroup {
	groups := map[string]*readGroup{}
	for k, spellings := range stored {
		wallet := spellings[0]
		p, known := places[k]
		gk, cur := "new", chain.TransferCursor{}
		switch {
		case fam == chain.FamilySolana:
			gk = "wallet/" + k
			if known {
				cur.After = map[string]string{wallet: p.sig}
			}
		case known:
			gk, cur.Block = fmt.Sprintf("block/%020d", p.block), p.block
		case expiredToo[k]:
			gk = "new/expired"
		}
		g := groups[gk]
		if g == nil {
			g = &readGroup{key: gk, cur: cur, since: oldest[k]}
			groups[gk] = g
		}
		g.wallets = append(g.wallets, wallet)
		if oldest[k].Before(g.since) {
			g.since = oldest[k]
		}
	}
	out := make([]*readGroup, 0, len(groups))
	for _, g := range groups {
		sort.Strings(g.wallets)
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// scan reads the transfers out of wallets after cur (from since when cur
// is zero); on EVM up to catchUpRanges log ranges while the chain is
// ahead. What was read before an error is answered with the place after
// it.
func (s *Service) scan(ctx context.Context, network string, fam chain.Family, wallets []string, since time.Time, cur chain.TransferCursor) ([]chain.Incoming, chain.TransferCursor, error) {
	var all []chain.Incoming
	for i := 0; ; i++ {
		found, next, err := s.Chain.FindTransfersFrom(ctx, network, wallets, since, cur)
		if err != nil && fam == chain.FamilyEVM {
			return all, cur, err
		}
		all = append(all, found...)
		if fam != chain.FamilyEVM || err != nil || i+1 >= catchUpRanges || next.Block <= cur.Block ||
			(cur.Block > 0 && next.Block-cur.Block < chain.MaxLogRange) {
			return all, next, err
		}
		cur = next // a whole range read, or the first from since: the chain may be further ahead
	}
}

// warn logs a warning about key at most every warnEvery (a node down, a
// transfer its workflow keeps refusing: not a line every second).
func (s *Service) warn(key, msg string, args ...any) {
	w := &s.watch
	if _, ok := w.warned[key]; ok {
		return
	}
	w.warned[key] = s.now()
	s.log().Warn(msg, args...)
}

// walletKey is the form in which two spellings of a wallet compare equal
// (EVM addresses are case-insensitive).
func walletKey(fam chain.Family, wallet string) string {
	if fam == chain.FamilyEVM {
		return strings.ToLower(wallet)
	}
	return wallet
}

// settle offers a transfer out of a wallet (stored in sources' spellings)
// to the refunds it may pay: of exactly its amount, to its destination,
// all of one merchant; the pending ones first, oldest first, then, once
// the transfer was read LateOfferDelay ago, the ones that failed
// REFUND_EXPIRED within models.ExpiredRefundWatch, oldest first (the money
// left late: the refund is recorded succeeded). It reports whether one
// took it, and whether to offer it again on the next pass (the store, the
// node or a workflow could not answer; or the late offer's delay runs).
func (s *Service) settle(ctx context.Context, network string, fam chain.Family, sources []string, t recentTransfer) (submitted, retry bool) {
	in := t.in
	units, err := strconv.ParseInt(in.Units, 10, 64)
	if err != nil || units <= 0 {
		return false, false
	}
	hash, err := chain.ParseTxHash(fam, in.TxHash)
	if err != nil {
		return false, false
	}
	// A wallet a merchant proved is that merchant's: only its refunds are
	// paid by a transfer out of it.
	provers, err := s.walletProvers(ctx, network, fam, sources)
	if err != nil {
		s.warn("candidates/"+network, "refund watch: the wallet's proofs not read", "network", network, "txHash", hash, "err", err)
		return false, true
	}
	// A hash that backs a refund already pays no other: of any merchant (a
	// wallet two named theirs), or, for a proven wallet, of any of its
	// provers (a refund of another merchant holding it does not keep the
	// prover's from its own transfer).
	if len(provers) == 0 {
		if taken, err := s.Store.RefundHashTaken(ctx, "", network, hash); err != nil {
			s.warn("candidates/"+network, "refund watch: refunds of a transfer not listed", "network", network, "txHash", hash, "err", err)
			return false, true
		} else if taken {
			return false, false
		}
	}
	var pending, expired []*models.Refund
	merchants := map[string]bool{}
	for _, source := range sources {
		for _, list := range []struct {
			into *[]*models.Refund
			find func(context.Context, string, string, string, bool, money.Amount, time.Time, int) ([]models.Refund, error)
		}{{&pending, s.Store.RefundsAwaitingTransferFrom}, {&expired, s.Store.ExpiredRefundsAwaitingTransferFrom}} {
			refunds, err := list.find(ctx, network, source, in.To, fam == chain.FamilyEVM, money.Amount(units), s.now(), candidateRefunds)
			if err != nil {
				s.warn("candidates/"+network, "refund watch: refunds of a transfer not listed", "network", network, "txHash", hash, "err", err)
				return false, true
			}
			for i := range refunds {
				*list.into = append(*list.into, &refunds[i])
				merchants[refunds[i].MerchantID] = true
			}
		}
	}
	if len(provers) > 0 {
		pending, expired = ofMerchants(pending, provers), ofMerchants(expired, provers)
		for m := range merchants {
			if !provers[m] {
				delete(merchants, m)
			}
		}
	}
	for m := range provers {
		if taken, err := s.Store.RefundHashTaken(ctx, m, network, hash); err != nil {
			s.warn("candidates/"+network, "refund watch: refunds of a transfer not listed", "network", network, "txHash", hash, "err", err)
			return false, true
		} else if taken {
			return false, false
		}
	}
	if len(merchants) > 1 {
		// Two merchants named the wallet theirs (and both proved it, or
		// neither): the transfer is one merchant's, and only the hash its
		// merchant submits says whose.
		s.warn("shared/"+network+"/"+hash, "refund watch: a transfer could pay refunds of several merchants; left for a submit by hand",
			"network", network, "txHash", hash, "refunds", len(pending)+len(expired))
		return false, false
	}
	for _, list := range [][]*models.Refund{pending, expired} {
		sort.SliceStable(list, func(i, j int) bool { return list[i].CreatedAt.Before(list[j].CreatedAt) })
	}
	for _, r := range pending {
		if took, again := s.offer(ctx, network, hash, r, false); took || again {
			return took, again
		}
	}
	if len(expired) > 0 && s.now().Sub(t.readAt) < s.lateOfferDelay() {
		return false, true // a refund created after its transfer may take it yet
	}
	// An expired refund whose late recording runs is passed over (its
	// workflow decides on another transfer), and the transfer kept: if
	// that recording fails, the refund may take this one. The transfer a
	// recording runs for waits for it.
	busy := false
	for _, r := range expired {
		if rec, recording := s.watch.recording[r.ID]; recording {
			if rec.hash == hash {
				return false, true
			}
			busy = true
			continue
		}
		if took, again := s.offer(ctx, network, hash, r, true); took || again {
			return took, again
		}
	}
	return false, busy
}

// walletProvers are the merchants that proved the wallet (sources: its
// spellings); none when nobody did.
func (s *Service) walletProvers(ctx context.Context, network string, fam chain.Family, sources []string) (map[string]bool, error) {
	addr, err := chain.ParseAddress(fam, sources[0])
	if err != nil {
		return nil, nil
	}
	if p, ok := s.watch.proofs[addr]; ok {
		return p, nil // read this pass already (a flood of transfers reads it once)
	}
	provers, err := s.Store.WalletProvers(ctx, []string{addr})
	if err != nil {
		return nil, err
	}
	on := provers.On(addr, network)
	if s.watch.proofs != nil {
		s.watch.proofs[addr] = on
	}
	return on, nil
}

// ofMerchants keeps the refunds of the merchants.
func ofMerchants(refunds []*models.Refund, merchants map[string]bool) []*models.Refund {
	var out []*models.Refund
	for _, r := range refunds {
		if merchants[r.MerchantID] {
			out = append(out, r)
		}
	}
	return out
}

// DefaultLateOfferDelay is Service.LateOfferDelay's default: the
// transfers read are kept as long (recentFor) to offer again to a refund
// listed after them.
const DefaultLateOfferDelay = recentFor

func (s *Service) lateOfferDelay() time.Duration {
	if s.LateOfferDelay > 0 {
		return s.LateOfferDelay
	}
	return DefaultLateOfferDelay
}

// offer verifies a transfer as the refund's and submits it to the
// refund's workflow; late, for a refund that failed REFUND_EXPIRED, it
// starts the recording of it (recordLate), once confirmed. It reports
// whether the refund took it, and whether to offer it again later.
func (s *Service) offer(ctx context.Context, network, hash string, r *models.Refund, late bool) (submitted, retry bool) {
	w := &s.watch
	key := network + "/" + hash + "/" + r.ID
	if late {
		key = "late/" + key // refused while pending (its window closing) is no answer for later
	}
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
		s.warn("verify/"+hash, "refund watch: transfer not verified; offered again", "refundId", r.ID, "txHash", hash, "err", err)
		return false, true
	case res.Verdict == chain.VerdictPending:
		return false, true // not confirmed (a reorg took its block): asked again
	case res.Verdict != chain.VerdictComplete:
		// Mined before the refund existed (a transfer of the same amount
		// for something else): not this refund's.
		w.declined[key] = true
		return false, false
	}
	if late {
		err = s.recordLate(ctx, r, hash)
	} else {
		err = s.submitWatched(ctx, models.Scope{MerchantID: r.MerchantID, Mode: r.Mode}, r.ID, hash)
	}
	var ae *apperr.Error
	switch {
	case err == nil && late:
		// Its workflow decides; the transfer waits for it (recorded, its
		// hash is taken; not, it is offered again), and nothing else is
		// offered to the refund meanwhile.
		w.recording[r.ID] = lateRecording{hash: hash, until: s.now().Add(recordingFor)}
		s.log().Info("refund watch: transfer found on chain for a refund that expired; recording it", "refundId", r.ID, "txHash", hash)
		return true, true
	case late && errors.Is(err, errSubmitBusy):
		// Its recording runs already (the merchant submitted the hash).
		w.recording[r.ID] = lateRecording{hash: hash, until: s.now().Add(recordingFor)}
		return false, true
	case err == nil:
		s.log().Info("refund watch: transfer found on chain and submitted", "refundId", r.ID, "txHash", hash)
		return true, false
	case errors.Is(err, errSubmitBusy):
		return false, true // the merchant's own submit (or a late recording) is being handled: asked again
	case errors.As(err, &ae) && !errors.Is(err, apperr.ErrUnavailable):
		// The refund moved on meanwhile (submitted by hand, ended) or the
		// transfer backs another refund: nothing to do.
		w.declined[key] = true
		return false, false
	default:
		s.warn("submit/"+r.ID, "refund watch: transfer not submitted; the refund is left alone a minute", "refundId", r.ID, "txHash", hash, "err", err)
		w.paused[r.ID] = s.now().Add(busyPause)
		return false, true
	}
}

// submitWatched submits a transfer the watcher found: FirstOnly, through
// the workflow's submit update (or submitFound, in tests).
func (s *Service) submitWatched(ctx context.Context, sc models.Scope, id, hash string) error {
	if s.submitFound != nil {
		return s.submitFound(ctx, sc, id, hash)
	}
	_, err := s.submit(ctx, sc, id, hash, true)
	return err
}

// RunWatcher looks for pending refunds' transfers every interval until ctx
// ends.
func (s *Service) RunWatcher(ctx context.Context, interval time.Duration) {
	periodic.Run(ctx, interval, func(ctx context.Context) { s.WatchOnce(ctx) })
}
