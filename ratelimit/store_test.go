package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStoreSemantics runs the same script of store calls on both stores, so
// the Lua script and the in-memory logs agree on every edge.
func TestStoreSemantics(t *testing.T) {
	ctx := context.Background()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	forEachStore(t, func(t *testing.T, open func() Store) {
		s := open()
		a := Rule{Name: "a", Limit: 3, Window: 10 * time.Second}
		b := Rule{Name: "b", Limit: 2, Window: time.Minute}
		blk := Rule{Name: "blk", Limit: 2, Window: time.Minute}

		take := func(now time.Duration, rules ...Rule) Result {
			t.Helper()
			r, err := s.Take(ctx, "s1", at(now), &blk, rules)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		expect := func(r Result, allowed bool, states ...State) {
			t.Helper()
			if r.Blocked || r.Allowed != allowed || len(r.States) != len(states) {
				t.Fatalf("result %+v, want allowed=%v %d states", r, allowed, len(states))
			}
			for i, st := range states {
				if r.States[i].Count != st.Count || !r.States[i].Reset.Equal(st.Reset) {
					t.Errorf("state %d = {%d %s}, want {%d %s}", i, r.States[i].Count,
						r.States[i].Reset.Format(time.StampMilli), st.Count, st.Reset.Format(time.StampMilli))
				}
			}
		}

		expect(take(0, a, b), true, State{1, at(10 * time.Second)}, State{1, at(time.Minute)})
		expect(take(time.Second, a, b), true, State{2, at(10 * time.Second)}, State{2, at(time.Minute + 0)})
		// b is full: refused, and a does not record the refused request.
		expect(take(2*time.Second, a, b), false, State{2, at(10 * time.Second)}, State{2, at(time.Minute)})
		expect(take(2*time.Second, a), true, State{3, at(10 * time.Second)})
		// a full: reset is when the oldest leaves (t0+10s).
		expect(take(3*time.Second, a), false, State{3, at(10 * time.Second)})
		// An event leaves exactly window after it happened.
		expect(take(10*time.Second-time.Millisecond, a), false, State{3, at(10 * time.Second)})
		expect(take(10*time.Second, a), true, State{3, at(11 * time.Second)})
		// Empty rules: a read-only block check.
		expect(take(10*time.Second), true)

		// Add caps the log at Limit and reports when it drops below Limit.
		for i, want := range []State{
			{1, at(time.Minute)},
			{2, at(time.Minute)},
			{2, at(time.Minute + time.Second)}, // the t0 event was dropped
		} {
			st, err := s.Add(ctx, "s1", at(time.Duration(i)*time.Second), blk)
			if err != nil {
				t.Fatal(err)
			}
			if !(st.Count == want.Count && st.Reset.Equal(want.Reset)) {
				t.Errorf("Add %d = {%d %s}, want {%d %s}", i, st.Count, st.Reset, want.Count, want.Reset)
			}
		}
		r := take(30 * time.Second)
		if !r.Blocked || r.Block.Count != 2 || !r.Block.Reset.Equal(at(time.Minute+time.Second)) {
			t.Fatalf("block = %+v, want blocked until t0+61s", r)
		}
		// Blocked: nothing recorded in a.
		expect(take(time.Minute+time.Second, a), true, State{1, at(time.Minute + 11*time.Second)})

		// Out-of-order events (clock readings taken before the lock/round
		// trip) are kept in order.
		if _, err := s.Add(ctx, "s2", at(5*time.Second), b); err != nil {
			t.Fatal(err)
		}
		st, _ := s.Add(ctx, "s2", at(4*time.Second), b)
		if st.Count != 2 || !st.Reset.Equal(at(64*time.Second)) {
			t.Errorf("out of order: %+v, want reset t0+64s", st)
		}
	})
}

// TestStoreConcurrentExact hammers one subject from many goroutines directly
// on the store: exactly Limit takes succeed per window.
func TestStoreConcurrentExact(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() Store) {
		s := open()
		rules := []Rule{{Name: "g", Limit: 100, Window: 10 * time.Second}, {Name: "r", Limit: 37, Window: 10 * time.Second}}
		var wg sync.WaitGroup
		var mu sync.Mutex
		allowed := 0
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 25; j++ {
					r, err := s.Take(context.Background(), "hot", t0.Add(time.Duration(j)*time.Millisecond), nil, rules)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						mu.Lock()
						allowed++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if allowed != 37 {
			t.Fatalf("allowed %d of 400, want 37", allowed)
		}
	})
}

// TestMemorySweep: logs of addresses that went quiet are dropped.
func TestMemorySweep(t *testing.T) {
	s := NewMemoryStore()
	r := Rule{Name: "g", Limit: 5, Window: 10 * time.Second}
	for i := 0; i < 1000; i++ {
		_, _ = s.Take(context.Background(), fmt.Sprintf("10.0.%d.%d", i/256, i%256), t0, nil, []Rule{r})
	}
	count := func() int {
		n := 0
		for i := range s.shards {
			s.shards[i].mu.Lock()
			n += len(s.shards[i].subjects)
			s.shards[i].mu.Unlock()
		}
		return n
	}
	if n := count(); n != 1000 {
		t.Fatalf("%d subjects, want 1000", n)
	}
	// Touch every shard after the window and a sweep period have passed.
	later := t0.Add(10*time.Second + time.Duration(sweepEvery)*time.Millisecond)
	for i := 0; i < 10*memShards; i++ {
		_, _ = s.Take(context.Background(), fmt.Sprintf("fresh-%d", i), later, nil, nil)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d subjects left after sweep, want 0", n)
	}
}

// TestRedisPrefixValidation: braces in the prefix would break Cluster hash tags.
func TestRedisPrefixValidation(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "must not contain") {
			t.Fatalf("panic = %v", r)
		}
	}()
	NewRedisStore(nil, "bad{prefix}")
}
