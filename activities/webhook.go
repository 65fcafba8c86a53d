package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/paygate/paygate/webhook"
)

// Delivery statuses as SPEC.md names them ("Webhook delivery record").
const (
	// DeliveryStatusPending: not delivered yet, more attempts may follow.
	DeliveryStatusPending = "pending"
	// DeliveryStatusDelivered: a receiver answered 2xx.
	DeliveryStatusDelivered = "delivered"
	// DeliveryStatusFailed: the last allowed attempt failed.
	DeliveryStatusFailed = "failed"
)

// DeliveryGoneErrorType is the application error type AttemptDelivery fails
// with, non-retryably, when the delivery or its endpoint no longer exists.
const DeliveryGoneErrorType = "DeliveryGone"

// ErrDeliveryGone is returned by a DeliveryStore when the delivery or its
// endpoint has been deleted: there is nothing left to send.
var ErrDeliveryGone = errors.New("webhook delivery gone")

// DeliveryTarget is what one attempt needs, read fresh for every attempt so
// that a rotated secret, a changed URL or a disabled endpoint takes effect.
type DeliveryTarget struct {
	// URL is the endpoint URL.
	URL string
	// Secret is the endpoint's current whsec_ secret.
	Secret string
	// PreviousSecret is the secret a rotation replaced while its overlap
	// lasts, "" otherwise: the attempt carries a signature under each.
	PreviousSecret string
	// Unsigned, when set, says why the attempt cannot be signed (the
	// server's keys do not open the endpoint's secret): the attempt is
	// recorded as failed with it, nothing sent.
	Unsigned string
	// Body is the exact JSON envelope ({event, data, webhookDeliveryId,
	// timestamp}) as stored at creation: the same bytes on every attempt.
	Body []byte
	// Active is false when the merchant disabled the endpoint; the attempt
	// is then recorded as failed without sending anything.
	Active bool
	// Live is true for a live-mode endpoint: the Sender holds it to the
	// strict dial policy (https, public addresses) whatever its own.
	Live bool
}

// DeliveryAttemptRecord is one attempt as the store records it.
type DeliveryAttemptRecord struct {
	// DeliveryID is the delivery (webhook-id header).
	DeliveryID string
	// Attempt is the 1-based attempt number within the delivery's life;
	// manual retries continue the count.
	Attempt int
	// ResponseStatus is the receiver's HTTP status, 0 if none arrived.
	ResponseStatus int
	// At is when the attempt was made.
	At time.Time
	// Status is the delivery status after this attempt: DeliveryStatusPending,
	// DeliveryStatusDelivered or DeliveryStatusFailed.
	Status string
	// Error is a short reason for a failed attempt ("" when delivered).
	Error string
	// Slot is the attempt's place in the retry schedule (1 to 8), 0 for an
	// extra attempt (a retry signal, a manual retry): the delivery keeps the
	// highest, so a run that resumes it continues the schedule from there.
	Slot int
}

// DeliveryStore is the persistence the delivery activity needs; models/
// implements it over the webhook delivery table.
type DeliveryStore interface {
	// LoadDeliveryTarget returns the delivery's endpoint URL, secret, active
	// flag and stored body. It returns an error wrapping ErrDeliveryGone when
	// the delivery or its endpoint no longer exists; any other error is
	// treated as transient and retried.
	LoadDeliveryTarget(ctx context.Context, deliveryID string) (DeliveryTarget, error)

	// RecordDeliveryAttempt stores one attempt and updates the delivery's
	// read model (status, attempts, responseStatus, lastAttemptAt).
	//
	// Idempotency contract: it is keyed by (DeliveryID, Attempt), enforced by
	// a unique index. Recording the same key again (an activity retry after a
	// lost acknowledgement) must succeed without adding a row or counting the
	// attempt twice; it may overwrite the row with the newer values. The
	// delivery's attempts becomes max(attempts, Attempt), and lastAttemptAt,
	// responseStatus and status follow the attempt with the highest number.
	// A delivered status is never downgraded by a later pending or failed
	// record. It returns an error wrapping ErrDeliveryGone when the delivery
	// no longer exists; other errors are retried.
	RecordDeliveryAttempt(ctx context.Context, a DeliveryAttemptRecord) error
}

// DeliveryAttemptInput is the input of AttemptDelivery.
type DeliveryAttemptInput struct {
	// DeliveryID is the delivery to send; the same on every attempt.
	DeliveryID string
	// Attempt is the 1-based attempt number (see DeliveryAttemptRecord.Attempt).
	Attempt int
	// Final is true when no attempt follows a failure of this one, so a
	// failure is recorded as DeliveryStatusFailed rather than pending.
	Final bool
	// Slot is the attempt's place in the retry schedule, 0 for an extra
	// attempt (see DeliveryAttemptRecord.Slot).
	Slot int
}

