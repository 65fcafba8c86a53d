package metrics

import (
	"context"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"

	"github.com/paygate/paygate/activities"
)

// Activity names whose successful executions are counted as outcomes.
const (
	activityFinishSession   = "FinishSession"
	activityAttemptDelivery = "AttemptDelivery"
)

// OutcomeInterceptor counts business outcomes as the workers record them,
// without touching the activities: a successful FinishSession counts the
// session's outcome (paygate_checkout_sessions_total) and every completed
// AttemptDelivery counts one webhook attempt (paygate_webhook_attempts_total).
//
// Put it in client.Options.Interceptors: it is a client interceptor that is
// also a worker interceptor, so every worker made from that client uses it.
// An activity that succeeds but whose completion is lost to a crash runs
// again and is counted again; the counters are operational, not ledgers.
type OutcomeInterceptor struct {
	interceptor.InterceptorBase
	m *Metrics
}

// NewOutcomeInterceptor returns an interceptor counting on m.
func NewOutcomeInterceptor(m *Metrics) *OutcomeInterceptor { return &OutcomeInterceptor{m: m} }

// InterceptActivity wraps every activity execution.
func (o *OutcomeInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &outcomeActivity{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, m: o.m}
}

type outcomeActivity struct {
	interceptor.ActivityInboundInterceptorBase
	m *Metrics
}

// ExecuteActivity runs the activity, then counts its outcome.
func (a *outcomeActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := a.Next.ExecuteActivity(ctx, in)
	if err != nil {
		return res, err
	}
	switch activity.GetInfo(ctx).ActivityType.Name {
	case activityFinishSession:
		if o, ok := sessionOutcome(in.Args); ok {
			a.m.ObserveCheckoutOutcome(o.Status, o.Reason)
		}
	case activityAttemptDelivery:
		switch r := res.(type) {
		case activities.DeliveryAttemptResult:
			a.m.ObserveWebhookAttempt(r.Delivered, r.StatusCode)
		case *activities.DeliveryAttemptResult:
			if r != nil {
				a.m.ObserveWebhookAttempt(r.Delivered, r.StatusCode)
			}
		}
	}
	return res, nil
}

func sessionOutcome(args []any) (activities.SessionOutcome, bool) {
	for _, arg := range args {
		switch o := arg.(type) {
		case activities.SessionOutcome:
			return o, true
		case *activities.SessionOutcome:
			if o != nil {
				return *o, true
			}
		}
	}
	return activities.SessionOutcome{}, false
}
