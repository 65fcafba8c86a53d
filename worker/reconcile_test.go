package worker

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/temporaldev"
	"github.com/paygate/paygate/webhook"
	"github.com/paygate/paygate/workflows"
)

type quietTemporal struct{}

func (quietTemporal) Debug(string, ...any) {}
func (quietTemporal) Info(string, ...any)  {}
func (quietTemporal) Warn(string, ...any)  {}
func (quietTemporal) Error(string, ...any) {}

// flakyReceiver answers 500 to the first fail requests, then 204, and keeps
// the webhook-id of every request.
type flakyReceiver struct {
	*httptest.Server
	mu   sync.Mutex
	fail int
	ids  []string
}

func newFlakyReceiver(t *testing.T, fail int) *flakyReceiver {
	r := &flakyReceiver{fail: fail}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.ids = append(r.ids, req.Header.Get(webhook.HeaderID))
		n := len(r.ids)
		r.mu.Unlock()
		if n <= r.fail {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *flakyReceiver) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// doneElsewhere stands for a delivery workflow that completed with a verdict
// the read model never received.
func doneElsewhere(_ workflow.Context, in workflows.WebhookDeliveryInput) (workflows.WebhookDeliveryResult, error) {
	return workflows.WebhookDeliveryResult{DeliveryID: in.DeliveryID, State: workflows.WebhookDeliveryStateFailed, Attempts: 8}, nil
}

func waitStatus(t *testing.T, st *models.Store, id, want string) *models.WebhookDelivery {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := st.WebhookDelivery(context.Background(), id)
		if err == nil && d.Status == want {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery %s: %+v (%v), want %s", id, d, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// deliveryRig is a real Temporal dev server with a webhook worker, a
// store, a merchant with one endpoint at a receiver failing its first
// `fail` requests, and emit, which makes one pending delivery to it.
type deliveryRig struct {
	c     client.Client
	st    *models.Store
	queue string
	rcv   *flakyReceiver
	emit  func() string
}

func newDeliveryRig(t *testing.T, fail int) *deliveryRig {
	ts := temporaldev.StartForTest(t)
	c, err := client.Dial(client.Options{HostPort: ts.Address(), Namespace: ts.Namespace(), Logger: quietTemporal{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	st := storetest.Open(t, "sqlite")
	ctx := context.Background()
	queue := "webhooks-" + models.NewID()
	w := sdkworker.New(c, queue, sdkworker.Options{})
	w.RegisterWorkflow(workflows.WebhookDeliveryWorkflow)
	w.RegisterWorkflowWithOptions(doneElsewhere, workflow.RegisterOptions{Name: "DoneElsewhere"})
	w.RegisterActivity(&activities.WebhookActivities{Store: deliveryStore{st}, Sender: webhook.NewSender(webhook.Policy{AllowLoopbackHTTP: true})})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	m := &models.Merchant{Email: "rec@example.com", PasswordHash: "x", BusinessName: "Shop"}
	if _, err := st.CreateMerchant(ctx, m, &models.DashboardSession{TokenHash: "s"}, models.NewKey{Hash: "k", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	rcv := newFlakyReceiver(t, fail)
	secret, _ := webhook.NewSecret()
	ep := &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest, URL: rcv.URL + "/hook",
		Events: models.StringList{"checkout.completed"}, Secret: secret}
	if err := st.CreateWebhookEndpoint(ctx, ep); err != nil {
		t.Fatal(err)
	}
	emit := func() string {
		ids, err := st.EmitEvent(ctx, m.ID, models.ModeTest, models.EventSpec{Type: "checkout.completed",
			Key: "checkout.completed:" + models.NewID(), Data: map[string]any{"livemode": false}})
		if err != nil || len(ids) != 1 {
			t.Fatalf("emit: %v %v", ids, err)
		}
		return ids[0]
	}
	return &deliveryRig{c: c, st: st, queue: queue, rcv: rcv, emit: emit}
}

// TestDeliveryReconciler runs the reconciler against a real Temporal dev
// server and a webhook worker:
//   - a pending delivery whose workflow was never started (the dispatch was
//     lost) is started and delivered;
//   - a delivery whose workflow was terminated while it waited for its next
//     attempt (closed without an outcome) is resumed with an immediate
//     attempt under the same webhook-id, numbered after the recorded one;
//   - a pending delivery whose workflow completed with a verdict the row did
//     not get is settled from the workflow's result;
//   - a delivery whose workflow is running is left alone.
func TestDeliveryReconciler(t *testing.T) {
	rig := newDeliveryRig(t, 1) // the first request fails, every later one is delivered
	c, st, queue, rcv, emit := rig.c, rig.st, rig.queue, rig.rcv, rig.emit
	ctx := context.Background()
	rec := &DeliveryReconciler{Client: c, Queue: queue, Store: st, Grace: time.Nanosecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	// Terminated while waiting: attempt 1 fails (500), the run waits a
	// minute for attempt 2; meanwhile the reconciler leaves it alone.
	waiting := emit()
	if err := (Dispatcher{Client: c, Queue: queue}).Dispatch(ctx, []string{waiting}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for d, _ := st.WebhookDelivery(ctx, waiting); d.Attempts < 1; d, _ = st.WebhookDelivery(ctx, waiting) {
		if time.Now().After(deadline) {
			t.Fatal("attempt 1 not recorded")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if res, err := rec.ReconcileOnce(ctx); err != nil || res.Checked != 1 || res.Started != 0 || res.Settled != 0 {
		t.Fatalf("a running delivery must be left alone: %+v %v", res, err)
	}
	if err := c.TerminateWorkflow(ctx, workflows.WebhookDeliveryWorkflowID(waiting), "", "chaos"); err != nil {
		t.Fatal(err)
	}

	// Never dispatched.
	lost := emit()

	// Completed with a verdict the row never got.
	settled := emit()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.WebhookDeliveryWorkflowID(settled), TaskQueue: queue},
		"DoneElsewhere", workflows.WebhookDeliveryInput{DeliveryID: settled})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}

	res, err := rec.ReconcileOnce(ctx)
	if err != nil || res.Checked != 3 || res.Started != 2 || res.Settled != 1 {
		t.Fatalf("reconcile: %+v %v, want 3 checked, 2 started, 1 settled", res, err)
	}
	waitStatus(t, st, lost, models.DeliveryDelivered)
	d := waitStatus(t, st, waiting, models.DeliveryDelivered)
	if d.Attempts != 2 {
		t.Errorf("resumed delivery: %d attempts, want 2 (numbering continues)", d.Attempts)
	}
	if d, _ := st.WebhookDelivery(ctx, settled); d.Status != models.DeliveryFailed {
		t.Errorf("settled delivery: %s, want failed", d.Status)
	}
	byID := map[string]int{}
	for _, id := range rcv.seen() {
		byID[id]++
	}
	if byID[waiting] != 2 || byID[lost] != 1 || byID[settled] != 0 {
		t.Errorf("receiver saw %v: want the resumed delivery twice (one webhook-id), the lost one once, the settled one never", byID)
	}
	// Nothing is pending any more: a further pass has nothing to do.
	if res, err := rec.ReconcileOnce(ctx); err != nil || res.Checked != 0 {
		t.Errorf("second pass: %+v %v", res, err)
	}
}

// TestResumeCountsScheduledAttemptsOnly: support's retries are extra
// attempts, not slots of the retry schedule. A delivery whose first
// scheduled attempt failed and which support retried seven times (eight
// attempts) and whose run was then lost resumes at slot 2, keeping the
// schedule's remaining day and more: before, it resumed at slot 8 and
// failed at once.
func TestResumeCountsScheduledAttemptsOnly(t *testing.T) {
	rig := newDeliveryRig(t, 1000) // the receiver always fails
	c, st, queue := rig.c, rig.st, rig.queue
	ctx := context.Background()
	id := rig.emit()
	if err := (Dispatcher{Client: c, Queue: queue}).Dispatch(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	waitAttempts := func(n int) *models.WebhookDelivery {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			d, err := st.WebhookDelivery(ctx, id)
			if err == nil && d.Attempts >= n {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatalf("attempt %d not recorded", n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitAttempts(1)
	for n := 2; n <= 8; n++ { // seven retries in the minute before slot 2
		d, err := st.WebhookDelivery(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := (Retrier{Client: c, Queue: queue}).RetryDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
		waitAttempts(n)
	}
	if d := waitAttempts(8); d.ScheduledAttempts != 1 {
		t.Fatalf("scheduled attempts %d after one slot and seven retries, want 1", d.ScheduledAttempts)
	}
	if err := c.TerminateWorkflow(ctx, workflows.WebhookDeliveryWorkflowID(id), "", "chaos"); err != nil {
		t.Fatal(err)
	}
	rec := &DeliveryReconciler{Client: c, Queue: queue, Store: st, Grace: time.Nanosecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if res, err := rec.ReconcileOnce(ctx); err != nil || res.Started != 1 {
		t.Fatalf("reconcile: %+v %v", res, err)
	}
	d := waitAttempts(9)
	if d.ScheduledAttempts != 2 {
		t.Errorf("the resumed run's attempt took slot %d, want 2", d.ScheduledAttempts)
	}
	// The resumed run waits 5 minutes for slot 3: the delivery stays pending.
	var st2 workflows.WebhookDeliveryStatus
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := c.QueryWorkflow(ctx, workflows.WebhookDeliveryWorkflowID(id), "", workflows.WebhookStatusQuery)
		if err == nil && v.Get(&st2) == nil && !st2.NextAttemptAt.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resumed run not waiting for its next slot: %+v %v", st2, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st2.ScheduledAttempts != 2 || st2.State != workflows.WebhookDeliveryStatePending {
		t.Errorf("resumed run: %+v, want pending after scheduled attempt 2", st2)
	}
	if d, _ := st.WebhookDelivery(ctx, id); d.Status != models.DeliveryPending {
		t.Errorf("delivery %s after two scheduled attempts, want pending", d.Status)
	}
}

// TestReconcilerLooksAtUnattemptedFirst: a delivery whose dispatch was lost
// is started in the first pass, however many pending deliveries come before
// it in id order (here two waiting for their next slot, a page of one):
// before, it waited for its turn in the walk.
func TestReconcilerLooksAtUnattemptedFirst(t *testing.T) {
	rig := newDeliveryRig(t, 1000) // the receiver always fails
	c, st, queue := rig.c, rig.st, rig.queue
	ctx := context.Background()
	waiting := []string{rig.emit(), rig.emit()}
	if err := (Dispatcher{Client: c, Queue: queue}).Dispatch(ctx, waiting); err != nil {
		t.Fatal(err)
	}
	for _, id := range waiting {
		deadline := time.Now().Add(20 * time.Second)
		for d, _ := st.WebhookDelivery(ctx, id); d.Attempts < 1; d, _ = st.WebhookDelivery(ctx, id) {
			if time.Now().After(deadline) {
				t.Fatal("attempt 1 not recorded")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	lost := rig.emit() // never dispatched
	rec := &DeliveryReconciler{Client: c, Queue: queue, Store: st, Grace: time.Nanosecond, PageSize: 1,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	res, err := rec.ReconcileOnce(ctx)
	if err != nil || res.Started != 1 {
		t.Fatalf("first pass: %+v %v, want the lost dispatch started", res, err)
	}
	if _, err := c.DescribeWorkflowExecution(ctx, workflows.WebhookDeliveryWorkflowID(lost), ""); err != nil {
		t.Fatalf("the lost dispatch's workflow: %v", err)
	}
}

// TestFailedDeliveryFoundInTheWebUI: on a real dev server (paygate's search
// attributes registered as `paygate worker` does), a run that ends failed is
// found with DeliveryStatus="failed", as an operator filters the Web UI's
// list; a run still retrying is not.
func TestFailedDeliveryFoundInTheWebUI(t *testing.T) {
	rig := newDeliveryRig(t, 1<<30) // the receiver fails every request
	ctx := context.Background()
	failed, retrying := rig.emit(), rig.emit()
	// A manual run makes one final attempt, which fails.
	run, err := rig.c.SignalWithStartWorkflow(ctx, workflows.WebhookDeliveryWorkflowID(failed), workflows.WebhookRetrySignal, nil,
		client.StartWorkflowOptions{ID: workflows.WebhookDeliveryWorkflowID(failed), TaskQueue: rig.queue}, workflows.WebhookDeliveryWorkflow,
		workflows.WebhookDeliveryInput{DeliveryID: failed, ManualRetry: true, Shape: workflows.ShapeCurrent})
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.WebhookDeliveryResult
	if err := run.Get(ctx, &res); err != nil || res.State != workflows.WebhookDeliveryStateFailed {
		t.Fatalf("manual run: %+v %v, want failed", res, err)
	}
	// A scheduled run: attempt 1 fails, attempt 2 waits a minute.
	if err := (Dispatcher{Client: rig.c, Queue: rig.queue}).Dispatch(ctx, []string{retrying}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rig.c.TerminateWorkflow(context.Background(), workflows.WebhookDeliveryWorkflowID(retrying), "", "test over")
	})
	deadline := time.Now().Add(20 * time.Second)
	for d, _ := rig.st.WebhookDelivery(ctx, retrying); d.Attempts < 1; d, _ = rig.st.WebhookDelivery(ctx, retrying) {
		if time.Now().After(deadline) {
			t.Fatal("attempt 1 not recorded")
		}
		time.Sleep(50 * time.Millisecond)
	}
	query := `DeliveryStatus = "failed" AND TaskQueue = "` + rig.queue + `"`
	deadline = time.Now().Add(15 * time.Second)
	for {
		resp, err := rig.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range resp.GetExecutions() {
			ids = append(ids, e.GetExecution().GetWorkflowId())
		}
		if len(ids) == 1 && ids[0] == workflows.WebhookDeliveryWorkflowID(failed) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s lists %v, want only the failed delivery's workflow", query, ids)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// raceDescribe is a Temporal client whose describe answers "not found"
// after running before it what a dispatcher racing the reconciler does:
// the delivery's workflow started, delivered and closed.
type raceDescribe struct {
	client.Client
	before func()
}

func (r raceDescribe) DescribeWorkflowExecution(ctx context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	r.before()
	return nil, serviceerror.NewNotFound("workflow not found (as described before the dispatch)")
}

// TestReconcilerDoesNotSendAgain: the reconciler describes a pending
// delivery's workflow, finds none, and starts one; a dispatcher (a worker
// back from a crash replaying its outcome, another worker's reconciler)
// that started, delivered and closed the workflow in between made the
// reconciler's start, which allowed a duplicate, send the delivered
// webhook a second time.
func TestReconcilerDoesNotSendAgain(t *testing.T) {
	rig := newDeliveryRig(t, 0)
	ctx := context.Background()
	id := rig.emit()
	rec := &DeliveryReconciler{Queue: rig.queue, Store: rig.st, Grace: time.Nanosecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rec.Client = raceDescribe{Client: rig.c, before: func() {
		if err := (Dispatcher{Client: rig.c, Queue: rig.queue}).Dispatch(ctx, []string{id}); err != nil {
			t.Error(err)
		}
		if err := rig.c.GetWorkflow(ctx, workflows.WebhookDeliveryWorkflowID(id), "").Get(ctx, nil); err != nil {
			t.Error(err)
		}
	}}
	if _, err := rec.ReconcileOnce(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // a second run, had one started, delivers at once
	if ids := rig.rcv.seen(); len(ids) != 1 {
		t.Fatalf("receiver saw %v, want the delivery once", ids)
	}
}
