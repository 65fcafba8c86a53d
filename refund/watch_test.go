package refund

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

const (
	wMerchant = "0x52908400098527886E0F7030069857D2E4169EE7"
	wPayer    = "0x8617E340B3D01FA5F11F306F4090FD50E238070D"
	wOther    = "0xde709f2102306220921060314715629080e2fb77"
)

// fakeChain is an EVM chain's transfers as the watcher reads them: block b
// mined (head - b) seconds before now; logs in ranges of at most
// chain.MaxLogRange blocks from a cursor, or from the first block at or
// after since; each transfer verified as what it is.
type fakeChain struct {
	mu        sync.Mutex
	head      map[string]uint64
	transfers map[string][]chain.Incoming
	scans     []string // network@from:wallets
	calls     int
	failCall  int // the call (counted from 1) that fails; 0: none
	verifyErr map[string]error
	seq       int
}

func newFakeChain() *fakeChain {
	return &fakeChain{head: map[string]uint64{}, transfers: map[string][]chain.Incoming{}, verifyErr: map[string]error{}}
}

// send puts a transfer in a block mined ago seconds ago (0: a new head
// block, the head then moved past its confirmations) and returns its hash.
func (c *fakeChain) send(network, from, to string, units int64, ago uint64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	hash := fmt.Sprintf("0x%064x", 0xabc000+c.seq)
	block := c.head[network] - ago
	if ago == 0 {
		c.head[network] += 3
		block = c.head[network]
		c.head[network] += 3
	}
	c.transfers[network] = append(c.transfers[network], chain.Incoming{TxHash: hash, From: from, To: to,
		Units: strconv.FormatInt(units, 10), Block: block})
	return hash
}

func (c *fakeChain) blockTime(network string, b uint64) time.Time {
	return time.Now().Add(-time.Duration(c.head[network]-b) * time.Second)
}

func (c *fakeChain) FindTransfersFrom(_ context.Context, network string, wallets []string, since time.Time, cur chain.TransferCursor) ([]chain.Incoming, chain.TransferCursor, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.scans = append(c.scans, fmt.Sprintf("%s@%d:%d", network, cur.Block, len(wallets)))
	if c.calls == c.failCall {
		return nil, cur, errors.New("node unreachable")
	}
	head, from := c.head[network], cur.Block
	if from == 0 {
		from = head - min(head, uint64(time.Since(since)/time.Second))
	}
	if from > head {
		return nil, chain.TransferCursor{Block: from}, nil
	}
	to := min(head, from+chain.MaxLogRange-1)
	var out []chain.Incoming
	for _, tr := range c.transfers[network] {
		if tr.Block >= from && tr.Block <= to && slices.ContainsFunc(wallets, func(w string) bool { return chain.SameAddress(w, tr.From) }) {
			out = append(out, tr)
		}
	}
	return out, chain.TransferCursor{Block: to + 1}, nil
}

func (c *fakeChain) Verify(_ context.Context, req chain.VerifyRequest) (chain.VerifyResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.verifyErr[req.TxHash]; err != nil {
		delete(c.verifyErr, req.TxHash)
		return chain.VerifyResult{}, err
	}
	for _, tr := range c.transfers[req.Network] {
		if tr.TxHash != req.TxHash {
			continue
		}
		res := chain.VerifyResult{Seen: true, Payer: tr.From, BlockTime: c.blockTime(req.Network, tr.Block), ReceivedUnits: "0",
			Verdict: chain.VerdictFailed}
		if chain.SameAddress(tr.To, req.MerchantAddress) {
			res.ReceivedUnits = tr.Units
			if tr.Units == req.ExpectedUnits {
				res.Verdict = chain.VerdictComplete
			}
		}
		return res, nil
	}
	return chain.VerifyResult{Verdict: chain.VerdictPending}, nil
}

