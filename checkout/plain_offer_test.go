package checkout_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
)

// updateRecorder is a Temporal client that records the workflow updates
// asked of it and answers none.
type updateRecorder struct {
	client.Client
	mu      sync.Mutex
	updates []string // workflow id and update id
}

func (r *updateRecorder) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updates = append(r.updates, o.WorkflowID+" "+o.UpdateID)
	return nil, errors.New("updateRecorder: not answered")
}

func (r *updateRecorder) asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.updates...)
}

// TestPlainOfferSkipsAnotherSessionsPayment: a customer with two open
// sessions of one amount at a shop, both declaring their wallet, pays the
// first by its reference (an EIP-3009 authorization) and the first's page
// submits it. The watcher's transfer scan sees the USDC arrive from the
// declared wallet while the first session is still confirming: on the
// code before, it offered the transfer as plain to the second session,
// the one open session declaring that wallet and due that amount, and
// the store failed that session with nothing received (the transfer
// carries the first's reference). The customer's plain transfer still
// goes to the second session.
func TestPlainOfferSkipsAnotherSessionsPayment(t *testing.T) {
	e := newBindEnv(t)
	first := e.session(e.linkA, e.addr(e.customer))
	second := e.session(e.linkA, e.addr(e.customer))
	for _, cs := range []string{first.ID, second.ID} {
		if err := e.st.MarkWorkflowStarted(e.ctx, cs); err != nil {
			t.Fatal(err)
		}
	}
	rec := &updateRecorder{}
	s := &checkout.Service{Store: e.st, Temporal: rec, Finder: e.verifier, Verifier: e.verifier, Networks: e.reg,
		TaskQueue: "checkout", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	bound := e.payBound(first)
	if !e.submit(first, bound) {
		t.Fatal("the first session's own payment was not attached")
	}
	s.WatchOnce(e.ctx, nil)
	s.WatchOnce(e.ctx, nil)
	if got := rec.asked(); len(got) != 0 {
		t.Fatalf("updates asked after the first session's bound payment: %v", got)
	}

	plain := e.payPlain(e.customer, e.merchantA)
	s.WatchOnce(e.ctx, nil)
	got := rec.asked()
	if len(got) != 1 || !strings.Contains(got[0], second.ID) || !strings.Contains(got[0], strings.ToLower(plain)) {
		t.Fatalf("updates asked after the customer's plain transfer: %v (want the second session's submit of %s)", got, plain)
	}
}

// TestRestartRescansWhatWasHeld: a stranger's transfer to a merchant's EVM
// wallet that nothing accounts for waits in the watcher's memory for its
// grace. The transfer scan's cursor, stored as it moved, let a worker
// restarted within that grace start after the transfer's block (its look
// back over the last 300 blocks too short once the chain moved on), and
// the USDC was recorded nowhere. The stored cursor now stays before what
// memory holds: the restarted worker finds the transfer again and keeps
// it as an unmatched exception.
func TestRestartRescansWhatWasHeld(t *testing.T) {
	e := newBindEnv(t)
	clock := time.Now()
	first := e.watcher(time.Hour, func() time.Time { return clock })
	first.WatchOnce(e.ctx, nil)        // nothing held: the cursor is stored
	clock = clock.Add(6 * time.Second) // positions are stored at most every 5 s
	hash := e.payPlainUnits(e.stranger, e.merchantA, 1234)
	first.WatchOnce(e.ctx, nil)
	for range 310 {
		e.sim.Commit()
	}
	clock = clock.Add(6 * time.Second)
	first.WatchOnce(e.ctx, nil)

	e.restartFinds(e.mA.ID, hash, 1234)
}

// watcher is a payment watcher over the env's chain and store, on now's
// clock.
func (e *bindEnv) watcher(grace time.Duration, now func() time.Time) *checkout.Service {
	return &checkout.Service{Store: e.st, Finder: e.verifier, Verifier: e.verifier, Networks: e.reg,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), UnmatchedGrace: grace, Now: now}
}

