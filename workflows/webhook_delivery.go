package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/paygate/paygate/activities"
)

// Names a client or worker needs to talk to a delivery workflow.
const (
	// WebhookRetrySignal asks for one immediate extra attempt. To retry a
	// delivery whose workflow may have closed, send it with
	// SignalWithStartWorkflow and WebhookDeliveryInput{ManualRetry: true}.
	WebhookRetrySignal = "retry"
	// WebhookStatusQuery answers a WebhookDeliveryStatus.
	WebhookStatusQuery = "status"
	// WebhookDeliveryTaskQueue is the task queue of delivery workflows and
	// activities, separate from checkouts so a slow receiver never delays one.
	WebhookDeliveryTaskQueue = "webhook-deliveries"
	// WebhookDeliveryMaxAttempts is the number of scheduled attempts.
	WebhookDeliveryMaxAttempts = 8
)

// States of a delivery workflow. The first three are SPEC.md's delivery
// statuses; WebhookDeliveryStateGone means the delivery or its endpoint was
// deleted while the workflow ran, so it stopped without a verdict.
const (
	// WebhookDeliveryStatePending: attempts are still scheduled.
	WebhookDeliveryStatePending = activities.DeliveryStatusPending
	// WebhookDeliveryStateDelivered: a receiver answered 2xx.
	WebhookDeliveryStateDelivered = activities.DeliveryStatusDelivered
	// WebhookDeliveryStateFailed: the last allowed attempt failed.
	WebhookDeliveryStateFailed = activities.DeliveryStatusFailed
	// WebhookDeliveryStateGone: the delivery or endpoint was deleted.
	WebhookDeliveryStateGone = "gone"
)

// webhookRetryDelays[i] is the wait after the failure of scheduled attempt
// i+1 before attempt i+2 (DESIGN.md §4: 1 min, 5 min, 30 min, 2 h, 5 h, 10 h, 24 h).
var webhookRetryDelays = [WebhookDeliveryMaxAttempts - 1]time.Duration{
	time.Minute,
	5 * time.Minute,
	30 * time.Minute,
	2 * time.Hour,
	5 * time.Hour,
	10 * time.Hour,
	24 * time.Hour,
}

// webhookMaxExtraAttempts bounds the retry-signal attempts of one run, so a
// burst of signals cannot grow the history without limit. A signal beyond
// it continues the delivery as a new run that answers it at once and keeps
// the schedule (version 1 of webhookRetryContinueChange; before, it was
// acknowledged and ignored, and the merchant's retry waited for the next
// slot, up to a day).
const webhookMaxExtraAttempts = 20

// webhookRetryContinueChange is the change id of continuing as new past
// webhookMaxExtraAttempts.
const webhookRetryContinueChange = "delivery-retry-continue"

// webhookFailedAttributeChange is the change id of marking a failed
// delivery with DeliveryStatusAttr (version 1); runs from before end
// failed without it.
const webhookFailedAttributeChange = "delivery-failed-attribute"

// DeliveryStatusAttr marks a delivery workflow run that ended failed
// ("failed"), so an operator finds them in the Web UI and with
// `temporal workflow list --query 'DeliveryStatus="failed"'`; a run that
// delivers, or is still retrying, carries none (setting it on every
// delivery would cost each one a command and a visibility write). A
// later manual retry is a new run of the same workflow id, with its own
// attributes. Registered with the checkout ones
// (temporaldev.PaygateSearchAttributes).
var DeliveryStatusAttr = temporal.NewSearchAttributeKeyKeyword("DeliveryStatus")

// webhookActivities is referenced only for its method values; Temporal
// resolves them to the activity names registered on the worker.
var webhookActivities *activities.WebhookActivities

// WebhookRetryDelays returns the waits between scheduled attempts, in order.
func WebhookRetryDelays() []time.Duration {
	return append([]time.Duration(nil), webhookRetryDelays[:]...)
}

// WebhookDeliveryWorkflowID is the workflow id of a delivery: one workflow
// per delivery, keyed by the delivery id.
func WebhookDeliveryWorkflowID(deliveryID string) string {
	return "webhook-delivery:" + deliveryID
}

