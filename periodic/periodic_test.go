package periodic_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paygate/paygate/periodic"
)

func TestRunPassesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		periodic.Run(ctx, 10*time.Millisecond, func(context.Context) {
			if n.Add(1) == 3 {
				cancel()
			}
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop when its context ended")
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("%d passes, want 3 (the first at once)", got)
	}
}