// restartFinds runs a restarted watcher (no grace) two passes and checks
// the merchant keeps hash as an unmatched exception of units.
func (e *bindEnv) restartFinds(merchantID, hash string, units money.Amount) {
	e.t.Helper()
	restarted := e.watcher(time.Nanosecond, time.Now)
	restarted.WatchOnce(e.ctx, nil)
	restarted.WatchOnce(e.ctx, nil)
	got, _, err := e.st.PaymentExceptions(e.ctx, models.Scope{MerchantID: merchantID, Mode: models.ModeTest},
		models.ExceptionFilter{TxHash: strings.ToLower(hash)}, models.Page{Limit: 5})
	if err != nil || len(got) != 1 || got[0].Kind != models.ExceptionUnmatched || got[0].Amount != units {
		e.t.Fatalf("the transfer held when the worker stopped: exceptions %+v %v", got, err)
	}
}

// TestRestartRescansANewWalletsHeldTransfer: a wallet linked while the
// watcher runs is read back over the recent blocks; a transfer found
// there lies behind the cursor the scan had reached, and a stored cursor
// that passed it (the one of the pass before) let a worker restarted
// more than 300 blocks later miss it. The stored cursor goes no further
// than the block of what memory holds.
func TestRestartRescansANewWalletsHeldTransfer(t *testing.T) {
	e := newBindEnv(t)
	clock := time.Now()
	first := e.watcher(time.Hour, func() time.Time { return clock })
	first.WatchOnce(e.ctx, nil)
	late := e.addr(e.exchange)
	hash := e.payPlainUnits(e.stranger, late, 4321) // before the wallet is linked
	for range 5 {
		e.sim.Commit()
	}
	clock = clock.Add(6 * time.Second)
	first.WatchOnce(e.ctx, nil) // the cursor moves past the transfer's block
	m, _ := e.merchant("late@shop.example", late)
	clock = clock.Add(11 * time.Second) // the wallet list is read again
	first.WatchOnce(e.ctx, nil)         // the new wallet read back: the transfer held
	for range 310 {
		e.sim.Commit()
	}
	clock = clock.Add(6 * time.Second)
	first.WatchOnce(e.ctx, nil)

	e.restartFinds(m.ID, hash, 4321)
}

// TestWalletReportsAreBounded: anyone who knows a session's id may report
// the customer's wallet progress; alternating two statuses grew the
// session's history and its workflow's without end (Temporal ends a run at
// 51,200 events, and the customer's payment was then refused). Past
// maxWalletReports entries a report changes nothing; a report of the
// status the session has asks nothing of the workflow.
func TestWalletReportsAreBounded(t *testing.T) {
	e := newBindEnv(t)
	cs := e.session(e.linkA, e.addr(e.customer))
	if err := e.st.MarkWorkflowStarted(e.ctx, cs.ID); err != nil {
		t.Fatal(err)
	}
	rec := &updateRecorder{}
	s := &checkout.Service{Store: e.st, Temporal: rec, Networks: e.reg, TaskQueue: "checkout",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	status := []string{models.StatusWalletConnecting, models.StatusWalletReady}
	for i := range 19 {
		if err := e.st.RecordSessionTransition(e.ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(), Status: status[i%2],
			Source: "client", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// Now wallet_connecting: the same status asks nothing.
	if _, err := s.Wallet(e.ctx, cs.ID, models.StatusWalletConnecting); err != nil || len(rec.asked()) != 0 {
		t.Fatalf("the same status: %v, updates %v", err, rec.asked())
	}
	_, _ = s.Wallet(e.ctx, cs.ID, models.StatusWalletReady) // the 20th: asked (the recorder answers none)
	if len(rec.asked()) != 1 {
		t.Fatalf("updates %v, want the 20th report", rec.asked())
	}
	if err := e.st.RecordSessionTransition(e.ctx, models.Transition{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusWalletReady,
		Source: "client", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wallet(e.ctx, cs.ID, models.StatusWalletConnecting); err != nil || len(rec.asked()) != 1 {
		t.Fatalf("a report past the bound: %v, updates %v", err, rec.asked())
	}
}
