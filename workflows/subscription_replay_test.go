package workflows

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/billing"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/temporaldev"
)

// subscriptionHistoryFiles are the saved subscription histories, recorded on
// a real dev server by TestSubscriptionRecordHistories.
var subscriptionHistoryFiles = []string{
	"testdata/subscription_renewed.json",                // first invoice paid by signal, continued as new
	"testdata/subscription_canceled_now.json",           // the next run: invoice issued, cancel_now voids its session
	"testdata/subscription_dunning.json",                // trial, invoice unpaid, past_due, reminders, canceled
	"testdata/subscription_actions.json",                // pause, resume, cancel at period end, cancel_now
	"testdata/subscription_reopened.json",               // the invoice's session cancelled by the customer: a new one, paid
	"testdata/subscription_paid_elsewhere.json",         // a session failed INVOICE_ALREADY_PAID: not replaced; the payer's notice settles
	"testdata/subscription_cancel_in_flight.json",       // cancel while the invoice's transfer is confirmed (cancelInFlightVersion); it bounces: canceled
	"testdata/subscription_resumed.json",                // pause and resume moving the anchor (resumeShiftsAnchorVersion), cancel_now
	"testdata/subscription_reopened_past_due.json",      // four sessions cancelled in grace, the past_due one replaced (reopenPerStepVersion), paid
	"testdata/subscription_settled_exception.json",      // a closed exception refused (the invoice gets a session again), another one accepted: renewed, continued as new
	"testdata/subscription_dunning_voids_all.json",      // as subscription_dunning, its cancel voiding every session of the invoice (cancelVoidsEveryVersion)
	"testdata/subscription_paused_cancel.json",          // trial paused, canceled at period end while paused (pausedCancelVersion), resumed (resumeNextStartVersion), paused again: canceled at the trial's end
	"testdata/subscription_unbillable_held.json",        // the first invoice's session refused twice (Unbillable): held (billingBlockedVersion), then opened; cancel_now
	"testdata/subscription_held_last_window.json",       // the last reminder's session cancelled, its replacement refused past dunning's end: the end waits (heldLastWindowVersion), a session, canceled unpaid
	"testdata/subscription_cancel_older_in_flight.json", // cancel while the grace session's transfer is confirmed: the current one voided, a hold (cancelInFlightRestVersion); it bounces: canceled
	"testdata/subscription_action_at_start.json",        // cancel_now sent at once after the start, recorded after subscription.created (createdFirstVersion)
}

// TestSubscriptionReplay replays every saved history against the current
// workflow code: a change that is not deterministic fails here.
func TestSubscriptionReplay(t *testing.T) {
	replayHistories(t, subscriptionHistoryFiles, SubscriptionWorkflow)
}

// subscriptionLooksFirst is SubscriptionWorkflow with one change that breaks
// determinism: it reads the session status before anything else.
func subscriptionLooksFirst(ctx workflow.Context, st SubscriptionState) (SubscriptionResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Second})
	_ = workflow.ExecuteActivity(ctx, "InvoiceSessionStatus", "x").Get(ctx, nil)
	return SubscriptionWorkflow(ctx, st)
}

// TestSubscriptionReplayDetectsNondeterminism proves the replay test has
// teeth: a changed workflow fails against every saved history.
func TestSubscriptionReplayDetectsNondeterminism(t *testing.T) {
	replayMustDiverge(t, subscriptionHistoryFiles, "SubscriptionWorkflow", subscriptionLooksFirst)
}

