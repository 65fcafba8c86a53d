// Package periodic runs the workers' maintenance passes (repairers, the
// payment watcher, reconcilers): once at once, then every interval, until
// the context ends.
package periodic

import (
	"context"
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
