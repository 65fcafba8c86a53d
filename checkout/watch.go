package checkout

import (
	"context"
	"errors"
	"github.com/paygate/paygate/periodic"
	"strconv"
	"strings"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

// Dispatcher starts the delivery workflows of webhook deliveries.
type Dispatcher interface {
	Dispatch(ctx context.Context, deliveryIDs []string) error
}

func (s *Service) lateGrace() time.Duration {
	if s.LateGrace > 0 {
		return s.LateGrace
	}
	return 24 * time.Hour
}

// unmatchedCandidate is a transfer to a merchant wallet that nothing
// accounted for when it was first seen.
type unmatchedCandidate struct {
	in        chain.Incoming
	wallet    models.ReceivingWallet
	firstSeen time.Time
	// pass is the watcher's pass that read it (persistPositions).
	pass uint64
	// tried is when attachPlain last tried it.
	tried time.Time
	// retry: an open session declares the sender and is due the amount
	// (held by another hash when the transfer was first seen): it is
	// offered again. A stranger's dust matches none and is not (four
	// queries every 15 s for ten minutes, per transfer, before).
	retry bool
}

// maxUnmatchedWait bounds how long a candidate waits past its grace for
// the sessions open when it arrived, due its amount, to end.
const maxUnmatchedWait = 2 * time.Hour

// candidateRetry is how often a candidate is offered to the session it
// may pay again before its grace ends: that session may have held another
// hash when it was first seen (a stranger's, given back since).
const candidateRetry = 15 * time.Second

func (s *Service) unmatchedGrace() time.Duration {
	if s.UnmatchedGrace > 0 {
		return s.UnmatchedGrace
	}
	return 10 * time.Minute
}

// scanUnmatched looks at the token transfers to the merchants' receiving
// wallets of an EVM network: one that no session, transaction or exception
// of the merchant holds after the grace period (a customer may still be
// submitting it) becomes an unmatched-payment exception.
func (s *Service) scanUnmatched(ctx context.Context, name string, dispatch Dispatcher) int {
	tf, ok := s.Finder.(chain.TransferFinder)
	if !ok {
		return 0
	}
	if fam, _ := chain.FamilyOf(name); fam != chain.FamilyEVM {
		return 0
	}
	wallets, err := s.receivingWallets(ctx, name)
	if err != nil || len(wallets) == 0 {
		return 0
	}
	byAddr, addrs := walletsByAddress(wallets)
	from := s.cursor(ctx, name, cursorTransfers, s.transferCursors)
	found, next, err := tf.FindTransfersTo(ctx, name, addrs, from)
	if err != nil {
		s.log().Warn("watch: transfers not scanned", "network", name, "err", err)
		return 0
	}
	// A wallet the scan did not watch before (a new link) is looked at
	// over the recent blocks too: the cursor had moved past them.
	if from > 0 {
		var fresh []string
		for _, a := range addrs {
			if !s.knownWallets[name][strings.ToLower(a)] {
				fresh = append(fresh, a)
			}
		}
		if len(fresh) > 0 {
			back, _, err := tf.FindTransfersTo(ctx, name, fresh, 0)
			if err != nil {
				return 0 // the next pass tries again, cursor unmoved
			}
			found = append(found, back...)
		}
	}
	if s.knownWallets[name] == nil {
		s.knownWallets[name] = map[string]bool{}
	}
	for _, a := range addrs {
		s.knownWallets[name][strings.ToLower(a)] = true
	}
	s.advance(name, cursorTransfers, s.transferCursors, next)
	s.offerPlain(ctx, name, byAddr, found)
	return s.sweepCandidates(ctx, name, dispatch)
}

// walletsByAddress groups receiving wallets by address (lower case), and
// lists each address once, in the order given.
func walletsByAddress(wallets []models.ReceivingWallet) (map[string][]models.ReceivingWallet, []string) {
	byAddr := map[string][]models.ReceivingWallet{}
	var addrs []string
	for _, w := range wallets {
		k := strings.ToLower(w.Address)
		if len(byAddr[k]) == 0 {
			addrs = append(addrs, w.Address)
		}
		byAddr[k] = append(byAddr[k], w)
	}
	return byAddr, addrs
}

// offerPlain attaches each transfer found reaching a merchant's wallet
// (byAddr) to the one open session it pays (attachPlain),
// or keeps it as a candidate that the merchant holds as an unmatched
// exception if nothing accounts for it when its grace ends
// (sweepCandidates).
func (s *Service) offerPlain(ctx context.Context, name string, byAddr map[string][]models.ReceivingWallet, found []chain.Incoming) {
	fam, _ := chain.FamilyOf(name)
	now := s.now()
	for _, in := range found {
		units, err := strconv.ParseInt(in.Units, 10, 64)
		if err != nil || units <= 0 {
			// Zero-value transfers are address-poisoning spam (anyone can
			// emit one in any sender's name); nothing was received.
			continue
		}
		hash, _ := chain.ParseTxHash(fam, in.TxHash)
		in.TxHash = hash
		for _, w := range byAddr[strings.ToLower(in.To)] {
			attached, refused := s.attachPlain(ctx, name, w, in)
			if attached {
				continue
			}
			key := name + "/" + w.MerchantID + "/" + hash
			if _, ok := s.candidates[key]; !ok {
				retry := false
				if !refused {
					declared, err := s.Store.AnySessionDeclaring(ctx, w.MerchantID, name, in.From, units)
					retry = declared || err != nil
				}
				s.candidates[key] = unmatchedCandidate{in: in, wallet: w, firstSeen: now, tried: now, retry: retry, pass: s.pass}
			}
		}
	}
}

// sweepCandidates offers a network's candidates to their session again
// (those an open session could take) and keeps, once their grace ended,
// those nothing accounts for as unmatched exceptions. It returns how many
// it kept.
func (s *Service) sweepCandidates(ctx context.Context, name string, dispatch Dispatcher) int {
	now := s.now()
	n := 0
	for key, c := range s.candidates {
		if !strings.HasPrefix(key, name+"/") {
			continue
		}
		if c.retry && now.Sub(c.tried) >= candidateRetry {
			attached, refused := s.attachPlain(ctx, name, c.wallet, c.in)
			if attached {
				delete(s.candidates, key)
				continue
			}
			c.tried, c.retry = now, !refused
			s.candidates[key] = c
		}
		if now.Sub(c.firstSeen) < s.unmatchedGrace() {
			continue
		}
		done, err := s.Store.TransferAccountedFor(ctx, c.wallet.MerchantID, name, c.in.TxHash)
		if err != nil {
			continue
		}
		units, _ := strconv.ParseInt(c.in.Units, 10, 64)
		if !done && now.Sub(c.firstSeen) < maxUnmatchedWait {
			// A session open when it arrived, due its amount at this
			// wallet, may still take it (its customer submits the hash
			// late): made an exception now, the submit would be contested.
			if due, err := s.Store.AnySessionDue(ctx, c.wallet.MerchantID, name, c.wallet.Address, units, c.firstSeen); err != nil || due {
				continue
			}
		}
		if !done {
			ids, err := s.Store.OpenException(ctx, &models.PaymentException{MerchantID: c.wallet.MerchantID, Mode: c.wallet.Mode,
				Network: name, TxHash: c.in.TxHash, Kind: models.ExceptionUnmatched, Amount: money.Amount(units),
				PayerAddress: c.in.From, MerchantWalletAddress: c.wallet.Address,
				Message: "USDC reached the wallet without a checkout session or a recorded transaction"})
			if err != nil {
				continue
			}
			if len(ids) > 0 && dispatch != nil {
				_ = dispatch.Dispatch(ctx, ids)
			}
			n++
		}
		delete(s.candidates, key)
	}
	return n
}

// attachPlain attaches a plain transfer (a wallet paying the QR code's
// EIP-681 request, or a Solana wallet's "send") to the one open session it
// would pay: same wallet as the session declares, exactly the amount due.
// It is what the customer's own submit would do, so the claim is as
// provisional as theirs; another session's claim on the hash (a
// stranger's, declaring the sender) does not keep it from claiming too, so
// that the two are contested rather than the stranger's completing while
// the customer's session waits to expire. refused is set when the
// transfer must never be offered to a session as plain: it carries another
// session's reference (or failed on chain).
func (s *Service) attachPlain(ctx context.Context, network string, w models.ReceivingWallet, in chain.Incoming) (attached, refused bool) {
	units, err := strconv.ParseInt(in.Units, 10, 64)
	if err != nil {
		return false, true
	}
	if done, err := s.Store.TransferSettled(ctx, w.MerchantID, network, in.TxHash); err != nil || done {
		return done, false
	}
	rows, err := s.Store.OpenSessionsPaidBy(ctx, w.MerchantID, network, in.From, in.TxHash, units)
	if err != nil || len(rows) != 1 || !strings.EqualFold(rows[0].MerchantWalletAddress, in.To) {
		return false, false // none, or ambiguous: the customer submits, or it becomes an exception
	}
	if ok, refused := s.plainFor(ctx, &rows[0], in); !ok {
		return false, refused
	}
	if _, err := s.submit(ctx, rows[0].ID, in.TxHash, "chain"); err != nil {
		return false, false
	}
	s.log().Info("watch: plain transfer attached to the session it pays", "sessionId", rows[0].ID, "txHash", in.TxHash)
	return true, false
}

// plainFor reports whether the chain shows in as a transfer that may be
// offered to cs as plain: seen, not failed, and carrying no other
// session's reference. A transfer bound to another session (a customer
// with two open sessions of one amount, paying one by its reference, the
// other waiting) is that session's payment, found by its reference: offered
// to cs, the store would fail cs with nothing received, and a transfer
// carrying an old session's reference that no watch finds any more would be
// recorded nowhere. Such a transfer stays a candidate for an unmatched
// exception. refused: never offer it (not: the chain could not tell now).
func (s *Service) plainFor(ctx context.Context, cs *models.CheckoutSession, in chain.Incoming) (ok, refused bool) {
	refs := in.Refs
	if s.Verifier != nil {
		// EVM's Transfer logs do not tell what authorization moved it:
		// the receipt's AuthorizationUsed logs do.
		req := chain.VerifyRequest{Network: cs.Network, TxHash: in.TxHash, MerchantAddress: cs.MerchantWalletAddress,
			ExpectedUnits: strconv.FormatInt(cs.ExpectedAmount.Units(), 10), PayerAddress: cs.WalletAddress, Alone: true}
		if cs.PaymentReference != nil {
			req.Reference = *cs.PaymentReference
		}
		res, err := s.Verifier.Verify(ctx, req)
		switch {
		case err != nil || !res.Seen:
			return false, false
		case res.Verdict == chain.VerdictFailed:
			return false, true
		}
		refs = append(append([]string(nil), refs...), res.Refs...)
	}
	carried, err := s.Store.CarriesAnotherReference(ctx, cs.ID, refs)
	if err != nil {
		return false, false
	}
	if carried {
		s.log().Info("watch: a transfer carrying another session's reference is not offered as plain", "sessionId", cs.ID, "txHash", in.TxHash)
		return false, true
	}
	return true, false
}

// receivingWallets are the merchants' wallets on a network, read at most
// every 10 seconds (the scan runs every poll interval; a wallet that shows
// up later is scanned over the recent blocks then).
func (s *Service) receivingWallets(ctx context.Context, network string) ([]models.ReceivingWallet, error) {
	if c, ok := s.walletCache[network]; ok && s.now().Sub(c.at) < 10*time.Second {
		return c.wallets, nil
	}
	mode, _ := chain.ModeOf(network)
	w, err := s.Store.ReceivingWallets(ctx, network, models.Mode(mode))
	if err != nil {
		if c, ok := s.walletCache[network]; ok && c.pass == s.pass {
			// This pass's list (a long chain read outlasted the cache):
			// transfers already read are not dropped for a store error.
			// An older list is not used: a scan of it would move a cursor
			// past the blocks of the wallets linked since.
			return c.wallets, nil
		}
		return nil, err
	}
	if s.walletCache == nil {
		s.walletCache = map[string]walletCacheEntry{}
	}
	s.walletCache[network] = walletCacheEntry{at: s.now(), pass: s.pass, wallets: w}
	return w, nil
}

type walletCacheEntry struct {
	at      time.Time
	pass    uint64
	wallets []models.ReceivingWallet
}

// WatchOnce looks on every network for payments that carry the reference
// of a session without a hash: an open session gets the transaction
// attached as if the page had submitted it (source chain), so a customer
// who paid and closed the tab still completes; a session that has ended
// keeps the money as a late-payment exception. It returns how many
// payments it found.
func (s *Service) WatchOnce(ctx context.Context, dispatch Dispatcher) int {
	if s.Finder == nil {
		return 0
	}
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.cursors == nil {
		s.cursors, s.transferCursors, s.candidates = map[string]uint64{}, map[string]uint64{}, map[string]unmatchedCandidate{}
		s.knownWallets = map[string]map[string]bool{}
		s.retryFound, s.declined = map[string][]chain.Found{}, map[string]time.Time{}
	}
	s.pass++
	// Sessions open now, or ended (expired) within the late grace: by
	// expiry, as an invoice session stays open for days.
	since := s.now().Add(-s.lateGrace())
	n := 0
	for _, name := range append(s.Networks.Names(chain.ModeTest), s.Networks.Names(chain.ModeLive)...) {
		n += s.scanUnmatched(ctx, name, dispatch)
		found, received, next, ok, err := s.findWatched(ctx, name, since)
		if ok {
			if err != nil {
				s.log().Warn("watch: chain not searched for every reference", "network", name, "err", err)
			}
			if err == nil || len(found) > 0 {
				// What was found is attached; the rest is looked for again.
				s.advance(name, cursorReferences, s.cursors, next)
			}
		}
		// What a pass could not settle (a node or the workers failing, a
		// session still holding another hash) is tried again, even when
		// this pass failed or had nothing to search (the session it waits
		// for completed: no reference is watched any more): the EVM
		// cursor, or a Solana wallet's read, has moved past it (one wallet
		// failing every pass must not hold another's payment).
		found = uniqueFound(append(s.retryFound[name], found...))
		s.retryFound[name] = nil
		parked := map[string]heldRead{}
		for _, f := range found {
			attached, retry := s.attachFound(ctx, name, f, dispatch)
			if attached {
				n++
			}
			if retry && len(s.retryFound[name]) < maxRetryFound {
				s.retryFound[name] = append(s.retryFound[name], f)
				k := f.Reference + "/" + strings.ToLower(f.TxHash)
				if p, ok := s.parked[name][k]; ok {
					parked[k] = p
				} else {
					parked[k] = heldRead{pass: s.pass, block: f.Block, since: s.now()}
				}
			}
		}
		if s.parked == nil {
			s.parked = map[string]map[string]heldRead{}
		}
		s.parked[name] = parked
		if fam, _ := chain.FamilyOf(name); fam == chain.FamilySolana {
			// Every transfer the wallet read saw reach a merchant's
			// wallet is offered, as on EVM (scanUnmatched), to the one open
			// session that declares its sender and is due its amount,
			// unless it carries another session's reference (plainFor),
			// and is otherwise a candidate: kept as an unmatched exception
			// when nothing accounts for it once its grace ends.
			if len(received) > 0 {
				if wallets, err := s.receivingWallets(ctx, name); err == nil {
					byAddr, _ := walletsByAddress(wallets)
					s.offerPlain(ctx, name, byAddr, received)
				}
			}
			n += s.sweepCandidates(ctx, name, dispatch)
		}
		s.persistPositions(ctx, name)
	}
	s.pruneDeclined()
	return n
}

// watchedListLimit bounds the references a scan asks the chain about by
// name (Solana: one call per reference).
const watchedListLimit = 5000

// findWatched finds the payments of a network that carry a watched
// session's reference. On EVM every EIP-3009 authorization of the new
// blocks is read and the store says which nonces are watched sessions'
// references: no list bounds it, so sessions opened by the thousand (the
// session route is public) cannot push a genuine one out of the watch. On
// Solana each watched reference is asked about (the newest
// watchedListLimit), and the new transactions that reached the merchants'
// USDC accounts are read, the store saying which carry a watched
// reference. ok is false when there was nothing to do or the scan could
// not start (logged).
func (s *Service) findWatched(ctx context.Context, name string, since time.Time) (found []chain.Found, received []chain.Incoming, next uint64, ok bool, err error) {
	from := s.cursor(ctx, name, cursorReferences, s.cursors)
	if af, isAF := s.Finder.(chain.AuthorizationFinder); isAF {
		if fam, _ := chain.FamilyOf(name); fam == chain.FamilyEVM {
			// A network without a watched session is not scanned (most
			// configured networks, most of the time; a node unreachable
			// is not asked every pass).
			some, err := s.Store.AnyFoundWatched(ctx, name, since)
			if err != nil {
				s.log().Warn("watch: references not listed", "network", name, "err", err)
				return nil, nil, from, false, nil
			}
			if !some {
				// Nothing can be paid in the blocks of a time without
				// sessions: the next scan starts at the recent blocks, not
				// at a backlog of every authorization since.
				s.cursors[name] = 0
				return nil, nil, from, false, nil
			}
			all, next, err := af.FindAuthorizations(ctx, name, from)
			if err != nil && len(all) == 0 {
				s.log().Warn("watch: chain not searched for authorizations", "network", name, "err", err)
				return nil, nil, from, false, nil
			}
			refs := make([]string, 0, len(all))
			for _, f := range all {
				refs = append(refs, f.Reference)
			}
			watched, werr := s.Store.WatchedAmong(ctx, name, refs, since)
			if werr != nil {
				// The cursor stays: the next pass reads these blocks again.
				s.log().Warn("watch: found authorizations not looked up", "network", name, "err", werr)
				return nil, nil, from, false, nil
			}
			for _, f := range all {
				if watched[f.Reference] {
					found = append(found, f)
				}
			}
			return found, nil, next, true, err
		}
	}
	refs, err := s.Store.WatchedReferences(ctx, name, since, watchedListLimit)
	if err != nil {
		s.log().Warn("watch: references not listed", "network", name, "err", err)
		return nil, nil, from, false, nil
	}
	next = from
	if len(refs) > 0 {
		found, next, err = s.Finder.FindByReference(ctx, name, refs, from)
	}
	// The merchants' wallets are read too, every pass (Solana). A
	// reference's listing is its newest 1,000 signatures: a stranger who
	// saw a customer's payment could push it out of that with 1,000 cheap
	// transactions carrying its reference key, and the session would
	// expire with the money unrecorded. The payment also reached a
	// merchant's USDC account, whose reads skip nothing (resumed over the
	// passes, flood or not). It also finds the sessions past the newest
	// watchedListLimit, which are not listed by reference, and the
	// wallets of completed sessions, whose references are not listed (a
	// payment made again is an exception naming them).
	more, received, serr := s.scanSolanaWallets(ctx, name, since)
	found = append(found, more...)
	if serr != nil {
		err = errors.Join(err, serr)
	}
	return found, received, next, len(refs) > 0 || len(more) > 0 || serr != nil, err
}

// scanSolanaWallets reads the new transactions that reached the USDC
// accounts of the wallets watched sessions pay on a Solana network (not
// every merchant's: one read per wallet and pass, and a stranger's dust
// into an idle merchant's wallet would cost reads for nothing), and
// returns the payments among them that carry a watched session's
// reference, and (chain.SolanaTransferScanner) the USDC every transaction
// read brought a wallet, for the unmatched candidates. A wallet that no
// watched session pays loses its place: when
// one does again, it is read on from its stored place if that was stored
// since, else back to since, not from where it stood days before. The
// places are stored (models.WalletPlace) so that a restarted worker reads
// on too, instead of a day of every wallet's transactions again.
func (s *Service) scanSolanaWallets(ctx context.Context, name string, since time.Time) ([]chain.Found, []chain.Incoming, error) {
	sc, ok := s.Finder.(chain.SolanaPaymentScanner)
	if !ok {
		return nil, nil, nil
	}
	if fam, _ := chain.FamilyOf(name); fam != chain.FamilySolana {
		return nil, nil, nil
	}
	addrs, err := s.Store.WatchedWallets(ctx, name, since)
	if err != nil {
		return nil, nil, err
	}
	if len(addrs) == 0 {
		// Nothing to read: the node is not asked (a network nobody
		// sells on may have none reachable), and the wallets read before
		// lose their places.
		delete(s.walletSigs, name)
		return nil, nil, nil
	}
	if s.walletSigs == nil {
		s.walletSigs = map[string]map[string]string{}
	}
	if s.walletSigs[name] == nil {
		places, err := s.Store.WalletPlacesOf(ctx, name, since)
		if err != nil {
			return nil, nil, err
		}
		s.walletSigs[name] = places
	}
	watchedNow := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		watchedNow[a] = true
	}
	for w := range s.walletSigs[name] {
		if !watchedNow[w] {
			delete(s.walletSigs[name], w)
		}
	}
	var all []chain.Found
	var incoming []chain.Incoming
	var newest map[string]string
	if ts, ok := s.Finder.(chain.SolanaTransferScanner); ok {
		// The merchants' wallets are read first (cached for the pass's
		// candidates): failing after the read, its transfers would be lost.
		if _, err := s.receivingWallets(ctx, name); err != nil {
			return nil, nil, err
		}
		all, incoming, newest, err = ts.FindPaymentsTo(ctx, name, addrs, s.walletSigs[name], since)
	} else {
		all, newest, err = sc.FindReferencesPaidTo(ctx, name, addrs, s.walletSigs[name], since)
	}
	keys := make([]string, 0, len(all))
	for _, f := range all {
		keys = append(keys, f.Reference)
	}
	watched, werr := s.Store.WatchedAmong(ctx, name, keys, since)
	if werr != nil {
		// The wallets' places stay: the next pass reads them again.
		return nil, nil, errors.Join(err, werr)
	}
	for w, sig := range newest {
		if s.walletSigs[name][w] != sig {
			s.walletSigs[name][w] = sig
			s.remember(placeKey(name, w), sig)
		}
	}
	var found []chain.Found
	for _, f := range all {
		if watched[f.Reference] {
			found = append(found, f)
		}
	}
	return found, incoming, err
}