// DeliveryAttemptResult is the outcome of AttemptDelivery. A failed HTTP
// attempt is a result, not an activity error.
type DeliveryAttemptResult struct {
	// Delivered is true when the receiver answered 2xx.
	Delivered bool
	// StatusCode is the receiver's HTTP status, 0 if none arrived.
	StatusCode int
	// Error says why the attempt failed ("" when delivered).
	Error string
	// Status is the delivery status recorded after this attempt.
	Status string
	// At is when the attempt was made.
	At time.Time
}

// WebhookActivities holds the dependencies of the webhook delivery
// activities. Register a *WebhookActivities on the webhook worker.
type WebhookActivities struct {
	// Store loads targets and records attempts.
	Store DeliveryStore
	// Sender makes the signed, SSRF-guarded POST.
	Sender *webhook.Sender
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

func (a *WebhookActivities) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// AttemptDelivery makes one delivery attempt: it loads the target, sends the
// stored body signed with the delivery id and the current time, records the
// attempt and reports whether it was delivered.
//
// Errors: a gone delivery or endpoint is a non-retryable application error of
// type DeliveryGoneErrorType; store failures are returned as retryable errors
// (the retry may send the delivery again, which receivers dedupe by the
// unchanged webhook-id).
func (a *WebhookActivities) AttemptDelivery(ctx context.Context, in DeliveryAttemptInput) (DeliveryAttemptResult, error) {
	if in.DeliveryID == "" || in.Attempt < 1 {
		return DeliveryAttemptResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("invalid delivery attempt input (id %q, attempt %d)", in.DeliveryID, in.Attempt), "InvalidInput", nil)
	}
	target, err := a.Store.LoadDeliveryTarget(ctx, in.DeliveryID)
	if err != nil {
		return DeliveryAttemptResult{}, classifyStoreError("load delivery target", err)
	}

	at := a.now()
	var res webhook.Result
	switch {
	case target.Active && target.Unsigned != "":
		activity.GetLogger(ctx).Error("webhook delivery not signed: restore the server's secret key, or rotate the endpoint's secret",
			"deliveryId", in.DeliveryID, "err", target.Unsigned)
		res = webhook.Result{Error: "not sent: " + target.Unsigned + "; the operator restores the key, or you rotate the endpoint's secret"}
	case target.Active:
		res = a.Sender.Send(ctx, webhook.Request{
			URL:            target.URL,
			Secret:         target.Secret,
			PreviousSecret: target.PreviousSecret,
			MessageID:      in.DeliveryID,
			Timestamp:      at,
			Body:           target.Body,
			Live:           target.Live,
		})
	default:
		res = webhook.Result{Error: "endpoint disabled"}
	}
	if ctx.Err() != nil {
		// The activity itself timed out or was cancelled mid-send: let
		// Temporal retry rather than record a verdict.
		return DeliveryAttemptResult{}, ctx.Err()
	}

	status := DeliveryStatusPending
	switch {
	case res.Delivered:
		status = DeliveryStatusDelivered
	case in.Final:
		status = DeliveryStatusFailed
	}
	activity.GetLogger(ctx).Info("webhook delivery attempt",
		"deliveryId", in.DeliveryID, "attempt", in.Attempt, "status", status,
		"responseStatus", res.StatusCode, "error", res.Error, "duration", res.Duration)

	rec := DeliveryAttemptRecord{
		DeliveryID:     in.DeliveryID,
		Attempt:        in.Attempt,
		ResponseStatus: res.StatusCode,
		At:             at,
		Status:         status,
		Error:          res.Error,
		Slot:           in.Slot,
	}
	if err := a.Store.RecordDeliveryAttempt(ctx, rec); err != nil {
		return DeliveryAttemptResult{}, classifyStoreError("record delivery attempt", err)
	}
	return DeliveryAttemptResult{
		Delivered:  res.Delivered,
		StatusCode: res.StatusCode,
		Error:      res.Error,
		Status:     status,
		At:         at,
	}, nil
}

// classifyStoreError makes ErrDeliveryGone non-retryable and leaves every
// other store error retryable.
func classifyStoreError(op string, err error) error {
	if errors.Is(err, ErrDeliveryGone) {
		return temporal.NewNonRetryableApplicationError(op+": "+err.Error(), DeliveryGoneErrorType, err)
	}
	return temporal.NewApplicationError(op+": "+err.Error(), "DeliveryStoreError", err)
}
