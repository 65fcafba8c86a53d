package worker

import (
	"context"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/workflows"
)

// A support retry of a pending delivery whose workflow is not running (its
// dispatch was lost) starts a run that keeps the schedule: the receiver
// refusing that first attempt leaves the delivery pending with its next
// attempt scheduled, not failed after one attempt of eight. A retry of a
// delivery that has failed still makes exactly one attempt.
func TestRetryOfAPendingDeliveryKeepsItsSchedule(t *testing.T) {
	rig := newDeliveryRig(t, 1) // the first request fails, every later one is delivered
	ctx := context.Background()
	lost := rig.emit() // never dispatched
	d, err := rig.st.WebhookDelivery(ctx, lost)
	if err != nil {
		t.Fatal(err)
	}
	if err := (Retrier{Client: rig.c, Queue: rig.queue}).RetryDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for d, _ = rig.st.WebhookDelivery(ctx, lost); d.Attempts < 1; d, _ = rig.st.WebhookDelivery(ctx, lost) {
		if time.Now().After(deadline) {
			t.Fatal("the retried attempt was not recorded")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d.Status != models.DeliveryPending || d.Attempts != 1 {
		t.Fatalf("after one refused attempt: %s, %d attempts (want pending, 1)", d.Status, d.Attempts)
	}
	v, err := rig.c.QueryWorkflow(ctx, workflows.WebhookDeliveryWorkflowID(lost), "", workflows.WebhookStatusQuery)
	if err != nil {
		t.Fatal(err)
	}
	var st workflows.WebhookDeliveryStatus
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	if st.State != workflows.WebhookDeliveryStatePending || st.NextAttemptAt.IsZero() {
		t.Fatalf("the run does not wait for its next scheduled attempt: %+v", st)
	}
	// Asked again, the running workflow answers with an extra attempt:
	// delivered (the receiver now answers 204).
	if err := (Retrier{Client: rig.c, Queue: rig.queue}).RetryDelivery(ctx, d); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, rig.st, lost, models.DeliveryDelivered)
	if ids := rig.rcv.seen(); len(ids) != 2 || ids[0] != lost || ids[1] != lost {
		t.Fatalf("receiver saw %v", ids)
	}
}

// TestRetryFromAStaleCopy: support's retry works from the row it read,
// which may say pending while the attempt in flight delivers and its run
// completes. A run keeping the schedule started from that copy sent the
// delivered delivery again on the schedule for a day and more, its first
// attempt numbered as the delivered one and overwriting it in the log.
// Now the copy's schedule run is refused and the delivery is read again:
// the retry is one extra attempt, numbered after the delivered one.
func TestRetryFromAStaleCopy(t *testing.T) {
	rig := newDeliveryRig(t, 0) // every request is delivered
	ctx := context.Background()
	id := rig.emit()
	stale, err := rig.st.WebhookDelivery(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := (Dispatcher{Client: rig.c, Queue: rig.queue}).Dispatch(ctx, []string{id}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, rig.st, id, models.DeliveryDelivered)
	if err := rig.c.GetWorkflow(ctx, workflows.WebhookDeliveryWorkflowID(id), "").Get(ctx, nil); err != nil {
		t.Fatal(err) // the run completed
	}
	if stale.Status != models.DeliveryPending {
		t.Fatalf("the copy says %s", stale.Status)
	}
	if err := (Retrier{Client: rig.c, Queue: rig.queue, Reload: rig.st.WebhookDelivery}).RetryDelivery(ctx, stale); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for d, _ := rig.st.WebhookDelivery(ctx, id); d.Attempts < 2; d, _ = rig.st.WebhookDelivery(ctx, id) {
		if time.Now().After(deadline) {
			t.Fatal("the retried attempt was not recorded")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var res workflows.WebhookDeliveryResult
	if err := rig.c.GetWorkflow(ctx, workflows.WebhookDeliveryWorkflowID(id), "").Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.State != workflows.WebhookDeliveryStateDelivered {
		t.Fatalf("the retry's run ended %+v", res)
	}
	atts, err := rig.st.DeliveryAttempts(ctx, []string{id})
	if err != nil {
		t.Fatal(err)
	}
	if got := atts[id]; len(got) != 2 || got[0].ResponseStatus == nil || got[1].ResponseStatus == nil {
		t.Fatalf("attempts %+v, want two delivered ones", got)
	}
	if ids := rig.rcv.seen(); len(ids) != 2 {
		t.Fatalf("receiver saw %v, want the delivery and the one retry", ids)
	}
}
