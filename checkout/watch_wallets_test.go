package checkout

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// walletScanner is a Solana finder whose wallet reads are recorded: each
// pass's wallets and the places it was given.
type walletScanner struct {
	asked  [][]string
	places []map[string]string
	found  map[string][]chain.Found // per wallet
	fail   bool
}

func (w *walletScanner) FindByReference(_ context.Context, _ string, _ []string, from uint64) ([]chain.Found, uint64, error) {
	if w.fail {
		return nil, from, errors.New("node down")
	}
	return nil, from, nil
}

func (w *walletScanner) FindReferencesPaidTo(_ context.Context, _ string, wallets []string, after map[string]string, _ time.Time) ([]chain.Found, map[string]string, error) {
	w.asked = append(w.asked, append([]string(nil), wallets...))
	cp := map[string]string{}
	for k, v := range after {
		cp[k] = v
	}
	w.places = append(w.places, cp)
	if w.fail {
		return nil, nil, errors.New("node down")
	}
	var out []chain.Found
	newest := map[string]string{}
	for _, a := range wallets {
		out = append(out, w.found[a]...)
		newest[a] = "sig-of-" + a
	}
	return out, newest, nil
}

// TestSolanaWalletScanReadsWatchedWalletsOnly: each pass reads the USDC
// accounts of the wallets that watched sessions pay, not every merchant's
// receiving wallet (an idle merchant's wallet, dusted by a stranger, costs
// no reads); a wallet no watched session pays loses its place, so that
// when one does again it is read back to the watch's start.
func TestSolanaWalletScanReadsWatchedWalletsOnly(t *testing.T) {
	storetest.ForEach(t, testSolanaWalletScan)
}

