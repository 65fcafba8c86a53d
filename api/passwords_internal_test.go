package api

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
)

// TestPasswordGate: at most the gate's slots hash at once, and a request
// that waits past the gate's wait for one is answered 503 (with a retry);
// an account's turn is held by one request at a time, and the gate keeps
// no entry for an account nobody holds or waits for.
func TestPasswordGate(t *testing.T) {
	g := newPasswordGate()
	g.wait = 200 * time.Millisecond
	ctx := context.Background()
	var running, most atomic.Int32
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range cap(g.slots) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = g.hash(ctx, func() {
				n := running.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				<-release
				running.Add(-1)
			})
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for running.Load() < int32(cap(g.slots)) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	err := g.hash(ctx, func() { t.Error("hashed past the gate's slots") })
	var ae *apperr.Error
	if !errors.Is(err, apperr.ErrUnavailable) || !errors.As(err, &ae) || ae.RetryAfter <= 0 {
		t.Fatalf("a hash with every slot taken: %v", err)
	}
	close(release)
	wg.Wait()
	if most.Load() != int32(cap(g.slots)) {
		t.Fatalf("%d hashes ran at once, the gate has %d slots", most.Load(), cap(g.slots))
	}

	first, err := g.account(ctx, "Ann@Example.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.account(ctx, "ann@example.com "); !errors.Is(err, apperr.ErrUnavailable) {
		t.Fatalf("the same account's turn while held: %v", err)
	}
	other, err := g.account(ctx, "bob@example.com")
	if err != nil {
		t.Fatalf("another account's turn: %v", err)
	}
	other()
	first()
	again, err := g.account(ctx, "ann@example.com")
	if err != nil {
		t.Fatalf("the turn once given back: %v", err)
	}
	again()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.turns) != 0 {
		t.Fatalf("turns kept for nobody: %d", len(g.turns))
	}
}
