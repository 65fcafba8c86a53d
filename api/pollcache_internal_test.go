package api

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

type fakeFeed struct {
	live atomic.Bool
	subs []func(string)
}

func (f *fakeFeed) Subscribe(fn func(string)) { f.subs = append(f.subs, fn) }
func (f *fakeFeed) Live() bool                { return f.live.Load() }
func (f *fakeFeed) tell(id string) {
	for _, fn := range f.subs {
		fn(id)
	}
}

func TestPollCacheKeepsOnlyFreshReads(t *testing.T) {
	f := &fakeFeed{}
	f.live.Store(true)
	c := newPollCache(f)

	// A read, then a hit.
	_, start, ok := c.get("a")
	if ok {
		t.Fatal("empty cache answered")
	}
	c.put("a", []byte("v1"), start)
	if b, _, ok := c.get("a"); !ok || string(b) != "v1" {
		t.Fatalf("kept answer: %q %v", b, ok)
	}

	// A read that started before a write was told is not kept, although
	// a later read (started after the write) was kept first.
	f.tell("a")
	_, stale, _ := c.get("a")
	f.tell("a")
	_, fresh, _ := c.get("a")
	c.put("a", []byte("v3"), fresh)
	c.put("a", []byte("v2-stale"), stale)
	if b, _, _ := c.get("a"); string(b) != "v3" {
		t.Fatalf("answer after the race: %q, want v3", b)
	}

	// A write to a session nobody kept yet still stops a read in flight.
	_, start, _ = c.get("b")
	f.tell("b")
	c.put("b", []byte("stale"), start)
	if _, _, ok := c.get("b"); ok {
		t.Fatal("a read started before its session's write was kept")
	}

	// Another session's write does not stop a read.
	_, start, _ = c.get("b")
	f.tell("z")
	c.put("b", []byte("b1"), start)
	if b, _, ok := c.get("b"); !ok || string(b) != "b1" {
		t.Fatalf("read stopped by another session's write: %q %v", b, ok)
	}

	// The feed going down answers nothing and forgets everything; reads
	// started before it came back are not kept.
	_, before, _ := c.get("c")
	f.live.Store(false)
	f.tell("")
	if _, _, ok := c.get("b"); ok {
		t.Fatal("answered while the feed was down")
	}
	c.put("c", []byte("x"), before)
	f.live.Store(true)
	f.tell("")
	c.put("c", []byte("x"), before)
	if _, _, ok := c.get("c"); ok {
		t.Fatal("kept a read started before the feed came back")
	}
	if n, _ := c.stats(); n != 0 {
		t.Fatalf("entries after forgetting: %d", n)
	}
}

func TestPollCacheBounded(t *testing.T) {
	f := &fakeFeed{}
	f.live.Store(true)
	c := newPollCache(f)
	c.max = 100
	for i := 0; i < 1000; i++ {
		id := fmt.Sprint(i)
		_, start, _ := c.get(id)
		c.put(id, []byte(id), start)
		f.tell(fmt.Sprint("w", i))
	}
	if n, _ := c.stats(); n > 100 {
		t.Fatalf("%d entries kept, bound 100", n)
	}
}

// TestPollCacheConcurrent: readers and writers race; after the last write
// is told, a read answers the last value (run with -race).
func TestPollCacheConcurrent(t *testing.T) {
	f := &fakeFeed{}
	f.live.Store(true)
	c := newPollCache(f)
	var version atomic.Int64
	var mu sync.Mutex // the "database"
	read := func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return []byte(fmt.Sprint(version.Load()))
	}
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				if _, start, ok := c.get("s"); !ok {
					c.put("s", read(), start)
				}
			}
		}()
	}
	for i := 0; i < 500; i++ {
		mu.Lock()
		version.Add(1)
		mu.Unlock()
		f.tell("s") // told after the commit, as the feed does
	}
	wg.Wait()
	b, start, ok := c.get("s")
	if !ok {
		b = read()
		c.put("s", b, start)
	}
	if string(b) != fmt.Sprint(version.Load()) {
		t.Fatalf("answer %s after the last write %d", b, version.Load())
	}
}
