// Package worker wires the Temporal workers: checkouts (and refunds) and
// webhook deliveries poll separate task queues, so a flood of deliveries to a slow
// receiver never delays a confirmation, and each scales on its own.
package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/webhook"
	"github.com/paygate/paygate/workflows"
)

// Config names the task queues and the parts the activities use.
type Config struct {
	CheckoutQueue string
	WebhookQueue  string
	Store         *models.Store
	Verifier      chain.Verifier
	Sender        *webhook.Sender
	// Sessions opens the checkout sessions of subscription invoices (the
	// checkout service). When set, subscriptions run on the checkout queue.
	Sessions activities.InvoiceSessions
	// PublicBaseURL is where customers reach the hosted checkout page (the
	// links sent in subscription events).
	PublicBaseURL string
	// StickyTimeout is how long a workflow task waits on this worker's
	// sticky queue before the server moves it to the shared queue
	// (0: DefaultStickyTimeout). Only used with a StickyCache.
	StickyTimeout time.Duration
	// StopTimeout is how long Stop lets running activities, local ones
	// included (a webhook attempt), finish before it abandons them (0:
	// none, the SDK's default; the commands set 20 s).
	StopTimeout time.Duration
	// StickyCache is how many workflows this process keeps in memory
	// between their workflow tasks (sticky execution). 0, the default,
	// turns sticky execution off: see New.
	StickyCache int
}

// DefaultStickyTimeout replaces the SDK's 5 s when sticky execution is on
// (Config.StickyCache; it is off by default, see New). When many timers fire
// together (an expiry storm), a session's next workflow task waits on the
// worker's sticky queue behind the others; after 5 s the server moved it to
// the shared queue, where the SDK's pollers do not look while the sticky
// queue has a backlog, so it waited there for a minute or more (make bench:
// 1,000 sessions due together, expired p99 70 s with 5 s, 73 s with 10 s,
// 12.6 s with 15 s). The price: a task queued on a worker that was killed,
// or on a Temporal server that restarted, waits up to this long before a
// worker takes it; 30 s made the chaos suite's restart lane see cancels
// only after expiry. A worker that stops cleanly hands its sessions over
// at once.
const DefaultStickyTimeout = 15 * time.Second

func workerOptions(cfg Config) sdkworker.Options {
	sticky := cfg.StickyTimeout
	if sticky <= 0 {
		sticky = DefaultStickyTimeout
	}
	return sdkworker.Options{StickyScheduleToStartTimeout: sticky, WorkerStopTimeout: cfg.StopTimeout}
}

// SubscriptionSignaler tells a subscription's workflow that one of its
// invoice sessions ended.
type SubscriptionSignaler struct{ Client client.Client }

// SessionFinished signals subscription:<id>. A workflow that has closed
// (the subscription ended) no longer needs to know.
func (s SubscriptionSignaler) SessionFinished(ctx context.Context, subscriptionID string, n activities.SessionNotice) error {
	err := s.Client.SignalWorkflow(ctx, workflows.SubscriptionWorkflowID(subscriptionID), "", workflows.SubscriptionSessionSignal, n)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil
	}
	return err
}

// Dispatcher starts one WebhookDeliveryWorkflow per delivery.
type Dispatcher struct {
	Client client.Client
	Queue  string
}

// Dispatch starts each delivery's workflow; one that exists (running or
// closed) is left alone, so a retried activity starts nothing twice.
func (d Dispatcher) Dispatch(ctx context.Context, ids []string) error {
	for _, id := range ids {
		_, err := d.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID:                    workflows.WebhookDeliveryWorkflowID(id),
			TaskQueue:             d.Queue,
			WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
			// Eager start: when this process runs a webhook worker with a free
			// slot (the worker process dispatching from its checkout
			// activities), the server hands the first workflow task back in
			// its answer instead of through the matching service.
			EnableEagerStart: true,
		}, workflows.WebhookDeliveryWorkflow, workflows.WebhookDeliveryInput{DeliveryID: id, Shape: workflows.ShapeCurrent})
		var already *serviceerror.WorkflowExecutionAlreadyStarted
		if err != nil && !errors.As(err, &already) {
			return fmt.Errorf("start delivery %s: %w", id, err)
		}
	}
	return nil
}