// WebhookDeliveryInput starts a delivery workflow.
type WebhookDeliveryInput struct {
	// DeliveryID is the delivery to send (also its webhook-id header).
	DeliveryID string
	// ManualRetry makes one immediate attempt and ends delivered or failed;
	// used when support retries a delivery whose workflow has closed.
	ManualRetry bool
	// PreviousAttempts is the number of attempts already recorded for the
	// delivery (its attempts field); numbering continues after it. Zero for
	// a new delivery.
	PreviousAttempts int
	// ResumeSlot, when positive, resumes a delivery whose earlier workflow
	// closed without an outcome (the delivery reconciler): that many
	// scheduled attempts count as made, the next one is made at once and
	// the schedule continues from there. At most WebhookDeliveryMaxAttempts-1.
	ResumeSlot int
	// RetryFirst and NextAttemptAt continue a run that reached its limit of
	// extra attempts: one extra attempt is made at once (the retry that
	// reached the limit), then the next slot, ResumeSlot+1, waits until
	// NextAttemptAt as it did in the earlier run.
	RetryFirst    bool
	NextAttemptAt time.Time
	// Shape is the command shape (see CheckoutInput.Shape): 0 for histories
	// before it existed (each attempt a remote activity), ShapeLocalEffects
	// for new starts (each attempt a local activity). Starters set ShapeCurrent.
	Shape int
}

// WebhookDeliveryStatus is what the status query answers.
type WebhookDeliveryStatus struct {
	// DeliveryID is the delivery.
	DeliveryID string
	// State is pending, delivered, failed or gone.
	State string
	// Attempts counts every attempt made for the delivery, manual ones included.
	Attempts int
	// ScheduledAttempts counts this run's attempts from the retry schedule.
	ScheduledAttempts int
	// ExtraAttempts counts this run's attempts asked for by the retry signal.
	ExtraAttempts int
	// ManualRetry is true for a one-attempt manual run.
	ManualRetry bool
	// LastStatusCode is the receiver's last HTTP status, 0 if none.
	LastStatusCode int
	// LastError says why the last attempt failed.
	LastError string
	// LastAttemptAt is when the last attempt was made.
	LastAttemptAt time.Time
	// NextAttemptAt is when the next scheduled attempt is due, zero if none.
	NextAttemptAt time.Time
}

// WebhookDeliveryResult is the outcome of a delivery workflow.
type WebhookDeliveryResult struct {
	// DeliveryID is the delivery.
	DeliveryID string
	// State is delivered, failed or gone.
	State string
	// Attempts counts every attempt made for the delivery.
	Attempts int
	// LastStatusCode is the receiver's last HTTP status, 0 if none.
	LastStatusCode int
	// LastError says why the last attempt failed.
	LastError string
}

// webhookDelivery is the state of one run.
type webhookDelivery struct {
	status WebhookDeliveryStatus
	actx   workflow.Context
	local  bool
}