func testSolanaWalletScan(t *testing.T, st *models.Store) {
	ctx := context.Background()
	paid, ref := watchedSolanaSession(t, st)
	const idle = "HN7cABqLq46Es1jh92dQQisAq662SmxELLLsHHe4YWrH"
	other := &models.Merchant{Email: "idle@example.com", PasswordHash: "x", BusinessName: "Idle", WalletSolana: idle}
	if _, err := st.CreateMerchant(ctx, other, &models.DashboardSession{TokenHash: "s2"}, models.NewKey{Hash: "k2", Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	sc := &walletScanner{found: map[string][]chain.Found{paid: {{Reference: ref, TxHash: "5sig"}, {Reference: "not-a-reference", TxHash: "6sig"}}}}
	s := &Service{Store: st, Finder: sc, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	since := time.Now().Add(-time.Hour)

	found, _, err := s.scanSolanaWallets(ctx, chain.NetworkSolanaDevnet, since)
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.asked) != 1 || len(sc.asked[0]) != 1 || sc.asked[0][0] != paid {
		t.Fatalf("wallets read: %v, want only %s (the idle merchant's wallet has no watched session)", sc.asked, paid)
	}
	if len(found) != 1 || found[0].Reference != ref {
		t.Fatalf("found %v, want the session's payment only", found)
	}
	s.persistPositions(ctx, chain.NetworkSolanaDevnet) // as WatchOnce does after each network's pass
	// The next pass resumes at the wallet's place.
	if _, _, err := s.scanSolanaWallets(ctx, chain.NetworkSolanaDevnet, since); err != nil {
		t.Fatal(err)
	}
	if got := sc.places[1][paid]; got != "sig-of-"+paid {
		t.Fatalf("second pass's place %q", got)
	}
	// Watched no more (ended before since): the node is not asked, the
	// wallet's place dropped.
	later := time.Now().Add(time.Hour)
	if _, _, err := s.scanSolanaWallets(ctx, chain.NetworkSolanaDevnet, later); err != nil {
		t.Fatal(err)
	}
	if len(sc.asked) != 2 {
		t.Fatalf("the node asked with no watched session: %v", sc.asked[2:])
	}
	// Watched again: read on from the place stored since.
	if _, _, err := s.scanSolanaWallets(ctx, chain.NetworkSolanaDevnet, since); err != nil {
		t.Fatal(err)
	}
	if got := sc.places[2]; len(got) != 1 || got[paid] != "sig-of-"+paid {
		t.Fatalf("a wallet watched again read from %v, want its stored place", got)
	}
	sort.Strings(sc.asked[2])
	if len(sc.asked[2]) != 1 || sc.asked[2][0] != paid {
		t.Fatalf("watched again: read %v", sc.asked[2])
	}
	// A restarted worker reads on from the stored place too (it read back
	// a day, every wallet's transactions again), but not from one stored
	// before the window it watches: read back to its start.
	sc.places = nil
	restarted := &Service{Store: st, Finder: sc, Log: s.Log}
	if _, _, err := restarted.scanSolanaWallets(ctx, chain.NetworkSolanaDevnet, since); err != nil {
		t.Fatal(err)
	}
	if got := sc.places[0]; len(got) != 1 || got[paid] != "sig-of-"+paid {
		t.Fatalf("after a restart the wallet was read from %v, want its stored place", got)
	}
	again := &Service{Store: st, Finder: sc, Log: s.Log}
	if _, _, err := again.scanSolanaWallets(ctx, chain.NetworkSolanaDevnet, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := sc.places[1]; len(got) != 0 {
		t.Fatalf("a place stored before the window was read from: %v", got)
	}
}

// TestWatchAsksNoNodeWithoutSessions: a pass over networks where no session
// is watched asks no node anything (a network nobody sells on may have
// none reachable: the live Solana network of `make run` logged a failed
// read every second once the wallet read ran without a reference listed).
func TestWatchAsksNoNodeWithoutSessions(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, "sqlite")
	sc := &walletScanner{fail: true}
	s := &Service{Store: st, Finder: sc, Verifier: &countingVerifier{}, Networks: chain.DefaultRegistry(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s.WatchOnce(ctx, nil)
	if len(sc.asked) != 0 {
		t.Fatalf("wallet reads asked of the node: %v", sc.asked)
	}
}

// countingVerifier answers every verification pending and unseen, and
// counts them.
type countingVerifier struct{ calls int }

func (v *countingVerifier) Verify(context.Context, chain.VerifyRequest) (chain.VerifyResult, error) {
	v.calls++
	return chain.VerifyResult{Verdict: chain.VerdictPending}, nil
}

// TestWatchRetriesWhatItParkedWhenAPassFails: a payment the wallet scan
// found but could not settle yet (not final) is parked for the next pass;
// a next pass whose chain reads fail still tries it again (the wallet's
// read moved past it, so nothing else finds it again).
func TestWatchRetriesWhatItParkedWhenAPassFails(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, "sqlite")
	paid, ref := watchedSolanaSession(t, st)
	sc := &walletScanner{found: map[string][]chain.Found{paid: {{Reference: ref, TxHash: "5sig"}}}}
	v := &countingVerifier{}
	s := &Service{Store: st, Finder: sc, Verifier: v, Networks: chain.DefaultRegistry(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s.WatchOnce(ctx, nil)
	if v.calls != 1 {
		t.Fatalf("first pass: %d verifications, want 1", v.calls)
	}
	sc.fail = true
	s.WatchOnce(ctx, nil)
	if v.calls != 2 {
		t.Fatalf("a failing pass: %d verifications in all, want 2 (the parked payment tried again)", v.calls)
	}
}

// watchedSolanaSession stores a merchant whose open session on Solana
// devnet is paid to the wallet paid and carries ref.
func watchedSolanaSession(t *testing.T, st *models.Store) (paid, ref string) {
	t.Helper()
	ctx := context.Background()
	paid = "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"
	m := &models.Merchant{Email: "scan@example.com", PasswordHash: "x", BusinessName: "Scan", WalletSolana: paid}
	if _, err := st.CreateMerchant(ctx, m, &models.DashboardSession{TokenHash: "s"}, models.NewKey{Hash: "k", Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	l := &models.PaymentLink{MerchantID: m.ID, Mode: models.ModeTest, Name: "L", Amount: money.FromCents(1000), Currency: "USD",
		Network: chain.NetworkSolanaDevnet, Networks: models.StringList{chain.NetworkSolanaDevnet}, Token: "USDC", MerchantWalletAddress: paid,
		WalletAddresses: models.StringMap{chain.NetworkSolanaDevnet: paid}}
	if err := st.CreatePaymentLink(ctx, l); err != nil {
		t.Fatal(err)
	}
	ref, err := NewPaymentReference(chain.FamilySolana)
	if err != nil {
		t.Fatal(err)
	}
	cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: l.ID, Network: chain.NetworkSolanaDevnet,
		WalletType: "solana", ExpectedAmount: money.Amount(10_000_000), MerchantWalletAddress: paid, PaymentReference: &ref,
		CustomerEmail: "c@x.io", ExpiresAt: time.Now().Add(30 * time.Minute)}
	if err := st.CreateCheckoutSession(ctx, cs); err != nil {
		t.Fatal(err)
	}
	return paid, ref
}

// TestLatePaymentNotFinalIsLookedAtForAnHour: a payment found for an ended
// session that is not final yet is looked at again on later passes, for an
// hour: one a reorg removed for good stays not final, and must not stay in
// the retries for ever.
func TestLatePaymentNotFinalIsLookedAtForAnHour(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, "sqlite")
	_, ref := watchedSolanaSession(t, st)
	cs, err := st.SessionByReference(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	cs.Status = models.StatusExpired
	clock := time.Now()
	v := &countingVerifier{} // pending, always
	s := &Service{Store: st, Verifier: v, Now: func() time.Time { return clock }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f := chain.Found{Reference: ref, TxHash: "5late"}
	for _, step := range []struct {
		after time.Duration
		retry bool
	}{{0, true}, {59 * time.Minute, true}, {61 * time.Minute, false}} {
		clock = clock.Add(step.after)
		s.pruneDeclined()
		if kept, retry := s.lateException(ctx, chain.NetworkSolanaDevnet, cs, f, nil); kept || retry != step.retry {
			t.Fatalf("+%v: kept %v, retry %v; want retry %v", step.after, kept, retry, step.retry)
		}
		clock = clock.Add(-step.after)
	}
}

// ledgerScanner is a Solana wallet read over a fixed list of transfers,
// oldest first: a wallet's place is the hash of the last transfer read,
// and a read goes on after it (from the start without one).
type ledgerScanner struct {
	txs    []chain.Incoming
	places []map[string]string
}

func (l *ledgerScanner) FindByReference(_ context.Context, _ string, _ []string, from uint64) ([]chain.Found, uint64, error) {
	return nil, from, nil
}

func (l *ledgerScanner) FindReferencesPaidTo(ctx context.Context, network string, wallets []string, after map[string]string, since time.Time) ([]chain.Found, map[string]string, error) {
	f, _, newest, err := l.FindPaymentsTo(ctx, network, wallets, after, since)
	return f, newest, err
}

func (l *ledgerScanner) FindPaymentsTo(_ context.Context, _ string, wallets []string, after map[string]string, _ time.Time) ([]chain.Found, []chain.Incoming, map[string]string, error) {
	cp := map[string]string{}
	for k, v := range after {
		cp[k] = v
	}
	l.places = append(l.places, cp)
	var in []chain.Incoming
	newest := map[string]string{}
	for _, w := range wallets {
		read := after[w] == ""
		for _, tx := range l.txs {
			if read && tx.To == w {
				in = append(in, tx)
			}
			if tx.TxHash == after[w] {
				read = true
			}
		}
		if n := len(l.txs); n > 0 {
			newest[w] = l.txs[n-1].TxHash
		}
	}
	return nil, in, newest, nil
}

// TestRestartFindsWhatWasHeldInMemory: a transfer nothing accounts for is
// held in memory for its grace before it becomes an unmatched exception.
// The wallet read's place, stored as it moved, let a worker restarted
// within that grace read on after the transfer, and it was recorded
// nowhere. A stored place now stays where it stood before the pass that
// read what the watcher holds in memory only, so the restarted worker
// reads the transfer again and keeps it; once nothing is held, the place
// is stored where the read stands.
func TestRestartFindsWhatWasHeldInMemory(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		paid, _ := watchedSolanaSession(t, st)
		sig0, sig1, sig2 := solana.Signature{9}.String(), solana.Signature{1}.String(), solana.Signature{2}.String()
		stranger := solana.NewWallet().PublicKey().String()
		l := &ledgerScanner{txs: []chain.Incoming{{TxHash: sig0, From: stranger, To: paid, Units: "0", Block: 1}}}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		clock := time.Now()
		now := func() time.Time { return clock }
		first := &Service{Store: st, Finder: l, Networks: chain.DefaultRegistry(), Log: log, UnmatchedGrace: time.Hour, Now: now}
		first.WatchOnce(ctx, nil) // nothing held: the place (sig0) is stored
		clock = clock.Add(6 * time.Second)
		l.txs = append(l.txs, chain.Incoming{TxHash: sig1, From: stranger, To: paid, Units: "1234", Block: 2})
		first.WatchOnce(ctx, nil) // sig1 held
		clock = clock.Add(6 * time.Second)
		l.txs = append(l.txs, chain.Incoming{TxHash: sig2, From: stranger, To: paid, Units: "0", Block: 3})
		first.WatchOnce(ctx, nil)
		if got := first.walletSigs[chain.NetworkSolanaDevnet][paid]; got != sig2 {
			t.Fatalf("the first worker's place %q, want sig2", got)
		}

		// Restarted within the grace: read on from sig0, sig1 kept.
		restarted := &Service{Store: st, Finder: l, Networks: chain.DefaultRegistry(), Log: log, UnmatchedGrace: time.Nanosecond, Now: now}
		restarted.WatchOnce(ctx, nil)
		if p := l.places[3][paid]; p != sig0 {
			t.Fatalf("the restarted worker read on from %q, want sig0 (before the transfer the first one held)", p)
		}
		clock = clock.Add(time.Second)
		restarted.WatchOnce(ctx, nil)
		scope := models.Scope{MerchantID: merchantOf(t, st, paid), Mode: models.ModeTest}
		got, _, err := st.PaymentExceptions(ctx, scope, models.ExceptionFilter{TxHash: sig1}, models.Page{Limit: 5})
		if err != nil || len(got) != 1 || got[0].Kind != models.ExceptionUnmatched || got[0].Amount != 1234 {
			t.Fatalf("the held transfer's exceptions after a restart: %+v %v (places read from: %v)", got, err, l.places)
		}

		// Nothing held any more: the place is stored where the read stands.
		clock = clock.Add(6 * time.Second)
		restarted.WatchOnce(ctx, nil)
		again := &Service{Store: st, Finder: l, Networks: chain.DefaultRegistry(), Log: log, Now: now}
		again.WatchOnce(ctx, nil)
		if p := l.places[len(l.places)-1][paid]; p != sig2 {
			t.Fatalf("a worker restarted with nothing held read on from %q, want sig2", p)
		}
	})
}

// TestParkedPaymentHoldsThePlace: a payment the wallet read found for a
// session but could not settle yet (not final) is parked in memory for
// the next pass; the wallet's place is not stored past it, so a restart
// finds it again.
func TestParkedPaymentHoldsThePlace(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, "sqlite")
	paid, ref := watchedSolanaSession(t, st)
	sc := &walletScanner{found: map[string][]chain.Found{paid: {{Reference: ref, TxHash: "5sig"}}}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	first := &Service{Store: st, Finder: sc, Verifier: &countingVerifier{}, Networks: chain.DefaultRegistry(), Log: log}
	first.WatchOnce(ctx, nil)
	if len(first.retryFound[chain.NetworkSolanaDevnet]) != 1 {
		t.Fatalf("parked: %v, want the payment not final yet", first.retryFound)
	}
	restarted := &Service{Store: st, Finder: sc, Verifier: &countingVerifier{}, Networks: chain.DefaultRegistry(), Log: log}
	restarted.WatchOnce(ctx, nil)
	if p := sc.places[len(sc.places)-1][paid]; p != "" {
		t.Fatalf("a restart read on from %q, past the parked payment", p)
	}
}

func merchantOf(t *testing.T, st *models.Store, wallet string) string {
	t.Helper()
	var ids []string
	for _, w := range mustWallets(t, st) {
		if w.Address == wallet {
			ids = append(ids, w.MerchantID)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("merchants of %s: %v", wallet, ids)
	}
	return ids[0]
}

func mustWallets(t *testing.T, st *models.Store) []models.ReceivingWallet {
	t.Helper()
	w, err := st.ReceivingWallets(context.Background(), chain.NetworkSolanaDevnet, models.ModeTest)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// hashVerifier answers verifications by hash: complete for those in done,
// pending and unseen for the rest.
type hashVerifier struct{ done map[string]bool }

func (v hashVerifier) Verify(_ context.Context, req chain.VerifyRequest) (chain.VerifyResult, error) {
	if v.done[req.TxHash] {
		return chain.VerifyResult{Seen: true, Verdict: chain.VerdictComplete, ReceivedUnits: req.ExpectedUnits}, nil
	}
	return chain.VerifyResult{Verdict: chain.VerdictPending}, nil
}

// TestRecordVerificationGoesOn: each pass checked the 50 oldest pending
// records; 50 whose check stays undecided (made-up hashes within the
// not-found hour, a node failing) kept every later record, any merchant's,
// pending. A pass now reads on after the last one, and starts over after
// the newest.
func TestRecordVerificationGoesOn(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t, "sqlite")
	paid, _ := watchedSolanaSession(t, st)
	merchant := merchantOf(t, st, paid)
	var last string
	for i := range recordsPerPass + 1 {
		rec := &models.Transaction{MerchantID: merchant, Mode: models.ModeTest, Amount: money.Amount(1_000_000), Token: "USDC",
			Network: chain.NetworkSolanaDevnet, TxHash: solana.Signature{byte(i + 1), 7}.String(), MerchantWalletAddress: paid}
		if err := st.RecordTransaction(ctx, rec); err != nil {
			t.Fatal(err)
		}
		last = rec.ID
	}
	lastRec, err := st.Transaction(ctx, models.Scope{MerchantID: merchant, Mode: models.ModeTest}, last)
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{Store: st, Verifier: hashVerifier{done: map[string]bool{lastRec.TxHash: true}}, Networks: chain.DefaultRegistry(),
		NotFoundWindow: time.Hour, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if n := s.VerifyRecordsOnce(ctx); n != 0 {
		t.Fatalf("first pass settled %d, want none (the oldest 50 are undecided)", n)
	}
	if n := s.VerifyRecordsOnce(ctx); n != 1 {
		t.Fatalf("second pass settled %d, want the newest record", n)
	}
	if got, _ := st.Transaction(ctx, models.Scope{MerchantID: merchant, Mode: models.ModeTest}, last); got.Verification != models.VerificationVerified {
		t.Fatalf("the newest record is %s", got.Verification)
	}
}