func uniqueFound(found []chain.Found) []chain.Found {
	seen := make(map[chain.Found]bool, len(found))
	out := found[:0]
	for _, f := range found {
		k := chain.Found{Reference: f.Reference, TxHash: strings.ToLower(f.TxHash)}
		if !seen[k] {
			seen[k] = true
			out = append(out, f)
		}
	}
	return out
}

// The watcher's scan cursors, by kind, stored so that a restarted worker
// resumes where the scans stood: starting again at the last few hundred
// blocks, it missed what was paid while the workers were down for longer
// (ten minutes of Base or Polygon), not even keeping it as an exception.
const (
	cursorReferences = "references"
	cursorTransfers  = "transfers"
)

// cursor is a network's scan cursor of a kind: in memory, or as stored
// (0, the last few hundred blocks, when none is).
func (s *Service) cursor(ctx context.Context, network, kind string, m map[string]uint64) uint64 {
	if v, ok := m[network]; ok {
		return v
	}
	v, err := s.Store.ChainCursorOf(ctx, network, kind)
	if err != nil {
		s.log().Warn("watch: stored cursor not read; scanning the recent blocks", "network", network, "kind", kind, "err", err)
		return 0
	}
	m[network] = v
	return v
}

// advance moves a scan cursor; persistPositions stores it once nothing
// read before it is held in memory only.
func (s *Service) advance(network, kind string, m map[string]uint64, next uint64) {
	m[network] = next
	s.remember(kind+"/"+network, strconv.FormatUint(next, 10))
}