// WebhookDeliveryWorkflow delivers one webhook: attempt 1 at once, then after
// each failure waits 1 min, 5 min, 30 min, 2 h, 5 h, 10 h and 24 h (8
// attempts); a 2xx ends it delivered, the 8th failure ends it failed. Each
// attempt is one AttemptDelivery activity, which records it in the store.
// The retry signal makes one immediate extra attempt while it waits; a
// ManualRetry run makes one attempt only.
func WebhookDeliveryWorkflow(ctx workflow.Context, in WebhookDeliveryInput) (WebhookDeliveryResult, error) {
	if in.DeliveryID == "" {
		return WebhookDeliveryResult{}, temporal.NewNonRetryableApplicationError("delivery id is required", "InvalidInput", nil)
	}
	d := &webhookDelivery{status: WebhookDeliveryStatus{
		DeliveryID:  in.DeliveryID,
		State:       WebhookDeliveryStatePending,
		Attempts:    in.PreviousAttempts,
		ManualRetry: in.ManualRetry,
	}}
	// Handlers first, before anything blocks.
	if err := workflow.SetQueryHandler(ctx, WebhookStatusQuery, func() (WebhookDeliveryStatus, error) {
		return d.status, nil
	}); err != nil {
		return WebhookDeliveryResult{}, err
	}
	retry := workflow.GetSignalChannel(ctx, WebhookRetrySignal)

	retryPolicy := &temporal.RetryPolicy{
		InitialInterval:        2 * time.Second,
		BackoffCoefficient:     2,
		MaximumInterval:        time.Minute,
		NonRetryableErrorTypes: []string{activities.DeliveryGoneErrorType},
	}
	// The sender gives up after 15 s; the rest is store time. A store
	// outage is retried for up to an hour per attempt.
	if d.local = in.Shape >= ShapeLocalEffects; d.local {
		// An attempt runs inside the workflow task that asks for it: no
		// activity task to schedule, match and report, one marker event.
		d.actx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: 30 * time.Second, ScheduleToCloseTimeout: time.Hour, RetryPolicy: retryPolicy})
	} else {
		d.actx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 30 * time.Second, ScheduleToCloseTimeout: time.Hour, RetryPolicy: retryPolicy})
	}

	if in.ManualRetry {
		// SignalWithStart delivered the retry signal that started this run:
		// the attempt below answers it.
		webhookDrain(retry)
		_, err := d.attempt(ctx, true, 0)
		return d.finish(ctx, retry, err)
	}

	// A resumed delivery picks the schedule up where it stood; zero (every
	// run started before ResumeSlot existed) starts at slot 1, as before.
	first := min(max(in.ResumeSlot, 0), WebhookDeliveryMaxAttempts-1) + 1
	d.status.ScheduledAttempts = first - 1
	if in.RetryFirst {
		webhookDrain(retry)
		d.status.ExtraAttempts++
		if done, err := d.attempt(ctx, false, 0); done || err != nil {
			return d.finish(ctx, retry, err)
		}
		if wait := in.NextAttemptAt.Sub(workflow.Now(ctx)); wait > 0 {
			if done, err := d.wait(ctx, retry, wait); done || err != nil {
				return d.finish(ctx, retry, err)
			}
		}
	}
	for slot := first; slot <= WebhookDeliveryMaxAttempts; slot++ {
		if slot > first {
			done, err := d.wait(ctx, retry, webhookRetryDelays[slot-2])
			if done || err != nil {
				return d.finish(ctx, retry, err)
			}
		}
		// A retry asked for now is answered by this attempt.
		webhookDrain(retry)
		d.status.ScheduledAttempts++
		done, err := d.attempt(ctx, slot == WebhookDeliveryMaxAttempts, slot)
		if done || err != nil {
			return d.finish(ctx, retry, err)
		}
	}
	// Unreachable: the last slot is final and always ends the loop.
	return d.result(), errors.New("webhook delivery: schedule ended without a verdict")
}

// wait sleeps until the next scheduled attempt, making an extra attempt for
// each retry signal meanwhile. done is true when an extra attempt ended the
// delivery.
func (d *webhookDelivery) wait(ctx workflow.Context, retry workflow.ReceiveChannel, delay time.Duration) (done bool, err error) {
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	timer := workflow.NewTimer(timerCtx, delay)
	d.status.NextAttemptAt = workflow.Now(ctx).Add(delay)
	defer func() { d.status.NextAttemptAt = time.Time{} }()

	for fired := false; !fired; {
		signalled := false
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(timer, func(workflow.Future) { fired = true })
		sel.AddReceive(retry, func(c workflow.ReceiveChannel, _ bool) {
			c.Receive(ctx, nil)
			webhookDrain(c)
			signalled = true
		})
		sel.Select(ctx)
		if !signalled {
			continue
		}
		if d.status.ExtraAttempts >= webhookMaxExtraAttempts {
			if workflow.GetVersion(ctx, webhookRetryContinueChange, workflow.DefaultVersion, 1) == 1 {
				// A new run answers this retry at once and waits for the
				// same next slot; its history starts empty.
				return false, workflow.NewContinueAsNewError(ctx, WebhookDeliveryWorkflow, WebhookDeliveryInput{
					DeliveryID: d.status.DeliveryID, PreviousAttempts: d.status.Attempts, ResumeSlot: d.status.ScheduledAttempts,
					RetryFirst: true, NextAttemptAt: d.status.NextAttemptAt, Shape: ShapeCurrent})
			}
			workflow.GetLogger(ctx).Warn("retry signal ignored: extra attempt limit reached",
				"deliveryId", d.status.DeliveryID, "limit", webhookMaxExtraAttempts)
			continue
		}
		d.status.ExtraAttempts++
		if done, err := d.attempt(ctx, false, 0); done || err != nil {
			return done, err
		}
	}
	return false, nil
}

