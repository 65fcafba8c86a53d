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
