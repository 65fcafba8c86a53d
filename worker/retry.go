package worker

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/workflows"
)

// RetryDelivery asks for one immediate attempt of a delivery. It sends the
// retry signal with SignalWithStartWorkflow: a running delivery workflow
// answers the signal with an extra attempt; when the workflow has closed
// (delivered, failed or gone), a new run of webhook-delivery:<id> starts with
// ManualRetry and makes exactly one attempt, numbered after d.Attempts; a
// pending delivery without a running workflow gets a run that keeps the
// retry schedule. d is a copy read before: when it says pending but its
// run completed since (delivered, or failed for good), no run with the
// schedule is started on a delivered delivery; reload reads the delivery
// again and one attempt after what it holds is made. The
// API's retry route and `paygate deliveries retry` both call it.
func RetryDelivery(ctx context.Context, c client.Client, queue string, d *models.WebhookDelivery,
	reload func(context.Context, string) (*models.WebhookDelivery, error)) (client.WorkflowRun, error) {
	if c == nil || queue == "" {
		return nil, errors.New("retry delivery: a Temporal client and the webhook task queue are required")
	}
	if d == nil || d.ID == "" {
		return nil, errors.New("retry delivery: no delivery")
	}
	in := workflows.WebhookDeliveryInput{DeliveryID: d.ID, ManualRetry: true, PreviousAttempts: d.Attempts, Shape: workflows.ShapeCurrent}
	if d.Status == models.DeliveryPending {
		// Pending: its workflow runs (the signal asks it for an extra
		// attempt), or it is not running (a lost dispatch, a run closed
		// without a verdict). A run started here keeps the retry schedule,
		// as the reconciler's would, its first attempt at once answering
		// the signal: one manual attempt made final would fail the delivery
		// after a single refusal, short of SPEC.md's eight.
		in = workflows.WebhookDeliveryInput{DeliveryID: d.ID, PreviousAttempts: d.Attempts,
			ResumeSlot: min(d.ScheduledAttempts, workflows.WebhookDeliveryMaxAttempts-1), Shape: workflows.ShapeCurrent}
	}
	opts := client.StartWorkflowOptions{TaskQueue: queue}
	if d.Status == models.DeliveryPending {
		// A completed run wrote the verdict this copy predates: a new run
		// keeping the schedule would send a delivered delivery again for
		// a day. A run closed without an outcome (terminated, failed) is
		// resumed.
		opts.WorkflowIDReusePolicy = enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
	}
	run, err := c.SignalWithStartWorkflow(ctx, workflows.WebhookDeliveryWorkflowID(d.ID), workflows.WebhookRetrySignal, nil,
		opts, workflows.WebhookDeliveryWorkflow, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if d.Status == models.DeliveryPending && errors.As(err, &already) && reload != nil {
		fresh, rerr := reload(ctx, d.ID)
		if rerr != nil {
			return nil, fmt.Errorf("retry delivery %s: read again: %w", d.ID, rerr)
		}
		if fresh.Status != models.DeliveryPending {
			return RetryDelivery(ctx, c, queue, fresh, nil)
		}
		// Its run completed and its verdict is not recorded yet (the
		// reconciler settles it): nothing to start now.
		return nil, apperr.Conflict("the delivery's last run just finished and its outcome is being recorded; retry in a minute")
	}
	if err != nil {
		return nil, fmt.Errorf("signal-with-start %s: %w", workflows.WebhookDeliveryWorkflowID(d.ID), err)
	}
	return run, nil
}

// Retrier retries deliveries on one Temporal client and task queue; it
// satisfies the API's DeliveryRetrier.
type Retrier struct {
	// Client talks to Temporal.
	Client client.Client
	// Queue is the webhook delivery task queue.
	Queue string
	// Reload reads a delivery again (RetryDelivery); nil: none.
	Reload func(context.Context, string) (*models.WebhookDelivery, error)
}

// RetryDelivery makes one immediate attempt of d (see the function RetryDelivery).
func (r Retrier) RetryDelivery(ctx context.Context, d *models.WebhookDelivery) error {
	_, err := RetryDelivery(ctx, r.Client, r.Queue, d, r.Reload)
	return err
}