// attempt runs one AttemptDelivery: slot is its place in the retry
// schedule, 0 for an extra attempt. done is true when the delivery reached a
// final state (delivered, failed, gone).
func (d *webhookDelivery) attempt(ctx workflow.Context, final bool, slot int) (done bool, err error) {
	d.status.Attempts++
	in := activities.DeliveryAttemptInput{
		DeliveryID: d.status.DeliveryID,
		Attempt:    d.status.Attempts,
		Final:      final,
		Slot:       slot,
	}
	var res activities.DeliveryAttemptResult
	f := workflow.ExecuteActivity
	if d.local {
		f = workflow.ExecuteLocalActivity
	}
	err = f(d.actx, webhookActivities.AttemptDelivery, in).Get(ctx, &res)
	if err != nil {
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.Type() == activities.DeliveryGoneErrorType {
			d.status.State = WebhookDeliveryStateGone
			d.status.LastError = "delivery or endpoint deleted"
			return true, nil
		}
		// The store stayed unreachable for the whole activity budget: the
		// attempt may or may not have been sent and recorded.
		d.status.LastStatusCode = 0
		d.status.LastError = "attempt not recorded: " + err.Error()
		d.status.LastAttemptAt = workflow.Now(ctx)
		if final {
			d.status.State = WebhookDeliveryStateFailed
			return true, fmt.Errorf("webhook delivery %s: final attempt %d: %w", d.status.DeliveryID, in.Attempt, err)
		}
		return false, nil
	}
	d.status.LastStatusCode = res.StatusCode
	d.status.LastError = res.Error
	d.status.LastAttemptAt = res.At
	switch {
	case res.Delivered:
		d.status.State = WebhookDeliveryStateDelivered
		return true, nil
	case final:
		d.status.State = WebhookDeliveryStateFailed
		return true, nil
	}
	return false, nil
}

// finish ends the run. A retry signal that arrived while the final attempt
// was running would otherwise be lost with the closing workflow (its sender
// saw the signal accepted), so a failed delivery answers it with one more
// final attempt, as often as such signals keep arriving within the limit.
// Signals left once delivered or gone need no answer.
func (d *webhookDelivery) finish(ctx workflow.Context, retry workflow.ReceiveChannel, err error) (WebhookDeliveryResult, error) {
	for err == nil && d.status.State == WebhookDeliveryStateFailed && retry.ReceiveAsync(nil) {
		webhookDrain(retry)
		if d.status.ExtraAttempts >= webhookMaxExtraAttempts {
			if workflow.GetVersion(ctx, webhookRetryContinueChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
				break
			}
			// Past the limit: a manual run answers it, as a retry of a
			// closed delivery would be.
			return d.result(), workflow.NewContinueAsNewError(ctx, WebhookDeliveryWorkflow, WebhookDeliveryInput{
				DeliveryID: d.status.DeliveryID, ManualRetry: true, PreviousAttempts: d.status.Attempts, Shape: ShapeCurrent})
		}
		d.status.ExtraAttempts++
		d.status.State = WebhookDeliveryStatePending
		_, err = d.attempt(ctx, true, 0)
	}
	webhookDrain(retry)
	if d.status.State == WebhookDeliveryStateFailed &&
		workflow.GetVersion(ctx, webhookFailedAttributeChange, workflow.DefaultVersion, 1) == 1 {
		if uerr := workflow.UpsertTypedSearchAttributes(ctx, DeliveryStatusAttr.ValueSet(WebhookDeliveryStateFailed)); uerr != nil {
			workflow.GetLogger(ctx).Warn("failed delivery not marked for the Web UI", "deliveryId", d.status.DeliveryID, "error", uerr)
		}
	}
	return d.result(), err
}

func (d *webhookDelivery) result() WebhookDeliveryResult {
	return WebhookDeliveryResult{
		DeliveryID:     d.status.DeliveryID,
		State:          d.status.State,
		Attempts:       d.status.Attempts,
		LastStatusCode: d.status.LastStatusCode,
		LastError:      d.status.LastError,
	}
}

// webhookDrain consumes retry signals already received, so one attempt
// answers a burst of them.
func webhookDrain(c workflow.ReceiveChannel) {
	for c.ReceiveAsync(nil) {
	}
}