// position is a value a stored position took, in a pass.
type position struct {
	pass  uint64
	value string
}

func placeKey(network, wallet string) string { return "place/" + network + "/" + wallet }

// remember records a position's new value in this pass (a value kept
// from an earlier pass adds nothing).
func (s *Service) remember(key, value string) {
	if s.positions == nil {
		s.positions = map[string][]position{}
	}
	h := s.positions[key]
	switch n := len(h); {
	case n > 0 && h[n-1].value == value:
		return
	case n > 0 && h[n-1].pass == s.pass:
		h[n-1].value = value
	default:
		h = append(h, position{pass: s.pass, value: value})
	}
	s.positions[key] = h
}

// heldRead is a read the watcher holds in memory only: the pass that read
// it, its block (EVM) or slot, and since when it is held.
type heldRead struct {
	pass, block uint64
	since       time.Time
}

// maxPositionHold bounds how long a read held in memory holds a network's
// stored positions back: a candidate is kept for maxUnmatchedWait at most,
// and a payment parked longer (a node failing for hours, a session's
// workflow that never answers) must not keep every restart reading hours
// of the chain again. One held longer is lost by a restart.
const maxPositionHold = maxUnmatchedWait + 10*time.Minute

// held is the earliest pass and the lowest block (EVM) of the reads a
// network's watcher holds in memory only, for maxPositionHold at most: a
// candidate waiting for its grace (or for the session due its amount), a
// payment parked to try again. ok is false when there is none.
func (s *Service) held(network string) (pass, block uint64, ok bool) {
	pass, block = ^uint64(0), ^uint64(0)
	now := s.now()
	take := func(r heldRead) {
		if now.Sub(r.since) < maxPositionHold {
			pass, block, ok = min(pass, r.pass), min(block, r.block), true
		}
	}
	for key, c := range s.candidates {
		if strings.HasPrefix(key, network+"/") {
			take(heldRead{pass: c.pass, block: c.in.Block, since: c.firstSeen})
		}
	}
	for _, p := range s.parked[network] {
		take(p)
	}
	return pass, block, ok
}