// New builds the two workers (checkout and webhook queues). Start them with
// Start and stop them with Stop: the worker stops polling and leaves running
// activities to Temporal's retries.
//
// Sticky execution is off unless cfg.StickyCache says otherwise: every
// workflow task goes to the shared task queue and the worker replays the
// workflow's history for it. A checkout's history is short (12 events for
// an expired session, about 50 for a paid one), so the replay costs less
// than what stickiness brings with it: with a cache, the SDK's pollers poll
// nothing but the sticky queue while it has a backlog, so in an expiry storm
// whose backlog outlasted the sticky timeout the tasks moved to the shared
// queue waited a minute for a poller (make bench: 1,000 sessions due together,
// expired p99 14-17 s or 76 s from one run to the next with the cache, 14-16 s
// and never the cliff without it); and a killed worker's or a restarted
// server's tasks waited out the sticky timeout. The cache size is the SDK's,
// for the whole process, so the last New before the workers start decides.
func New(c client.Client, cfg Config) ([]sdkworker.Worker, error) {
	if cfg.CheckoutQueue == "" || cfg.WebhookQueue == "" || cfg.Store == nil || cfg.Verifier == nil || cfg.Sender == nil {
		return nil, errors.New("worker: queues, store, verifier and sender are required")
	}
	if cfg.StickyCache < 0 {
		return nil, errors.New("worker: StickyCache must be 0 (off) or more")
	}
	sdkworker.SetStickyWorkflowCacheSize(cfg.StickyCache)
	opts := workerOptions(cfg)
	cw := sdkworker.New(c, cfg.CheckoutQueue, opts)
	dispatcher := Dispatcher{Client: c, Queue: cfg.WebhookQueue}
	cw.RegisterWorkflow(workflows.CheckoutSessionWorkflow)
	cw.RegisterActivity(&activities.CheckoutActivities{
		Store:         checkoutStore{cfg.Store},
		Verifier:      cfg.Verifier,
		Dispatcher:    dispatcher,
		Subscriptions: SubscriptionSignaler{Client: c},
	})
	// Refunds wait on the chain like checkouts: same queue, same verifier.
	cw.RegisterWorkflow(workflows.RefundWorkflow)
	cw.RegisterWorkflow(workflows.RefundLateTransferWorkflow)
	cw.RegisterActivity(&activities.RefundActivities{
		Store:      refundStore{cfg.Store},
		Verifier:   cfg.Verifier,
		Dispatcher: Dispatcher{Client: c, Queue: cfg.WebhookQueue},
	})
	if cfg.Sessions != nil {
		cw.RegisterWorkflow(workflows.SubscriptionWorkflow)
		cw.RegisterActivity(&activities.SubscriptionActivities{Store: subscriptionStore{cfg.Store}, Sessions: cfg.Sessions,
			Exceptions: invoiceExceptions{cfg.Store},
			Dispatcher: dispatcher, PublicBaseURL: cfg.PublicBaseURL})
	}
	ww := sdkworker.New(c, cfg.WebhookQueue, opts)
	ww.RegisterWorkflow(workflows.WebhookDeliveryWorkflow)
	ww.RegisterActivity(&activities.WebhookActivities{Store: deliveryStore{cfg.Store}, Sender: cfg.Sender})
	return []sdkworker.Worker{cw, ww}, nil
}

// Start starts every worker, stopping those started if one fails.
func Start(ws []sdkworker.Worker) error {
	for i, w := range ws {
		if err := w.Start(); err != nil {
			for _, started := range ws[:i] {
				started.Stop()
			}
			return err
		}
	}
	return nil
}

// Stop stops every worker.
func Stop(ws []sdkworker.Worker) {
	for _, w := range ws {
		w.Stop()
	}
}