// TestSubscriptionRecordHistories records the histories replayed above on a
// real Temporal server, with the real activities over the in-memory fakes
// and periods of seconds. It runs only when SUBSCRIPTION_RECORD_TEMPORAL is
// set: to 1 for a throwaway dev server (temporaldev.StartForTest), or to the
// host:port of a running one:
//
//	SUBSCRIPTION_RECORD_TEMPORAL=1 go test ./workflows/ -run TestSubscriptionRecordHistories -v
func TestSubscriptionRecordHistories(t *testing.T) {
	addr := os.Getenv("SUBSCRIPTION_RECORD_TEMPORAL")
	if addr == "" {
		t.Skip("set SUBSCRIPTION_RECORD_TEMPORAL=1 (or host:port of a dev server) to re-record the subscription replay histories")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	namespace := "default"
	if addr == "1" {
		srv := temporaldev.StartForTest(t)
		addr, namespace = srv.Address(), srv.Namespace()
	}
	c, err := client.Dial(client.Options{HostPort: addr, Namespace: namespace, Logger: webhookTestLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := temporaldev.RegisterSearchAttributes(ctx, c, namespace, temporaldev.PaygateSearchAttributes()); err != nil {
		t.Fatal(err)
	}
	// A saved history is kept: it is what an earlier version of the
	// workflow wrote, which the replay test must keep replaying.
	save := func(id, runID, file string) {
		if _, err := os.Stat(file); err == nil {
			t.Logf("kept %s (delete it to record it again)", file)
			return
		}
		webhookSaveHistory(ctx, t, c, id, runID, file)
	}
	rec := &subRecorder{t: t, ctx: ctx, c: c, queue: "subscription-record-" + time.Now().UTC().Format("150405.000")}
	rec.sessions = newSubFakeSessions()
	rec.sessions.now = time.Now
	w := worker.New(c, rec.queue, worker.Options{})
	w.RegisterWorkflow(SubscriptionWorkflow)
	exceptions := newSubFakeExceptions()
	exceptions.refuse["exc_replay_gone"] = true
	w.RegisterActivity(&activities.SubscriptionActivities{Store: &subSeqStore{stores: map[string]*subFakeStore{}}, Sessions: rec.sessions,
		Exceptions: exceptions, Dispatcher: &checkoutFakeDispatcher{}, PublicBaseURL: "https://pay.example"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	policy := SubscriptionPolicy{GracePeriod: time.Second, Reminders: []time.Duration{time.Second, 2 * time.Second},
		DunningPeriod: 3 * time.Second, InFlightRecheck: time.Second, FixedPeriod: 3 * time.Second}

	// 1 and 2. No trial: the first invoice at once, paid (the signal), the
	// run continues as new; the next run issues the second invoice after
	// the period, and cancel_now voids its session.
	id := rec.start("sub_replay_renewed", policy, 0)
	s1 := rec.waitSessions(1)
	rec.pay(id, s1[0])
	first := rec.waitContinued(id)
	save(id.id, first, subscriptionHistoryFiles[0])
	rec.waitSessions(2)
	if st, err := rec.action(id, ActionCancelNow); err != nil || st.Status != models.SubCanceled {
		t.Fatalf("cancel_now: %+v %v", st, err)
	}
	last := rec.finish(id, CancelReasonRequested)
	save(id.id, last, subscriptionHistoryFiles[1])

	// 3. A one-second trial, then nothing paid: past_due, two reminders,
	// canceled.
	id = rec.start("sub_replay_dunning", policy, time.Second)
	save(id.id, rec.finish(id, CancelReasonUnpaid), subscriptionHistoryFiles[2])

	// 4. Actions on a long trial: pause, a refused pause, resume, cancel at
	// period end, cancel again (no change), cancel_now.
	long := policy
	long.FixedPeriod = time.Hour
	id = rec.start("sub_replay_actions", long, time.Hour)
	for _, step := range []struct{ action, status string }{{ActionPause, models.SubPaused}, {ActionPause, ""},
		{ActionResume, models.SubTrialing}, {ActionCancel, models.SubTrialing}, {ActionCancel, models.SubTrialing},
		{ActionCancelNow, models.SubCanceled}} {
		st, err := rec.action(id, step.action)
		if step.status == "" {
			if !checkoutIsType(err, ErrTypeActionNotAllowed) {
				t.Fatalf("%s: want a refusal, got %+v %v", step.action, st, err)
			}
			continue
		}
		if err != nil || st.Status != step.status {
			t.Fatalf("%s: %+v %v", step.action, st, err)
		}
	}
	save(id.id, rec.finish(id, CancelReasonRequested), subscriptionHistoryFiles[3])

	// 5. The first invoice's session cancelled by the customer: a new
	// session (reopenVersion), paid; the run continues as new.
	long.FixedPeriod, long.GracePeriod = time.Hour, time.Hour
	base := len(rec.sessions.all())
	id = rec.start("sub_replay_reopened", long, 0)
	cancelled := rec.waitSessions(base + 1)[base]
	rec.sessions.mu.Lock()
	cancelled.Status = models.StatusCancelled
	rec.sessions.mu.Unlock()
	if err := c.SignalWorkflow(ctx, id.id, "", SubscriptionSessionSignal, activities.SessionNotice{SessionID: cancelled.ID, Status: models.StatusCancelled}); err != nil {
		t.Fatal(err)
	}
	rec.pay(id, rec.waitSessions(base + 2)[base+1])
	save(id.id, rec.waitContinued(id), subscriptionHistoryFiles[4])

	// 6. The invoice's session fails INVOICE_ALREADY_PAID (another of its
	// sessions paid it; its notice comes second): no new session opens,
	// and the payer's notice settles the invoice; the run continues as new.
	base = len(rec.sessions.all())
	id = rec.start("sub_replay_paid_elsewhere", long, 0)
	s6 := rec.waitSessions(base + 1)[base]
	if err := c.SignalWorkflow(ctx, id.id, "", SubscriptionSessionSignal, activities.SessionNotice{SessionID: s6.ID, Status: models.StatusFailed,
		Reason: models.ReasonInvoicePaid}); err != nil {
		t.Fatal(err)
	}
	rec.pay(id, s6)
	save(id.id, rec.waitContinued(id), subscriptionHistoryFiles[5])
	if n := len(rec.sessions.all()); n != base+1 {
		t.Fatalf("%d sessions opened for the invoice, want 1", n-base)
	}

	// 7. SPEC.md's cancel while the invoice's transfer is being confirmed:
	// taken (cancelAtPeriodEnd), and the transfer bounces: canceled then.
	base = len(rec.sessions.all())
	id = rec.start("sub_replay_cancel_in_flight", long, 0)
	s7 := rec.waitSessions(base + 1)[base]
	rec.sessions.mu.Lock()
	s7.Status = models.StatusBroadcast
	rec.sessions.mu.Unlock()
	if st, err := rec.action(id, ActionCancel); err != nil || !st.CancelAtPeriodEnd || st.Status == models.SubCanceled {
		t.Fatalf("cancel while in flight: %+v %v", st, err)
	}
	rec.sessions.mu.Lock()
	s7.Status = models.StatusFailed
	rec.sessions.mu.Unlock()
	if err := c.SignalWorkflow(ctx, id.id, "", SubscriptionSessionSignal, activities.SessionNotice{SessionID: s7.ID, Status: models.StatusFailed}); err != nil {
		t.Fatal(err)
	}
	save(id.id, rec.finish(id, CancelReasonRequested), subscriptionHistoryFiles[6])

	// 8. Pause and resume (the anchor moves by the pause), cancel_now.
	id = rec.start("sub_replay_resumed", long, time.Hour)
	for _, step := range []struct{ action, status string }{{ActionPause, models.SubPaused}, {ActionResume, models.SubTrialing},
		{ActionCancelNow, models.SubCanceled}} {
		if st, err := rec.action(id, step.action); err != nil || st.Status != step.status {
			t.Fatalf("%s: %+v %v", step.action, st, err)
		}
	}
	save(id.id, rec.finish(id, CancelReasonRequested), subscriptionHistoryFiles[7])

	// 9. The customer cancels the invoice's session four times in the grace
	// period (three reopened, the fourth not); the past_due step starts the
	// budget again: its session, cancelled, is replaced, and paid.
	step := policy
	step.GracePeriod, step.FixedPeriod = 4*time.Second, time.Hour
	base = len(rec.sessions.all())
	id = rec.start("sub_replay_reopened_past_due", step, 0)
	cancelSession := func(s *subFakeSession) {
		rec.sessions.mu.Lock()
		s.Status = models.StatusCancelled
		rec.sessions.mu.Unlock()
		if err := c.SignalWorkflow(ctx, id.id, "", SubscriptionSessionSignal, activities.SessionNotice{SessionID: s.ID, Status: models.StatusCancelled}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 4; i++ {
		cancelSession(rec.waitSessions(base + i)[base+i-1])
	}
	cancelSession(rec.waitSessions(base + 5)[base+4]) // the past_due step's session
	rec.pay(id, rec.waitSessions(base + 6)[base+5])
	save(id.id, rec.waitContinued(id), subscriptionHistoryFiles[8])

	// 10. The merchant resolves payment exceptions into the open invoice:
	// one closed meanwhile (refused: its session voided, a new one
	// opened), then another (its session voided, renewed); cancel_now.
	base = len(rec.sessions.all())
	id = rec.start("sub_replay_settled_exception", long, 0)
	rec.waitSessions(base + 1)
	if _, err := rec.settle(id, "exc_replay_gone"); !checkoutIsType(err, activities.ErrTypeExceptionRefused) {
		t.Fatalf("settle with a closed exception: %v", err)
	}
	rec.waitSessions(base + 2)
	if st, err := rec.settle(id, "exc_replay"); err != nil || st.Status != models.SubActive {
		t.Fatalf("settle: %+v %v", st, err)
	}
	save(id.id, rec.waitContinued(id), subscriptionHistoryFiles[9])
	if st, err := rec.action(id, ActionCancelNow); err != nil || st.Status != models.SubCanceled {
		t.Fatalf("cancel_now: %+v %v", st, err)
	}
	rec.finish(id, CancelReasonRequested)

	// 11. As 3, recorded after cancelVoidsEveryVersion: dunning's end voids
	// every session of the invoice, the older ones first.
	id = rec.start("sub_replay_dunning_voids_all", policy, time.Second)
	save(id.id, rec.finish(id, CancelReasonUnpaid), subscriptionHistoryFiles[10])

	// 12. A three-second trial paused, canceled at period end while paused
	// (it will end then though paused), resumed (the next start moves),
	// paused again: canceled as the trial's moved end passes.
	id = rec.start("sub_replay_paused_cancel", long, 3*time.Second)
	for _, step := range []struct{ action, status string }{{ActionPause, models.SubPaused}, {ActionCancel, models.SubPaused},
		{ActionResume, models.SubTrialing}, {ActionPause, models.SubPaused}} {
		if st, err := rec.action(id, step.action); err != nil || st.Status != step.status {
			t.Fatalf("%s: %+v %v", step.action, st, err)
		}
	}
	save(id.id, rec.finish(id, CancelReasonPeriodEnd), subscriptionHistoryFiles[11])

	// 13. At the trial's end the invoice's session is refused twice (the
	// subscription cannot be billed as it stands): held, recorded once,
	// tried again after BlockedRecheck; the third try opens it; cancel_now.
	held := long
	held.BlockedRecheck = time.Second
	base = len(rec.sessions.all())
	rec.sessions.mu.Lock()
	rec.sessions.refuse = func() error {
		if rec.sessions.refused < 2 {
			return apperr.Invalid("network", "base_sepolia is not configured on this server")
		}
		return nil
	}
	rec.sessions.mu.Unlock()
	id = rec.start("sub_replay_unbillable_held", held, time.Second)
	rec.waitSessions(base + 1)
	if st, err := rec.action(id, ActionCancelNow); err != nil || st.Status != models.SubCanceled {
		t.Fatalf("cancel_now: %+v %v", st, err)
	}
	save(id.id, rec.finish(id, CancelReasonRequested), subscriptionHistoryFiles[12])

	// 14. Nothing paid; the last reminder's session is cancelled by the
	// customer and its replacement refused until after dunning's end: the
	// end waits, the session comes once it can, then canceled unpaid.
	lastWin := policy
	lastWin.DunningPeriod, lastWin.BlockedRecheck = 6*time.Second, time.Second
	rec.sessions.mu.Lock()
	rec.sessions.refuse = nil
	rec.sessions.mu.Unlock()
	base = len(rec.sessions.all())
	id = rec.start("sub_replay_held_last_window", lastWin, time.Second)
	r2 := rec.waitSessions(base + 4)[base+3]
	until := time.Now().Add(8 * time.Second)
	rec.sessions.mu.Lock()
	rec.sessions.refuse = func() error {
		if time.Now().Before(until) {
			return apperr.Invalid("network", "base_sepolia is not configured on this server")
		}
		return nil
	}
	r2.Status = models.StatusCancelled
	rec.sessions.mu.Unlock()
	if err := c.SignalWorkflow(ctx, id.id, "", SubscriptionSessionSignal, activities.SessionNotice{SessionID: r2.ID, Status: models.StatusCancelled}); err != nil {
		t.Fatal(err)
	}
	save(id.id, rec.finish(id, CancelReasonUnpaid), subscriptionHistoryFiles[13])
	if n := len(rec.sessions.all()) - base; n != 5 {
		t.Fatalf("%d sessions opened, want 5 (the fifth after the hold)", n)
	}

	// 15. SPEC.md's cancel while an older session of the invoice (the
	// grace period's) is being confirmed: taken, the current session
	// voided, the verdict awaited on a timer; the older transfer bounces:
	// canceled then.
	rec.sessions.mu.Lock()
	rec.sessions.refuse = nil
	rec.sessions.mu.Unlock()
	older := policy
	older.DunningPeriod, older.Reminders = time.Hour, []time.Duration{30 * time.Minute}
	base = len(rec.sessions.all())
	id = rec.start("sub_replay_cancel_older_in_flight", older, 0)
	s15 := rec.waitSessions(base + 2)
	rec.sessions.mu.Lock()
	s15[base].Status = models.StatusBroadcast
	rec.sessions.mu.Unlock()
	if st, err := rec.action(id, ActionCancel); err != nil || !st.CancelAtPeriodEnd || st.Status == models.SubCanceled {
		t.Fatalf("cancel while the older session is in flight: %+v %v", st, err)
	}
	rec.sessions.mu.Lock()
	voided := s15[base+1].Status
	s15[base].Status = models.StatusFailed
	rec.sessions.mu.Unlock()
	if voided != models.StatusCancelled {
		t.Fatalf("the current session is %s after the cancel, want cancelled", voided)
	}
	if err := c.SignalWorkflow(ctx, id.id, "", SubscriptionSessionSignal, activities.SessionNotice{SessionID: s15[base].ID, Status: models.StatusFailed}); err != nil {
		t.Fatal(err)
	}
	save(id.id, rec.finish(id, CancelReasonRequested), subscriptionHistoryFiles[14])

	// 16. cancel_now sent at once after the start: recorded after
	// subscription.created (createdFirstVersion).
	id = rec.start("sub_replay_action_at_start", long, time.Hour)
	if st, err := rec.action(id, ActionCancelNow); err != nil || st.Status != models.SubCanceled {
		t.Fatalf("cancel_now at the start: %+v %v", st, err)
	}
	save(id.id, rec.finish(id, CancelReasonRequested), subscriptionHistoryFiles[15])
}

// settle sends the settle update for exception excID.
func (r *subRecorder) settle(run subRun, excID string) (SubscriptionState, error) {
	h, err := r.c.UpdateWorkflow(r.ctx, client.UpdateWorkflowOptions{
		UpdateID: fmt.Sprintf("settle-%d", r.updates.Add(1)), WorkflowID: run.id,
		UpdateName: SubscriptionSettleUpdate, Args: []any{SettleRequest{ExceptionID: excID}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	var st SubscriptionState
	if err == nil {
		err = h.Get(r.ctx, &st)
	}
	return st, err
}

// subSeqStore keeps one fake store per subscription (each has its own
// change sequence).
type subSeqStore struct {
	mu     sync.Mutex
	stores map[string]*subFakeStore
}

func (s *subSeqStore) RecordSubscription(ctx context.Context, r activities.SubscriptionRecord) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.stores[r.SubscriptionID]
	if !ok {
		st = newSubFakeStore()
		s.stores[r.SubscriptionID] = st
	}
	return st.RecordSubscription(ctx, r)
}

// subRecorder drives subscription workflows on a real server.
type subRecorder struct {
	t        *testing.T
	ctx      context.Context
	c        client.Client
	queue    string
	sessions *subFakeSessions
	updates  atomic.Int32
}

type subRun struct{ id, runID string }

// start starts a subscription now: trialing for trial, else with its first
// invoice due at once.
func (r *subRecorder) start(name string, p SubscriptionPolicy, trial time.Duration) subRun {
	r.t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	st := SubscriptionState{SubscriptionID: name, MerchantID: "mer_replay", Mode: "test", CustomerID: "cus_replay", Network: checkoutNetwork,
		BillingInterval: string(billing.Month), IntervalCount: 1, Policy: p, Status: models.SubRenewalPending, Anchor: now,
		CurrentPeriodStart: now, CurrentPeriodEnd: now.Add(p.FixedPeriod)}
	if trial > 0 {
		st.Status, st.TrialEnd = models.SubTrialing, now.Add(trial)
		st.Anchor, st.CurrentPeriodEnd = st.TrialEnd, st.TrialEnd
	}
	id := SubscriptionWorkflowID(name) + "-" + r.queue
	run, err := r.c.ExecuteWorkflow(r.ctx, client.StartWorkflowOptions{ID: id, TaskQueue: r.queue,
		TypedSearchAttributes: temporal.NewSearchAttributes(SubscriptionStatusAttr.ValueSet(st.Status), MerchantIDAttr.ValueSet(st.MerchantID),
			CustomerIDAttr.ValueSet(st.CustomerID), NetworkAttr.ValueSet(st.Network)),
		Memo: map[string]any{"amount": "4.20", "network": st.Network},
	}, SubscriptionWorkflow, st)
	if err != nil {
		r.t.Fatal(err)
	}
	return subRun{id: id, runID: run.GetRunID()}
}

// waitSessions waits until n invoice sessions were opened in all.
func (r *subRecorder) waitSessions(n int) []*subFakeSession {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if all := r.sessions.all(); len(all) >= n {
			return all
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d sessions opened, want %d", len(r.sessions.all()), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pay completes a session and tells the workflow, as FinishSession does.
func (r *subRecorder) pay(run subRun, s *subFakeSession) {
	r.t.Helper()
	r.sessions.mu.Lock()
	s.Status = models.StatusComplete
	r.sessions.mu.Unlock()
	if err := r.c.SignalWorkflow(r.ctx, run.id, "", SubscriptionSessionSignal, activities.SessionNotice{SessionID: s.ID, Status: s.Status}); err != nil {
		r.t.Fatal(err)
	}
}

// waitContinued waits for the run to continue as new and returns its id.
func (r *subRecorder) waitContinued(run subRun) string {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := r.c.DescribeWorkflowExecution(r.ctx, run.id, run.runID)
		if err == nil && d.WorkflowExecutionInfo.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
			return run.runID
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s did not continue as new: %v %v", run.id, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *subRecorder) action(run subRun, action string) (SubscriptionState, error) {
	h, err := r.c.UpdateWorkflow(r.ctx, client.UpdateWorkflowOptions{
		UpdateID: fmt.Sprintf("%s-%d", action, r.updates.Add(1)), WorkflowID: run.id,
		UpdateName: SubscriptionActionUpdate, Args: []any{ActionRequest{Action: action}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	var st SubscriptionState
	if err == nil {
		err = h.Get(r.ctx, &st)
	}
	return st, err
}

// finish waits for the subscription's end and returns its last run's id.
func (r *subRecorder) finish(run subRun, reason string) string {
	r.t.Helper()
	wr := r.c.GetWorkflow(r.ctx, run.id, "")
	var res SubscriptionResult
	if err := wr.Get(r.ctx, &res); err != nil || res.Status != models.SubCanceled || res.CancelReason != reason {
		r.t.Fatalf("%s: result %+v %v, want canceled (%s)", run.id, res, err, reason)
	}
	d, err := r.c.DescribeWorkflowExecution(r.ctx, run.id, "")
	if err != nil {
		r.t.Fatal(err)
	}
	return d.WorkflowExecutionInfo.GetExecution().GetRunId()
}