// safePosition is the newest value of a position taken in a pass before
// held (older ones are dropped): a worker restarted from it reads again
// everything read since, so what it held in memory is found again.
func (s *Service) safePosition(key string, held uint64) (string, bool) {
	h := s.positions[key]
	i := len(h) - 1
	for i >= 0 && h[i].pass >= held {
		i--
	}
	if i < 0 {
		return "", false
	}
	s.positions[key] = h[i:]
	return h[i].value, true
}

// persistPositions stores a network's scan cursors and Solana wallet
// places (models.WalletPlace), at most every 5 seconds, each as it stood
// before the earliest pass whose reads the watcher still holds in memory
// only, and an EVM cursor no further than the lowest block held (held). A
// candidate lives in memory for its grace (up to two hours while a session
// is due its amount), a parked payment until it is settled: stored past
// them, a restarted worker would read on after them, and they would be
// recorded nowhere. Stored behind the reads, a restart reads some
// transactions again, which keeps nothing twice.
func (s *Service) persistPositions(ctx context.Context, network string) {
	if at, ok := s.positionsSaved[network]; ok && s.now().Sub(at) < 5*time.Second {
		return
	}
	if s.persisted == nil {
		s.persisted, s.positionsSaved = map[string]string{}, map[string]time.Time{}
	}
	held, heldBlock, holding := s.held(network)
	fam, _ := chain.FamilyOf(network)
	ok := true
	for _, kind := range []string{cursorReferences, cursorTransfers} {
		k := kind + "/" + network
		v, found := s.safePosition(k, held)
		if fam == chain.FamilyEVM && holding {
			// A held read may lie behind the cursor of the pass before
			// it (a new wallet's transfers read back over the recent
			// blocks, a payment parked from an earlier scan): the
			// cursor goes no further than its block.
			if b, _ := strconv.ParseUint(v, 10, 64); !found || heldBlock < b {
				v, found = strconv.FormatUint(heldBlock, 10), true
			}
		}
		if !found || s.persisted[k] == v {
			continue
		}
		block, _ := strconv.ParseUint(v, 10, 64)
		if err := s.Store.SaveChainCursor(ctx, network, kind, block); err != nil {
			s.log().Warn("watch: cursor not stored", "network", network, "kind", kind, "err", err)
			ok = false
			continue
		}
		s.persisted[k] = v
	}
	places := map[string]string{}
	prefix := placeKey(network, "")
	for k := range s.positions {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if v, found := s.safePosition(k, held); found && s.persisted[k] != v {
			places[strings.TrimPrefix(k, prefix)] = v
		}
	}
	if len(places) > 0 {
		if err := s.Store.SaveWalletPlaces(ctx, network, places); err != nil {
			s.log().Warn("watch: wallet places not stored", "network", network, "err", err)
			ok = false
		} else {
			for w, v := range places {
				s.persisted[placeKey(network, w)] = v
			}
		}
	}
	if ok {
		s.positionsSaved[network] = s.now()
	}
}

