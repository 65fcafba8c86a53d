package workflows

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/api/serviceerror"
)

// DefaultUpdateTimeout bounds how long an API request waits for a
// workflow to answer an update (a submit, a wallet report, a cancel, a
// subscription action, a refund's hash): with the workers down the
// workflow cannot answer, and the caller gets a 503 with Retry-After
// instead of a request that hangs until the server drops it.
const DefaultUpdateTimeout = 10 * time.Second

// UpdateTimeout is d, or DefaultUpdateTimeout when d is not positive (a
// service's UpdateTimeout field left unset).
func UpdateTimeout(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return DefaultUpdateTimeout
}

// UnavailableRetryAfter is the Retry-After of that 503.
const UnavailableRetryAfter = 5 * time.Second

// UpdateUnanswered reports whether err means the deadline of uctx (not the
// caller's own, parent) passed or Temporal could not be reached: the
// workflow did not answer in time.
func UpdateUnanswered(parent, uctx context.Context, err error) bool {
	if err == nil || parent.Err() != nil {
		return false
	}
	if uctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var de *serviceerror.DeadlineExceeded
	var ua *serviceerror.Unavailable
	return errors.As(err, &de) || errors.As(err, &ua)
}
