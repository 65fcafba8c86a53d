package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paygate/paygate/apperr"
	pworker "github.com/paygate/paygate/worker"
	"github.com/paygate/paygate/workflows"
)

// retryWait is how long `paygate deliveries retry` waits for the attempt to
// be recorded before it leaves the outcome to GET /api/events.
const retryWait = 30 * time.Second

// runDeliveries serves `paygate deliveries retry DELIVERY_ID`: one immediate
// attempt of a delivery, through the same function as the API's retry route
// (SignalWithStart of webhook-delivery:<id>, so a closed workflow is started
// again for one attempt). It then waits briefly and prints the outcome.
func runDeliveries(ctx context.Context, args []string) error {
	if len(args) != 2 || args[0] != "retry" {
		return usageError("deliveries needs retry DELIVERY_ID")
	}
	id := args[1]
	a, err := newMigratedApp()
	if err != nil {
		return err
	}
	defer a.close()
	d, err := a.store.WebhookDelivery(ctx, id)
	if errors.Is(err, apperr.ErrNotFound) {
		return fmt.Errorf("delivery %s: not found", id)
	}
	if err != nil {
		return fmt.Errorf("delivery %s: %w", id, err)
	}
	c, err := a.dialTemporal(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	run, err := pworker.RetryDelivery(ctx, c, a.cfg.Temporal.TaskQueueWebhooks, d, a.store.WebhookDelivery)
	if err != nil {
		return err
	}
	fmt.Printf("retry of delivery %s requested (workflow %s, run %s; it was %s after %d attempts)\n",
		d.ID, workflows.WebhookDeliveryWorkflowID(d.ID), run.GetRunID(), d.Status, d.Attempts)

	deadline := time.Now().Add(retryWait)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
		now, err := a.store.WebhookDelivery(ctx, id)
		if err != nil {
			return fmt.Errorf("delivery %s: %w", id, err)
		}
		if now.Attempts > d.Attempts {
			code := "no answer"
			if now.ResponseStatus != nil {
				code = fmt.Sprintf("HTTP %d", *now.ResponseStatus)
			}
			// The attempt's own error says why (a TLS name, a refused
			// connection, a timeout): what support needs next.
			if atts, err := a.store.DeliveryAttempts(ctx, []string{id}); err == nil {
				for _, at := range atts[id] {
					if at.Attempt == now.Attempts && at.Error != "" {
						code += " (" + at.Error + ")"
					}
				}
			}
			fmt.Printf("attempt %d: %s; delivery is %s\n", now.Attempts, code, now.Status)
			return nil
		}
	}
	fmt.Printf("no attempt recorded within %s (is a worker polling %s?); check GET /api/events?status=%s or the Temporal Web UI\n",
		retryWait, a.cfg.Temporal.TaskQueueWebhooks, d.Status)
	return nil
}