// maxRetryFound bounds the found payments kept for the next pass per
// network (a node down for long: the rest are found again by the late
// and unmatched scans).
const maxRetryFound = 1000

// attachFound attaches a payment found by its reference to the session
// (or keeps it as a late payment when the session has ended). It reports
// whether it did, and whether to try again on the next pass.
func (s *Service) attachFound(ctx context.Context, network string, f chain.Found, dispatch Dispatcher) (attached, retry bool) {
	cs, err := s.Store.SessionByReference(ctx, f.Reference)
	if err != nil {
		return false, !errors.Is(err, apperr.ErrNotFound)
	}
	if cs.TxHash != nil {
		if strings.EqualFold(*cs.TxHash, f.TxHash) {
			return false, false // submitted meanwhile, or the transaction it failed on
		}
		if cs.Status != models.StatusFailed && cs.Status != models.StatusComplete {
			// Another transaction holds the session: the customer's own,
			// or a stranger's the chain may yet show not to be its
			// payment and give back. Looked at again until the session
			// takes one or ends (the scan has moved past this one).
			return false, !models.TerminalStatus(cs.Status)
		}
		// The session failed on another transaction (a stranger's hash,
		// an earlier short payment), or another paid it: this one, bound
		// to it, came after.
		return s.lateException(ctx, network, cs, f, dispatch)
	}
	if !models.TerminalStatus(cs.Status) && s.now().Before(cs.ExpiresAt) {
		switch d, err := s.wouldPay(ctx, cs, f); {
		case err != nil:
			s.log().Warn("watch: found payment not verified; retrying", "sessionId", cs.ID, "txHash", f.TxHash, "err", err)
			return false, true
		case d == payLater:
			return false, true
		case d == payDeclined:
			return false, false
		}
	}
	res, err := s.submit(ctx, cs.ID, f.TxHash, "chain")
	if err == nil {
		s.log().Info("watch: payment found by reference and attached", "sessionId", cs.ID, "txHash", res.TxHash)
		return true, false
	}
	if !errors.Is(err, apperr.ErrNotFound) && !errors.Is(err, apperr.ErrConflict) {
		s.log().Warn("watch: found payment not attached; retrying", "sessionId", cs.ID, "err", err)
		return false, true
	}
	// The session ended (expired, cancelled) before its payment arrived:
	// keep it as a late-payment exception.
	cur, lerr := s.Store.CheckoutSession(ctx, cs.ID)
	if lerr != nil {
		return false, true
	}
	if cur.TxHash != nil || !models.TerminalStatus(cur.Status) {
		// Another payment attached meanwhile, or the session is about to
		// end (its expiry is due): looked at again until it has.
		return false, cur.TxHash == nil
	}
	return s.lateException(ctx, network, cur, f, dispatch)
}

