package worker

import (
	"context"
	"errors"
	"fmt"
	"github.com/paygate/paygate/periodic"
	"log/slog"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/workflows"
)

// DeliveryReconciler keeps webhook deliveries and their workflows in step,
// as the checkout repairer does for sessions. A delivery the read model
// shows pending must have a running workflow; when it has none:
//
//   - no workflow at all (its start was lost in a crash between the event's
//     write and the dispatch, or the history is gone): it is started, and a
//     delivery with recorded attempts resumes its schedule;
//   - a workflow that closed without an outcome (failed, for instance after
//     its last attempt could not be recorded for the activity's whole
//     budget; terminated; timed out): a new run resumes the schedule with an
//     immediate attempt, under the same webhook-id;
//   - a workflow that completed (delivered, failed or gone) while the row
//     says pending: the row is settled from the workflow's result.
//
// It walks the pending deliveries in creation order, a page per pass, so
// that every one is looked at in turn however many are waiting on a slow
// receiver; and every pass first looks at the deliveries never attempted
// (mostly dispatches lost in a crash), so that one is not left waiting for
// its turn behind thousands retrying against dead receivers. Safe to run in every worker process at once: starts are
// idempotent by workflow id and a settle changes only a pending row.
type DeliveryReconciler struct {
	Client client.Client
	// Queue is the webhook task queue.
	Queue string
	Store *models.Store
	// Grace is how old a pending delivery must be before it is checked, so
	// that a dispatch in flight is not raced (0: one minute).
	Grace time.Duration
	// PageSize is how many deliveries one pass checks (0: 100).
	PageSize int
	Log      *slog.Logger

	cursor string
}

func (r *DeliveryReconciler) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// ReconcileResult counts what one pass did.
type ReconcileResult struct {
	// Checked is how many pending deliveries were looked at.
	Checked int
	// Started counts workflows started or resumed.
	Started int
	// Settled counts rows settled from a completed workflow's result.
	Settled int
}

// ReconcileOnce checks one page of pending deliveries (see DeliveryReconciler).
// Not safe for concurrent use on one reconciler (it keeps a cursor).
func (r *DeliveryReconciler) ReconcileOnce(ctx context.Context) (ReconcileResult, error) {
	var out ReconcileResult
	grace, size := r.Grace, r.PageSize
	if grace == 0 {
		grace = time.Minute
	}
	if size <= 0 {
		size = 100
	}
	cutoff := r.Store.Now().Add(-grace)
	first, err := r.Store.UnattemptedDeliveries(ctx, cutoff, size)
	if err != nil {
		return out, err
	}
	rows, err := r.Store.PendingDeliveries(ctx, r.cursor, cutoff, size)
	if err != nil {
		return out, err
	}
	if len(rows) < size {
		r.cursor = "" // the end: the next pass starts over
	} else {
		r.cursor = rows[len(rows)-1].ID
	}
	seen := make(map[string]bool, len(first))
	for _, d := range first {
		seen[d.ID] = true
	}
	for _, d := range rows {
		if !seen[d.ID] {
			first = append(first, d)
		}
	}
	for i := range first {
		d := &first[i]
		out.Checked++
		started, settled, err := r.reconcile(ctx, d)
		if err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			r.log().Warn("reconcile delivery: not repaired this pass", "deliveryId", d.ID, "err", err)
			continue
		}
		if started {
			out.Started++
		}
		if settled {
			out.Settled++
		}
	}
	return out, nil
}

func (r *DeliveryReconciler) reconcile(ctx context.Context, d *models.WebhookDelivery) (started, settled bool, err error) {
	id := workflows.WebhookDeliveryWorkflowID(d.ID)
	desc, err := r.Client.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		// No run at all, or none that the server still keeps: a start
		// rejects a run another starter (the dispatch, a manual retry,
		// another worker's reconciler) made and finished since the
		// describe, which allowing a duplicate would send again.
		if err := r.start(ctx, d, enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE); err != nil {
			return false, false, err
		}
		r.log().Info("reconcile delivery: started the workflow of a pending delivery that had none",
			"deliveryId", d.ID, "attempts", d.Attempts)
		return true, false, nil
	case err != nil:
		return false, false, fmt.Errorf("describe %s: %w", id, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	switch info.GetStatus() {
	case enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return false, false, nil
	case enums.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		var res workflows.WebhookDeliveryResult
		if err := r.Client.GetWorkflow(ctx, id, info.GetExecution().GetRunId()).Get(ctx, &res); err != nil {
			return false, false, fmt.Errorf("result of %s: %w", id, err)
		}
		status := models.DeliveryFailed // failed, and gone: nothing will be sent
		switch res.State {
		case workflows.WebhookDeliveryStateDelivered:
			status = models.DeliveryDelivered
		case workflows.WebhookDeliveryStatePending:
			return false, false, fmt.Errorf("%s completed in state pending", id)
		}
		ok, err := r.Store.SettleDelivery(ctx, d.ID, status)
		if err == nil && ok {
			r.log().Warn("reconcile delivery: settled a pending delivery from its completed workflow",
				"deliveryId", d.ID, "status", status, "workflowState", res.State)
		}
		return false, ok, err
	}
	// Failed, terminated, timed out or cancelled: closed without an outcome.
	if err := r.start(ctx, d, enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY); err != nil {
		return false, false, err
	}
	r.log().Warn("reconcile delivery: resumed a pending delivery whose workflow closed without an outcome",
		"deliveryId", d.ID, "workflowStatus", info.GetStatus().String(), "attempts", d.Attempts)
	return true, false, nil
}

// start runs the delivery's workflow again: from the first slot when no
// attempt was recorded, otherwise resuming the schedule after the recorded
// attempts with one made at once. A run that was already started meanwhile
// (the dispatcher, another worker's reconciler, a manual retry) is fine.
func (r *DeliveryReconciler) start(ctx context.Context, d *models.WebhookDelivery, reuse enums.WorkflowIdReusePolicy) error {
	in := workflows.WebhookDeliveryInput{DeliveryID: d.ID, PreviousAttempts: d.Attempts,
		ResumeSlot: min(d.ScheduledAttempts, workflows.WebhookDeliveryMaxAttempts-1), Shape: workflows.ShapeCurrent}
	_, err := r.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    workflows.WebhookDeliveryWorkflowID(d.ID),
		TaskQueue:             r.Queue,
		WorkflowIDReusePolicy: reuse,
		EnableEagerStart:      true, // as Dispatcher.Dispatch
	}, workflows.WebhookDeliveryWorkflow, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &already) {
		return fmt.Errorf("start %s: %w", workflows.WebhookDeliveryWorkflowID(d.ID), err)
	}
	return nil
}

// Run reconciles every interval until ctx ends.
func (r *DeliveryReconciler) Run(ctx context.Context, interval time.Duration) {
	periodic.Run(ctx, interval, func(ctx context.Context) {
		if _, err := r.ReconcileOnce(ctx); err != nil && ctx.Err() == nil {
			r.log().Warn("delivery reconcile pass failed", "err", err)
		}
	})
}