// watchFixture is a merchant paid on base_sepolia (test) and base (live)
// into wMerchant by wPayer, a refund service whose watcher reads a fake
// chain, and the submits it makes (recorded in the store as the refund
// workflow's submit activity records them).
type watchFixture struct {
	t         *testing.T
	st        *models.Store
	svc       *Service
	chain     *fakeChain
	txns      map[models.Mode]*models.Transaction
	submitted []string // refundId=hash
	submitErr map[string]error
	seqTx     int
	// recordings: late recordings started, recorded (as their workflow
	// would, verified) at the start of the next pass.
	recordings []models.RefundOutcome
	// handRecording: late recordings the merchant's submit started
	// (refundId=hash): the watcher's start of the same finds it busy.
	handRecording map[string]bool
}

func newWatchFixture(t *testing.T) *watchFixture {
	t.Helper()
	st := storetest.Open(t, "sqlite")
	f := &watchFixture{t: t, st: st, chain: newFakeChain(), txns: map[models.Mode]*models.Transaction{}, submitErr: map[string]error{}}
	f.chain.head["base_sepolia"], f.chain.head["base"] = 100_000, 100_000
	m := f.merchant("watch@example.com")
	f.txns[models.ModeTest], f.txns[models.ModeLive] = f.paid(m, models.ModeTest), f.paid(m, models.ModeLive)
	f.restart()
	return f
}