// payDecision is what a found transfer is to its open session.
type payDecision int

const (
	payAttach   payDecision = iota // the session's payment (or its payer's own short one)
	payLater                       // not known yet (unseen, amount not final): asked again next pass
	payDeclined                    // does not pay the session: left to the merchant
)

// wouldPay decides whether a transaction found by a session's reference
// may be attached to the open session: only one that pays it in full, or
// one from the wallet the session declares (the customer's own short
// payment fails the session, which the customer sees and the merchant
// holds as an exception). A reference proves nothing about who paid:
// anyone can sign an EIP-3009 authorization with a session's reference as
// its nonce (nonces are per authorizer) or carry its Solana Pay key, so a
// stranger's transfer of one unit, attached, would fail the session of a
// customer about to pay. A transfer declined here stays the merchant's
// money: the unmatched scan (EVM) or the late-payment scan (once the
// session has ended) makes it an exception.
func (s *Service) wouldPay(ctx context.Context, cs *models.CheckoutSession, f chain.Found) (payDecision, error) {
	if s.Verifier == nil || cs.PaymentReference == nil {
		return payAttach, nil // the workflow verifies what is submitted
	}
	key := cs.ID + "/" + strings.ToLower(f.TxHash)
	if _, ok := s.declined[key]; ok {
		return payDeclined, nil
	}
	res, err := s.Verifier.Verify(ctx, chain.VerifyRequest{Network: cs.Network, TxHash: f.TxHash, MerchantAddress: cs.MerchantWalletAddress,
		ExpectedUnits: strconv.FormatInt(cs.ExpectedAmount.Units(), 10), Reference: *cs.PaymentReference})
	if err != nil {
		return payLater, err
	}
	if res.Verdict == chain.VerdictPending && res.ReceivedUnits == "" {
		// Unseen, or (Solana) confirmed but not final: its content is read
		// once final, the verdict's own wait.
		return payLater, nil
	}
	received, _ := strconv.ParseInt(res.ReceivedUnits, 10, 64)
	pays := res.Verdict == chain.VerdictComplete ||
		(res.Verdict == chain.VerdictPending && res.Bound && received >= cs.ExpectedAmount.Units())
	if pays || (cs.WalletAddress != "" && res.Payer != "" && chain.SameAddress(cs.WalletAddress, res.Payer)) {
		return payAttach, nil
	}
	s.declined[key] = s.now()
	s.log().Warn("watch: a transfer carrying a session's reference does not pay it; left to the merchant",
		"sessionId", cs.ID, "txHash", f.TxHash, "receivedUnits", res.ReceivedUnits, "payer", res.Payer, "verdict", res.Verdict)
	return payDeclined, nil
}

