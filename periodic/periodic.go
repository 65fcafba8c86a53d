// Package periodic runs the workers' maintenance passes (repairers, the
// payment watcher, reconcilers): once at once, then every interval, until
// the context ends.
package periodic

import (
	"context"
	"log/slog"
	"time"
)

// Run calls pass now and then every interval until ctx ends. A pass that
// outlasts the interval delays the next one rather than overlapping it.
func Run(ctx context.Context, interval time.Duration, pass func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// StartMissing is a repair pass's second half: it starts the workflow of
// each row a store query found without one, logging each outcome under
// idKey ("refundId", "subscriptionId") with what names the kind, and
// answers how many it started. A row that still fails waits for the next
// pass.
func StartMissing[T any](ctx context.Context, log *slog.Logger, what, idKey string, rows []T,
	id func(*T) string, start func(context.Context, *T) error) int {
	n := 0
	for i := range rows {
		if err := start(ctx, &rows[i]); err != nil {
			log.Warn("repair: "+what+" workflow still not started", idKey, id(&rows[i]), "err", err)
			continue
		}
		log.Info("repair: started the workflow of a "+what+" left without one", idKey, id(&rows[i]))
		n++
	}
	return n
}