// merchant signs a merchant up.
func (f *watchFixture) merchant(email string) *models.Merchant {
	f.t.Helper()
	m := &models.Merchant{Email: email, PasswordHash: "x", BusinessName: "Shop"}
	if _, err := f.st.CreateMerchant(context.Background(), m, &models.DashboardSession{TokenHash: "s-" + email},
		models.NewKey{Hash: "k-" + email, Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
		f.t.Fatal(err)
	}
	return m
}

// paid records wPayer's payment of 1,000.00 into wMerchant for m.
func (f *watchFixture) paid(m *models.Merchant, mode models.Mode) *models.Transaction {
	f.t.Helper()
	network := map[models.Mode]string{models.ModeTest: "base_sepolia", models.ModeLive: "base"}[mode]
	f.seqTx++
	txn := &models.Transaction{MerchantID: m.ID, Mode: mode, Amount: money.FromCents(100_000), Token: "USDC", Network: network,
		TxHash: fmt.Sprintf("0x%064x", f.seqTx), WalletAddress: wPayer, MerchantWalletAddress: wMerchant,
		Verification: models.VerificationVerified}
	if err := f.st.RecordTransaction(context.Background(), txn); err != nil {
		f.t.Fatal(err)
	}
	return txn
}

// restart gives the fixture a refund service as a worker starting afresh
// has: its watcher knows nothing yet.
func (f *watchFixture) restart() {
	f.svc = &Service{Store: f.st, Chain: f.chain, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.svc.submitFound = func(ctx context.Context, sc models.Scope, id, hash string) error {
		if err := f.submitErr[id]; err != nil {
			delete(f.submitErr, id)
			return err
		}
		if err := f.st.SubmitRefundTx(ctx, id, hash, time.Now()); err != nil {
			return err
		}
		f.submitted = append(f.submitted, id+"="+hash)
		return nil
	}
	f.svc.recordFound = func(ctx context.Context, r *models.Refund, hash string) error {
		if f.handRecording[r.ID+"="+hash] {
			return errSubmitBusy
		}
		f.recordings = append(f.recordings, models.RefundOutcome{RefundID: r.ID, Status: models.RefundSucceeded, TxHash: hash})
		f.submitted = append(f.submitted, "late:"+r.ID+"="+hash)
		return nil
	}
}

// flush records the late recordings started, as RefundLateTransferWorkflow
// does a moment after its start (one the store refuses is not recorded).
func (f *watchFixture) flush() {
	for _, o := range f.recordings {
		o.At = time.Now()
		if _, err := f.st.FinishExpiredRefundLate(context.Background(), o); err != nil && !errors.Is(err, apperr.ErrConflict) {
			f.t.Fatal(err)
		}
	}
	f.recordings = nil
}

func (f *watchFixture) refundOf(txn *models.Transaction, cents int64, dest string) *models.Refund {
	f.t.Helper()
	r, err := f.st.CreateRefund(context.Background(), models.RefundRequest{Scope: models.Scope{MerchantID: txn.MerchantID, Mode: txn.Mode},
		TransactionID: txn.ID, Amount: money.FromCents(cents), Destination: dest, InitiatedBy: models.InitiatedByAPI, Window: 24 * time.Hour})
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *watchFixture) refund(mode models.Mode, cents int64, dest string) *models.Refund {
	f.t.Helper()
	return f.refundOf(f.txns[mode], cents, dest)
}

// pass runs one watcher pass and returns what it submitted.
func (f *watchFixture) pass() []string {
	f.t.Helper()
	f.flush()
	before := len(f.submitted)
	n := f.svc.WatchOnce(context.Background())
	got := f.submitted[before:]
	if n != len(got) {
		f.t.Fatalf("WatchOnce counted %d submits, made %d", n, len(got))
	}
	return slices.Clone(got)
}

func (f *watchFixture) scansSince(i int) []string {
	f.chain.mu.Lock()
	defer f.chain.mu.Unlock()
	return slices.Clone(f.chain.scans[i:])
}

func (f *watchFixture) scanCount() int {
	f.chain.mu.Lock()
	defer f.chain.mu.Unlock()
	return len(f.chain.scans)
}

func (f *watchFixture) pending(r *models.Refund) {
	f.t.Helper()
	if got, err := f.st.RefundByID(context.Background(), r.ID); err != nil || got.Status != models.RefundPending || got.TxHash != nil {
		f.t.Fatalf("refund %s is not pending without a hash: %+v %v", r.ID, got, err)
	}
}

// fail ends a refund so that no transfer is looked for any more (a
// failure other than REFUND_EXPIRED: one that expired is still watched).
func (f *watchFixture) fail(r *models.Refund) {
	f.t.Helper()
	f.failWith(r, chain.ReasonInvalidTransfer)
}

// expire fails a refund REFUND_EXPIRED, as its workflow does at the end of
// its window.
func (f *watchFixture) expire(r *models.Refund) {
	f.t.Helper()
	f.failWith(r, models.ReasonRefundExpired)
}

func (f *watchFixture) failWith(r *models.Refund, reason string) {
	f.t.Helper()
	if _, err := f.st.FinishRefund(context.Background(), models.RefundOutcome{RefundID: r.ID, Status: models.RefundFailed, Reason: reason}); err != nil {
		f.t.Fatal(err)
	}
}

// expiredTwinsPaid makes two test refunds of cents to the payer, both
// expired, and sends a transfer of their amount for each (older first).
func (f *watchFixture) expiredTwinsPaid(cents int64) (older, younger *models.Refund, hOlder, hYounger string) {
	f.t.Helper()
	older, younger = f.refund(models.ModeTest, cents, ""), f.refund(models.ModeTest, cents, "")
	f.expire(older)
	f.expire(younger)
	hOlder = f.chain.send("base_sepolia", wMerchant, wPayer, cents*10_000, 0)
	hYounger = f.chain.send("base_sepolia", wMerchant, wPayer, cents*10_000, 0)
	return older, younger, hOlder, hYounger
}

// TestRefundWatcher drives the refund watcher over a fake EVM chain and a
// real store: what it submits, what it leaves, what it offers again, and
// where each wallet's reading goes.
func TestRefundWatcher(t *testing.T) {
	f := newWatchFixture(t)
	expect := func(got []string, want ...string) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("submitted %v, want %v", got, want)
		}
	}
	if got := f.pass(); len(got) != 0 || f.scanCount() != 0 {
		t.Fatalf("nothing pending: submitted %v, scanned %v", got, f.scansSince(0))
	}

	// 1. A thousand and more pending test refunds of one wallet, an hour
	// old, do not crowd out a live refund: the live transfer is found.
	f.st.SetClock(func() time.Time { return time.Now().Add(-time.Hour) })
	var old []*models.Refund
	for range 1_100 {
		old = append(old, f.refund(models.ModeTest, 1, ""))
	}
	f.st.SetClock(time.Now)
	live := f.refund(models.ModeLive, 100, "")
	hLive := f.chain.send("base", wMerchant, wPayer, 1_000_000, 0)
	expect(f.pass(), live.ID+"="+hLive)

	// 2. After a restart every wallet is read back to its oldest refund
	// (an hour and ten minutes): a transfer of a new refund's amount mined
	// half an hour before it was created is read, verified as too early
	// and left; so are another wallet's transfer, one a unit short and one
	// to another wallet. The refund's own transfer pays it; of twins, the
	// older takes a transfer first.
	f.restart()
	a := f.refund(models.ModeTest, 250, "")
	f.chain.send("base_sepolia", wMerchant, wPayer, 2_500_000, 1800)
	f.chain.send("base_sepolia", wOther, wPayer, 2_500_000, 0)
	f.chain.send("base_sepolia", wMerchant, wPayer, 2_499_999, 0)
	f.chain.send("base_sepolia", wMerchant, wOther, 2_500_000, 0)
	i := f.scanCount()
	expect(f.pass())
	if s := f.scansSince(i); len(s) != 3 || s[0] != "base_sepolia@0:1" {
		t.Fatalf("after a restart, read from the oldest refunds: %v", s)
	}
	f.pending(a)
	b, c := f.refund(models.ModeTest, 300, ""), f.refund(models.ModeTest, 300, "")
	hA := f.chain.send("base_sepolia", wMerchant, wPayer, 2_500_000, 0)
	hB := f.chain.send("base_sepolia", wMerchant, wPayer, 3_000_000, 0)
	expect(f.pass(), a.ID+"="+hA, b.ID+"="+hB)
	hC := f.chain.send("base_sepolia", wMerchant, wPayer, 3_000_000, 0)
	expect(f.pass(), c.ID+"="+hC)

	// 3. A node that cannot verify, a workflow handling another submit, a
	// workflow that does not answer: the transfer is offered again on a
	// later pass, though the wallet's reading moved past its block; a
	// refund that refuses it (another refund holds the hash) is not.
	d, e, g, h := f.refund(models.ModeTest, 410, ""), f.refund(models.ModeTest, 420, ""), f.refund(models.ModeTest, 430, ""),
		f.refund(models.ModeTest, 440, "")
	hD := f.chain.send("base_sepolia", wMerchant, wPayer, 4_100_000, 0)
	hE := f.chain.send("base_sepolia", wMerchant, wPayer, 4_200_000, 0)
	hG := f.chain.send("base_sepolia", wMerchant, wPayer, 4_300_000, 0)
	f.chain.send("base_sepolia", wMerchant, wPayer, 4_400_000, 0)
	f.chain.verifyErr[hD] = errors.New("rpc timeout")
	f.submitErr[e.ID] = errSubmitBusy
	f.submitErr[g.ID] = apperr.Unavailable("the refund service is temporarily unavailable; retry shortly", time.Second)
	f.submitErr[h.ID] = apperr.Conflict("the transaction hash backs another refund")
	expect(f.pass())
	expect(f.pass(), d.ID+"="+hD, e.ID+"="+hE) // g is left alone a minute
	expect(f.pass())
	f.svc.Now = func() time.Time { return time.Now().Add(2 * busyPause) }
	expect(f.pass(), g.ID+"="+hG)
	f.svc.Now = nil
	f.pending(h)

	// 4. A node failing in the middle of a catch-up keeps what was read:
	// the next pass reads on from there, and finds what the failed range
	// held.
	at := f.svc.watch.places["base_sepolia"][walletKey(chain.FamilyEVM, wMerchant)].block
	f.chain.head["base_sepolia"] += 5_000                                 // blocks mined while the node was slow
	f.st.SetClock(func() time.Time { return time.Now().Add(-time.Hour) }) // a refund older than the transfer
	k := f.refund(models.ModeTest, 510, "")
	f.st.SetClock(time.Now)
	hK := f.chain.send("base_sepolia", wMerchant, wPayer, 5_100_000, 2_500) // in the second range
	f.chain.failCall = f.chain.calls + 2                                    // the second range (base has nothing pending: not read)
	expect(f.pass())
	if got := f.svc.watch.places["base_sepolia"][walletKey(chain.FamilyEVM, wMerchant)].block; got != at+chain.MaxLogRange {
		t.Fatalf("after a failed second range the wallet's reading stands at %d, want %d", got, at+chain.MaxLogRange)
	}
	expect(f.pass(), k.ID+"="+hK)

	// 5. Two merchants who both named the wallet theirs: a transfer that
	// could pay refunds of either pays neither.
	other := f.merchant("other@example.com")
	otherTxn := f.paid(other, models.ModeTest)
	mine, theirs := f.refund(models.ModeTest, 610, ""), f.refundOf(otherTxn, 610, "")
	f.chain.send("base_sepolia", wMerchant, wPayer, 6_100_000, 0)
	expect(f.pass())
	f.pending(mine)
	f.pending(theirs)
	f.fail(mine)
	f.fail(theirs)

	// 6. Nothing pending on a network: it is not read, and its wallets are
	// forgotten; a refund later reads its wallet back to its creation,
	// where a transfer made five minutes before it (within the block
	// clocks' slack: a merchant who paid first) is found.
	f.fail(h)
	for _, r := range old {
		f.fail(r)
	}
	f.pass()
	if _, ok := f.svc.watch.places["base_sepolia"]; ok {
		t.Fatal("a network without pending refunds kept its readings")
	}
	i = f.scanCount()
	f.pass()
	if s := f.scansSince(i); len(s) != 0 {
		t.Fatalf("a network without pending refunds was read: %v", s)
	}
	f.chain.head["base_sepolia"] += 50_000 // a quiet day
	hL := f.chain.send("base_sepolia", wMerchant, wOther, 5_200_000, 300)
	l := f.refund(models.ModeTest, 520, wOther)
	i = f.scanCount()
	expect(f.pass(), l.ID+"="+hL)
	if s := f.scansSince(i); len(s) == 0 || s[0] != "base_sepolia@0:1" {
		t.Fatalf("a wallet back after a quiet day: %v", s)
	}

	// 7. A merchant who pays first and creates the refund after, while the
	// wallet is read for another refund: the transfer, read before its
	// refund existed, is read again once the refund is listed, and pays it.
	f.refund(models.ModeTest, 700, "")
	f.pass()
	hQ := f.chain.send("base_sepolia", wMerchant, wPayer, 7_100_000, 0)
	expect(f.pass())
	q := f.refund(models.ModeTest, 710, "")
	expect(f.pass(), q.ID+"="+hQ)

	// 8. More refunds of one amount to other wallets than a transfer is
	// offered to do not hide the one it pays.
	for range candidateRefunds + 5 {
		f.refund(models.ModeTest, 800, wOther)
	}
	last := f.refund(models.ModeTest, 800, "")
	hLast := f.chain.send("base_sepolia", wMerchant, wPayer, 8_000_000, 0)
	expect(f.pass(), last.ID+"="+hLast)

	// 9. A refund that expired without a transfer: one the merchant sends
	// late is recorded (its own workflow verifies it again), once the
	// delay for a refund created after it has passed; a pending refund of
	// the same amount and destination takes a transfer first, also one
	// read before that refund was created.
	late := func(d time.Duration) { f.svc.Now = func() time.Time { return time.Now().Add(d) } }
	x := f.refund(models.ModeTest, 900, "")
	f.expire(x)
	hX := f.chain.send("base_sepolia", wMerchant, wPayer, 9_000_000, 0)
	expect(f.pass())
	late(DefaultLateOfferDelay + time.Second)
	expect(f.pass(), "late:"+x.ID+"="+hX)
	f.svc.Now = nil
	f.flush()
	if got, err := f.st.RefundByID(context.Background(), x.ID); err != nil || got.Status != models.RefundSucceeded || *got.TxHash != hX {
		t.Fatalf("the expired refund paid late: %+v %v", got, err)
	}
	y, z := f.refund(models.ModeTest, 950, ""), f.refund(models.ModeTest, 950, "")
	f.expire(y)
	hZ := f.chain.send("base_sepolia", wMerchant, wPayer, 9_500_000, 0)
	expect(f.pass(), z.ID+"="+hZ)
	late(DefaultLateOfferDelay + time.Second)
	expect(f.pass())
	f.svc.Now = nil
	y2 := f.refund(models.ModeTest, 960, "")
	f.expire(y2)
	hZ2 := f.chain.send("base_sepolia", wMerchant, wPayer, 9_600_000, 0)
	expect(f.pass())
	z2 := f.refund(models.ModeTest, 960, "")
	expect(f.pass(), z2.ID+"="+hZ2)
	late(DefaultLateOfferDelay + time.Second)
	expect(f.pass())
	f.svc.Now = nil
	for _, r := range []*models.Refund{y, y2} {
		if got, err := f.st.RefundByID(context.Background(), r.ID); err != nil || got.Status != models.RefundFailed || got.TxHash != nil {
			t.Fatalf("an expired twin of a pending refund: %+v %v", got, err)
		}
	}

	// 10. Two expired twins, each paid late, both transfers offered in one
	// pass: the recording of the first runs, so the second goes to the
	// other twin.
	ta, tb, h1, h2 := f.expiredTwinsPaid(970)
	expect(f.pass())
	late(DefaultLateOfferDelay + time.Second)
	expect(f.pass(), "late:"+ta.ID+"="+h1, "late:"+tb.ID+"="+h2)
	expect(f.pass())
	f.svc.Now = nil

	// 11. A transfer read while its refund's window closes (the submit
	// refused: the window passed) is offered to it once it has expired.
	closing := f.refund(models.ModeTest, 980, "")
	f.submitErr[closing.ID] = apperr.Conflict("the refund window has passed; the refund fails and its amount is free for a new refund")
	hClosing := f.chain.send("base_sepolia", wMerchant, wPayer, 9_800_000, 0)
	expect(f.pass())
	f.expire(closing)
	expect(f.pass())
	late(DefaultLateOfferDelay + time.Second)
	expect(f.pass(), "late:"+closing.ID+"="+hClosing)
	f.svc.Now = nil

	// 12. A transfer whose hash backs another merchant's refund (both named
	// the wallet theirs) pays no expired refund of this one.
	third := f.merchant("third@example.com")
	theirsPaid := f.refundOf(f.paid(third, models.ModeTest), 990, "")
	mineExpired := f.refund(models.ModeTest, 990, "")
	f.expire(mineExpired)
	hTheirs := f.chain.send("base_sepolia", wMerchant, wPayer, 9_900_000, 0)
	if err := f.st.SubmitRefundTx(context.Background(), theirsPaid.ID, hTheirs, time.Now()); err != nil {
		t.Fatal(err)
	}
	expect(f.pass())
	late(DefaultLateOfferDelay + time.Second)
	expect(f.pass())
	f.svc.Now = nil
	f.flush()
	if got, err := f.st.RefundByID(context.Background(), mineExpired.ID); err != nil || got.Status != models.RefundFailed {
		t.Fatalf("an expired refund and another merchant's transfer: %+v %v", got, err)
	}

	// 13. Expired twins: the merchant submitted the older's hash by hand
	// (its recording runs); the watcher reads that transfer and the
	// younger's: the younger's goes to the younger, not to the older
	// whose recording would refuse it.
	older, younger, hOlder, hYounger := f.expiredTwinsPaid(1010)
	f.handRecording = map[string]bool{older.ID + "=" + hOlder: true}
	expect(f.pass())
	late(DefaultLateOfferDelay + time.Second)
	expect(f.pass(), "late:"+younger.ID+"="+hYounger)
	if _, err := f.st.FinishExpiredRefundLate(context.Background(), models.RefundOutcome{RefundID: older.ID, Status: models.RefundSucceeded,
		TxHash: hOlder, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	expect(f.pass())
	expect(f.pass())
	f.svc.Now = nil
	for r, h := range map[*models.Refund]string{older: hOlder, younger: hYounger} {
		if got, err := f.st.RefundByID(context.Background(), r.ID); err != nil || got.Status != models.RefundSucceeded || *got.TxHash != h {
			t.Fatalf("twins, one submitted by hand: %+v %v", got, err)
		}
	}
}

// A wallet two merchants named theirs pays the refunds of the one that
// proved it (models.WalletProof): the transfer is offered to that
// merchant's refunds alone, never to the other's (even when none of the
// prover's would take it), and a hash the other merchant submitted to a
// refund of its own first does not keep the prover's refund from it.
// Without a proof (TestRefundWatcher, step 5) it pays neither; with two
// provers, neither.
func TestRefundWatcherProvenWallet(t *testing.T) {
	f := newWatchFixture(t)
	ctx := context.Background()
	other := f.merchant("other@example.com")
	mine, theirs := f.refund(models.ModeTest, 610, ""), f.refundOf(f.paid(other, models.ModeTest), 610, "")
	prove := func(merchantID string) {
		t.Helper()
		if _, err := f.st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: merchantID, Family: "evm",
			Address: wMerchant, Message: "m", Signature: "s", ProvedAt: time.Now()}, 0); err != nil {
			t.Fatal(err)
		}
	}
	none := func(what string) {
		t.Helper()
		if got := f.pass(); len(got) != 0 {
			t.Fatalf("%s: submitted %v", what, got)
		}
	}
	prove(f.txns[models.ModeTest].MerchantID)
	h := f.chain.send("base_sepolia", wMerchant, wPayer, 6_100_000, 0)
	if got := f.pass(); fmt.Sprint(got) != fmt.Sprint([]string{mine.ID + "=" + h}) {
		t.Fatalf("submitted %v, want the prover's refund", got)
	}
	f.pending(theirs)

	// A transfer out of the proven wallet that only the other merchant's
	// refund would take: left (its wallet is not the other's).
	theirsOnly := f.refundOf(f.paid(other, models.ModeTest), 630, "")
	f.chain.send("base_sepolia", wMerchant, wPayer, 6_300_000, 0)
	none("a transfer only a non-prover's refund would take")
	f.pending(theirsOnly)
	f.fail(theirsOnly)

	// The other merchant submitted the prover's transfer to a refund of its
	// own first: the prover's refund still takes it.
	mine2, theirs2 := f.refund(models.ModeTest, 640, ""), f.refundOf(f.paid(other, models.ModeTest), 640, "")
	h2 := f.chain.send("base_sepolia", wMerchant, wPayer, 6_400_000, 0)
	if err := f.st.SubmitRefundTx(ctx, theirs2.ID, h2, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := f.pass(); fmt.Sprint(got) != fmt.Sprint([]string{mine2.ID + "=" + h2}) {
		t.Fatalf("a stranger's submit first: submitted %v, want the prover's refund", got)
	}
	// A twin of the prover's refund made since: the transfer, offered again
	// (the wallet's refunds changed), backs the prover's refund already.
	mine3 := f.refund(models.ModeTest, 640, "")
	none("a transfer the prover's refund holds")
	f.pending(mine3)
	f.fail(mine3)

	// Both proved it: neither is told apart, the transfer pays neither.
	prove(other.ID)
	again := f.refund(models.ModeTest, 620, "")
	theirsToo := f.refundOf(f.paid(other, models.ModeTest), 620, "")
	f.chain.send("base_sepolia", wMerchant, wPayer, 6_200_000, 0)
	none("both proved it")
	f.pending(again)
	f.pending(theirsToo)
}

// A worker down over a refund's window's end: the merchant's transfer,
// mined an hour and a half before the end while nothing read the wallet,
// is read once the refund has expired and the worker is back (the reading
// of a wallet new to the watcher starts at the expired refund's creation,
// not at its window's end; a day of blocks over a few passes), and
// recorded late.
func TestRefundWatcherAfterADowntimeOverTheWindowEnd(t *testing.T) {
	f := newWatchFixture(t)
	f.st.SetClock(func() time.Time { return time.Now().Add(-25 * time.Hour) }) // its window ended an hour ago
	r := f.refund(models.ModeTest, 1200, "")
	f.st.SetClock(time.Now)
	hR := f.chain.send("base_sepolia", wMerchant, wPayer, 12_000_000, 5400)
	f.expire(r)
	f.restart()
	// A day back is read over a few passes (catchUpRanges ranges a pass).
	for range 6 {
		if got := f.pass(); len(got) != 0 {
			t.Fatalf("submitted %v", got)
		}
	}
	f.svc.Now = func() time.Time { return time.Now().Add(DefaultLateOfferDelay + time.Second) }
	if got := f.pass(); fmt.Sprint(got) != fmt.Sprint([]string{"late:" + r.ID + "=" + hR}) {
		t.Fatalf("submitted %v, want the late recording of %s", got, hR)
	}
	f.svc.Now = nil
	f.flush()
	if got, err := f.st.RefundByID(context.Background(), r.ID); err != nil || got.Status != models.RefundSucceeded || *got.TxHash != hR {
		t.Fatalf("the refund paid before its window ended: %+v %v", got, err)
	}
}

// TestRefundWatcherContractWalletProof: a contract wallet's proof holds on
// the network it was checked on only. Proven on another network, the
// wallet two merchants name is as unproven on this one (its transfer is
// left for a submit by hand); proven on this one, the prover's refund
// takes the transfer.
func TestRefundWatcherContractWalletProof(t *testing.T) {
	f := newWatchFixture(t)
	ctx := context.Background()
	other := f.merchant("other@example.com")
	mine, theirs := f.refund(models.ModeTest, 610, ""), f.refundOf(f.paid(other, models.ModeTest), 610, "")
	prove := func(network string) {
		t.Helper()
		if _, err := f.st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: f.txns[models.ModeTest].MerchantID, Family: "evm",
			Address: wMerchant, Network: network, Message: "m", Signature: "s", ProvedAt: time.Now()}, 0); err != nil {
			t.Fatal(err)
		}
	}
	prove("eth_sepolia")
	f.chain.send("base_sepolia", wMerchant, wPayer, 6_100_000, 0)
	if got := f.pass(); len(got) != 0 {
		t.Fatalf("proven on another network only: submitted %v", got)
	}
	f.pending(mine)
	f.pending(theirs)
	prove("base_sepolia")
	h := f.chain.send("base_sepolia", wMerchant, wPayer, 6_100_000, 0)
	if got := f.pass(); fmt.Sprint(got) != fmt.Sprint([]string{mine.ID + "=" + h}) {
		t.Fatalf("proven on base_sepolia: submitted %v, want the prover's refund", got)
	}
	f.pending(theirs)
}