// pruneDeclined forgets declined transfers of sessions that can no longer
// be paid (their lifetime and the late grace are over).
func (s *Service) pruneDeclined() {
	horizon := s.now().Add(-s.Lifetime - s.lateGrace())
	for k, at := range s.declined {
		if at.Before(horizon) {
			delete(s.declined, k)
		}
	}
	for k, at := range s.lateWaits {
		// Kept past lateWaitFor: the pass that finds the wait over drops
		// the payment from its retries first.
		if s.now().Sub(at) > 2*lateWaitFor {
			delete(s.lateWaits, k)
		}
	}
}

// lateWaitFor is how long a payment found for an ended session is looked
// at again while it is not final: far past any finality (an Ethereum
// epoch pair, Solana's seconds), short of keeping one that a reorg
// removed for good in the retry list for ever.
const lateWaitFor = time.Hour

// lateWait reports whether a payment found for an ended session, not final
// yet, is to be looked at again: for lateWaitFor after it was first found
// so.
func (s *Service) lateWait(network, hash string) bool {
	if s.lateWaits == nil {
		s.lateWaits = map[string]time.Time{}
	}
	key := network + "/" + strings.ToLower(hash)
	first, ok := s.lateWaits[key]
	if !ok {
		s.lateWaits[key] = s.now()
		return true
	}
	return s.now().Sub(first) < lateWaitFor
}

