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

// fakeChain is an EVM chain's transfers as the watcher reads them: logs in
// ranges of at most chain.MaxLogRange blocks from a cursor (0: the last 300
// blocks), each transfer verified as what it is.
type fakeChain struct {
	mu        sync.Mutex
	head      map[string]uint64
	transfers map[string][]fakeTransfer
	scans     []string // network@from:wallets
	failScans int
	verifyErr map[string]error
	seq       int
}

type fakeTransfer struct {
	chain.Incoming
	at time.Time
}

func newFakeChain() *fakeChain {
	return &fakeChain{head: map[string]uint64{}, transfers: map[string][]fakeTransfer{}, verifyErr: map[string]error{}}
}

// send puts a transfer in the network's head block (then moves the head
// past its confirmations) and returns its hash.
func (c *fakeChain) send(network, from, to string, units int64, at time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	hash := fmt.Sprintf("0x%064x", 0xabc000+c.seq)
	c.head[network] += 3
	c.transfers[network] = append(c.transfers[network], fakeTransfer{Incoming: chain.Incoming{TxHash: hash, From: from, To: to,
		Units: strconv.FormatInt(units, 10), Block: c.head[network]}, at: at})
	c.head[network] += 3
	return hash
}

func (c *fakeChain) FindTransfersFrom(_ context.Context, network string, wallets []string, _ time.Time, cur chain.TransferCursor) ([]chain.Incoming, chain.TransferCursor, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scans = append(c.scans, fmt.Sprintf("%s@%d:%d", network, cur.Block, len(wallets)))
	if c.failScans > 0 {
		c.failScans--
		return nil, cur, errors.New("node unreachable")
	}
	head, from := c.head[network], cur.Block
	if from == 0 && head > 300 {
		from = head - 300
	}
	if from > head {
		return nil, cur, nil
	}
	to := min(head, from+chain.MaxLogRange-1)
	var out []chain.Incoming
	for _, tr := range c.transfers[network] {
		if tr.Block >= from && tr.Block <= to && slices.ContainsFunc(wallets, func(w string) bool { return chain.SameAddress(w, tr.From) }) {
			out = append(out, tr.Incoming)
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
		res := chain.VerifyResult{Seen: true, Payer: tr.From, BlockTime: tr.at, ReceivedUnits: "0", Verdict: chain.VerdictFailed}
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
}

func newWatchFixture(t *testing.T) *watchFixture {
	t.Helper()
	ctx := context.Background()
	st := storetest.Open(t, "sqlite")
	m := &models.Merchant{Email: "watch@example.com", PasswordHash: "x", BusinessName: "Shop"}
	if _, err := st.CreateMerchant(ctx, m, &models.DashboardSession{TokenHash: "s"}, models.NewKey{Hash: "k", Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	f := &watchFixture{t: t, st: st, chain: newFakeChain(), txns: map[models.Mode]*models.Transaction{}, submitErr: map[string]error{}}
	for mode, network := range map[models.Mode]string{models.ModeTest: "base_sepolia", models.ModeLive: "base"} {
		txn := &models.Transaction{MerchantID: m.ID, Mode: mode, Amount: money.FromCents(100_000), Token: "USDC", Network: network,
			TxHash: fmt.Sprintf("0x%064x", len(f.txns)+1), WalletAddress: wPayer, MerchantWalletAddress: wMerchant,
			Verification: models.VerificationVerified}
		if err := st.RecordTransaction(ctx, txn); err != nil {
			t.Fatal(err)
		}
		f.txns[mode] = txn
		f.chain.head[network] = 10_000
	}
	f.svc = &Service{Store: st, Chain: f.chain, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.svc.submitFound = func(ctx context.Context, sc models.Scope, id, hash string) error {
		if err := f.submitErr[id]; err != nil {
			delete(f.submitErr, id)
			return err
		}
		if err := st.SubmitRefundTx(ctx, id, hash, time.Now()); err != nil {
			return err
		}
		f.submitted = append(f.submitted, id+"="+hash)
		return nil
	}
	return f
}

func (f *watchFixture) refund(mode models.Mode, cents int64, dest string) *models.Refund {
	f.t.Helper()
	r, err := f.st.CreateRefund(context.Background(), models.RefundRequest{Scope: models.Scope{MerchantID: f.txns[mode].MerchantID, Mode: mode},
		TransactionID: f.txns[mode].ID, Amount: money.FromCents(cents), Destination: dest, InitiatedBy: models.InitiatedByAPI, Window: 24 * time.Hour})
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// pass runs one watcher pass and returns what it submitted.
func (f *watchFixture) pass() []string {
	f.t.Helper()
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

// TestRefundWatcher drives the refund watcher over a fake EVM chain and a
// real store: what it submits, what it leaves, what it offers again, and
// where its cursor goes.
func TestRefundWatcher(t *testing.T) {
	f := newWatchFixture(t)
	now := time.Now()
	expect := func(got []string, want ...string) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("submitted %v, want %v", got, want)
		}
	}
	if got := f.pass(); len(got) != 0 || len(f.scansSince(0)) != 0 {
		t.Fatalf("nothing pending: submitted %v, scanned %v", got, f.scansSince(0))
	}

	// 1. A thousand and more pending test refunds of one wallet do not crowd
	// out a live refund: the live transfer is found.
	for range 1_200 {
		f.refund(models.ModeTest, 1, "")
	}
	live := f.refund(models.ModeLive, 100, "")
	hLive := f.chain.send("base", wMerchant, wPayer, 1_000_000, now)
	expect(f.pass(), live.ID+"="+hLive)

	// 2. Transfers that do not pay a refund: another wallet's, one unit
	// short, to another wallet, mined an hour before the refund (past the
	// block clocks' slack): none is submitted.
	a := f.refund(models.ModeTest, 250, "")
	f.chain.send("base_sepolia", wOther, wPayer, 2_500_000, now)
	f.chain.send("base_sepolia", wMerchant, wPayer, 2_499_999, now)
	f.chain.send("base_sepolia", wMerchant, wOther, 2_500_000, now)
	f.chain.send("base_sepolia", wMerchant, wPayer, 2_500_000, now.Add(-time.Hour))
	expect(f.pass())
	expect(f.pass())
	if r, err := f.st.RefundByID(context.Background(), a.ID); err != nil || r.Status != models.RefundPending || r.TxHash != nil {
		t.Fatalf("after transfers that do not pay it: %+v %v", r, err)
	}
	// Its own transfer pays it; of twins, the older takes a transfer first.
	b, c := f.refund(models.ModeTest, 300, ""), f.refund(models.ModeTest, 300, "")
	hA := f.chain.send("base_sepolia", wMerchant, wPayer, 2_500_000, now)
	hB := f.chain.send("base_sepolia", wMerchant, wPayer, 3_000_000, now)
	expect(f.pass(), a.ID+"="+hA, b.ID+"="+hB)
	hC := f.chain.send("base_sepolia", wMerchant, wPayer, 3_000_000, now)
	expect(f.pass(), c.ID+"="+hC)

	// 3. A node that cannot verify, a workflow handling another submit, a
	// workflow that does not answer: the transfer is offered again on a
	// later pass, though the cursor moved past its block; a refund that
	// refuses it (another refund holds the hash) is not.
	d, e, g, h := f.refund(models.ModeTest, 410, ""), f.refund(models.ModeTest, 420, ""), f.refund(models.ModeTest, 430, ""),
		f.refund(models.ModeTest, 440, "")
	hD := f.chain.send("base_sepolia", wMerchant, wPayer, 4_100_000, now)
	hE := f.chain.send("base_sepolia", wMerchant, wPayer, 4_200_000, now)
	hG := f.chain.send("base_sepolia", wMerchant, wPayer, 4_300_000, now)
	f.chain.send("base_sepolia", wMerchant, wPayer, 4_400_000, now)
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

	// 4. A node that fails keeps the cursor where it was.
	i := len(f.scansSince(0))
	f.chain.failScans = 1
	f.pass()
	f.pass()
	scans := f.scansSince(i)
	if len(scans) != 2 || scans[0] != scans[1] {
		t.Fatalf("a failed scan moved the cursor: %v", scans)
	}

	// 5. Nothing pending on a network: it is not read; a refund after a
	// while resumes where the cursor stood (nothing paid meanwhile is
	// skipped), reading up to ten ranges a pass to catch up.
	if _, err := f.st.FinishRefund(context.Background(), models.RefundOutcome{RefundID: h.ID, Status: models.RefundFailed, Reason: "REFUND_EXPIRED"}); err != nil {
		t.Fatal(err)
	}
	rows, err := f.st.RefundsAwaitingTransferFrom(context.Background(), "base_sepolia", wMerchant, money.FromCents(1), time.Now(), 2_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if _, err := f.st.FinishRefund(context.Background(), models.RefundOutcome{RefundID: r.ID, Status: models.RefundFailed, Reason: "REFUND_EXPIRED"}); err != nil {
			t.Fatal(err)
		}
	}
	f.pass()
	i = len(f.scansSince(0))
	f.pass()
	if s := f.scansSince(i); len(s) != 0 {
		t.Fatalf("a network without pending refunds was read: %v", s)
	}
	stood := f.svc.watch.cursors["base_sepolia"].Block
	f.chain.head["base_sepolia"] += 25_000 // a quiet day
	k := f.refund(models.ModeTest, 510, "")
	hK := f.chain.send("base_sepolia", wMerchant, wPayer, 5_100_000, now)
	i = len(f.scansSince(0))
	expect(f.pass())
	if s := f.scansSince(i); len(s) != catchUpRanges || s[0] != fmt.Sprintf("base_sepolia@%d:1", stood) {
		t.Fatalf("catching up from %d: %v", stood, s)
	}
	expect(f.pass(), k.ID+"="+hK)

	// 6. A refund to a wallet the merchant chose is paid there.
	l := f.refund(models.ModeTest, 520, wOther)
	hL := f.chain.send("base_sepolia", wMerchant, wOther, 5_200_000, now)
	expect(f.pass(), l.ID+"="+hL)

	// 7. A restarted worker resumes at the stored cursor, and reads the
	// recent blocks for the wallets it has not covered (it found the new
	// refund's transfer there).
	stored, err := f.st.ChainCursorOf(context.Background(), "base_sepolia", refundCursor)
	if err != nil || stored == 0 {
		t.Fatalf("stored cursor %d %v", stored, err)
	}
	restarted := &Service{Store: f.st, Chain: f.chain, Log: f.svc.Log, submitFound: f.svc.submitFound}
	f.svc = restarted
	m := f.refund(models.ModeTest, 530, "")
	hM := f.chain.send("base_sepolia", wMerchant, wPayer, 5_300_000, now)
	i = len(f.scansSince(0))
	expect(f.pass(), m.ID+"="+hM)
	// (The cursor is stored at most every five seconds: this one is
	// behind, and the pass catches up from it.)
	if s := f.scansSince(i); len(s) != catchUpRanges+1 || s[0] != fmt.Sprintf("base_sepolia@%d:1", stored) || s[len(s)-1] != "base_sepolia@0:1" {
		t.Fatalf("after a restart: %v (stored %d)", s, stored)
	}
}