// lateException verifies a payment bound to an ended session and, when
// the merchant received it, keeps it as an exception naming the session:
// late, or duplicate when the session was paid already by another
// transaction and this one came from its declared wallet too (the customer
// paid twice, a Solana Pay code scanned again). retry is true while the
// transfer is not final or the node or store failed: the scan has moved
// past it, so it is looked at again on the next pass.
func (s *Service) lateException(ctx context.Context, network string, cs *models.CheckoutSession, f chain.Found, dispatch Dispatcher) (kept, retry bool) {
	if s.Verifier == nil {
		return false, false
	}
	// Alone: this transfer, not the session's payment (a transfer that
	// paid nothing would be followed to the payment that completed the
	// session, and its amount kept under the wrong hash).
	res, err := s.Verifier.Verify(ctx, chain.VerifyRequest{Network: network, TxHash: f.TxHash, MerchantAddress: cs.MerchantWalletAddress,
		ExpectedUnits: strconv.FormatInt(cs.ExpectedAmount.Units(), 10), Reference: *cs.PaymentReference, Alone: true})
	if err != nil {
		return false, !chain.IsPermanent(err)
	}
	if res.Verdict == chain.VerdictPending {
		return false, s.lateWait(network, f.TxHash) // not final yet
	}
	units, _ := strconv.ParseInt(res.ReceivedUnits, 10, 64)
	if !res.Bound || units <= 0 || res.PaidBy != "" {
		return false, false
	}
	hash, _ := chain.ParseTxHash(chainFamily(network), f.TxHash)
	kind, msg := models.ExceptionLate, "paid after the checkout session was "+cs.Status
	switch {
	case cs.Status == models.StatusFailed && cs.TxHash != nil:
		msg = "paid after the checkout session failed on transaction " + *cs.TxHash
	case cs.Status == models.StatusComplete && cs.TxHash != nil:
		msg = "paid again after transaction " + *cs.TxHash + " completed the checkout session"
		if cs.WalletAddress != "" && chain.SameAddress(cs.WalletAddress, res.Payer) {
			kind = models.ExceptionDuplicate
		}
	}
	ids, err := s.Store.OpenException(ctx, &models.PaymentException{MerchantID: cs.MerchantID, Mode: cs.Mode, Network: network,
		TxHash: hash, Kind: kind, Amount: money.Amount(units), ExpectedAmount: cs.ExpectedAmount, PayerAddress: res.Payer,
		MerchantWalletAddress: cs.MerchantWalletAddress, SessionIDs: models.StringList{cs.ID},
		Message: msg})
	if err != nil {
		s.log().Warn("watch: late payment not recorded; retrying", "sessionId", cs.ID, "err", err)
		return false, true
	}
	if len(ids) > 0 && dispatch != nil {
		if err := dispatch.Dispatch(ctx, ids); err != nil {
			s.log().Warn("watch: exception deliveries not started", "err", err)
		}
	}
	s.log().Info("watch: payment after the session's end kept as an exception", "sessionId", cs.ID, "txHash", hash, "kind", kind)
	return true, false
}

// recordsPerPass bounds the records VerifyRecordsOnce checks a pass.
const recordsPerPass = 50

// VerifyRecordsOnce checks pending recorded transactions on chain: the
// token must have reached the merchant wallet of the record with at least
// its amount. A record whose hash stays unseen past the not-found window
// fails. It returns how many records it settled.
func (s *Service) VerifyRecordsOnce(ctx context.Context) int {
	if s.Verifier == nil {
		return 0
	}
	// A pass reads on from where the last one stopped, and starts over
	// after the newest: records whose check stays undecided (a hash not
	// seen yet, a node failing) cannot hold the oldest places for ever
	// and keep every other merchant's records pending.
	rows, err := s.Store.PendingRecords(ctx, s.recordsAfter, recordsPerPass)
	if err != nil {
		s.log().Warn("records: pending records not listed", "err", err)
		return 0
	}
	if len(rows) < recordsPerPass {
		s.recordsAfter = ""
	} else {
		s.recordsAfter = rows[len(rows)-1].ID
	}
	n := 0
	for i := range rows {
		t := &rows[i]
		state, msg := s.verifyRecord(ctx, t)
		if state == "" {
			continue
		}
		if err := s.Store.SetRecordVerification(ctx, t.ID, state, msg); err != nil {
			s.log().Warn("records: verification not stored", "transactionId", t.ID, "err", err)
			continue
		}
		n++
	}
	return n
}

func (s *Service) verifyRecord(ctx context.Context, t *models.Transaction) (string, string) {
	if t.MerchantWalletAddress == "" {
		return models.VerificationFailed, "the merchant has no receiving wallet on this network"
	}
	res, err := s.Verifier.Verify(ctx, chain.VerifyRequest{Network: t.Network, TxHash: t.TxHash, MerchantAddress: t.MerchantWalletAddress,
		ExpectedUnits: strconv.FormatInt(max(t.Amount.Units(), 1), 10)})
	switch {
	case err != nil && chain.IsPermanent(err):
		return models.VerificationFailed, err.Error()
	case err != nil:
		return "", ""
	case res.Verdict == chain.VerdictComplete:
		return models.VerificationVerified, res.Message
	case res.Verdict == chain.VerdictFailed:
		return models.VerificationFailed, res.Message
	case !res.Seen && s.now().Sub(t.CreatedAt) > s.NotFoundWindow:
		return models.VerificationFailed, "transaction not found on chain"
	}
	return "", ""
}

// RunWatcher watches for payments by reference and verifies records every
// interval until ctx ends.
func (s *Service) RunWatcher(ctx context.Context, interval time.Duration, dispatch Dispatcher) {
	periodic.Run(ctx, interval, func(ctx context.Context) {
		s.WatchOnce(ctx, dispatch)
		s.VerifyRecordsOnce(ctx)
	})
}

func chainFamily(network string) chain.Family {
	f, _ := chain.FamilyOf(network)
	return f
}
