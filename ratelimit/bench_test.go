package ratelimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// benchSubjects spreads load over many addresses; with the clock advancing
// 1 ms per operation every address stays under its limits, so the benchmark
// measures the admitting path (check and record in two tiers).
const benchSubjects = 1000

func benchRules() []Rule {
	var rules []Rule
	for _, t := range DefaultTiers() {
		if t.Name == TierGlobal || t.Name == TierRead {
			rules = append(rules, t.Rule())
		}
	}
	return rules
}

func benchStores(b *testing.B) map[string]Store {
	c := testRedis(b)
	return map[string]Store{
		"memory": NewMemoryStore(),
		"redis":  NewRedisStore(c, testPrefix(b, c), WithRedisTimeout(10*time.Second)),
	}
}

// BenchmarkAllow measures one admission (a GET: block check plus the global
// and read tiers) per store, serially and from parallel goroutines.
func BenchmarkAllow(b *testing.B) {
	subjects := make([]string, benchSubjects)
	for i := range subjects {
		subjects[i] = "10.1." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	auth := DefaultTiers()[6].Rule()
	rules := benchRules()
	stores := benchStores(b)
	for _, name := range []string{"memory", "redis"} {
		s := stores[name]
		var tick atomic.Int64
		run := func(b *testing.B, i int64) {
			r, err := s.Take(context.Background(), subjects[i%benchSubjects], t0.Add(time.Duration(i)*time.Millisecond), &auth, rules)
			if err != nil || !r.Allowed {
				b.Fatalf("take: %+v %v", r, err)
			}
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				run(b, tick.Add(1))
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.SetParallelism(8) // 16 goroutines on 2 CPUs: Redis round trips overlap
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					run(b, tick.Add(1))
				}
			})
		})
	}
}

// BenchmarkMiddleware measures the whole Gin middleware on the memory store.
func BenchmarkMiddleware(b *testing.B) {
	var tick atomic.Int64
	lim := New(NewMemoryStore(), testConfig(), WithClock(func() time.Time {
		return t0.Add(time.Duration(tick.Add(1)) * time.Millisecond)
	}))
	e := newEngine(b, lim, []string{"127.0.0.1"})
	req := httptest.NewRequest(http.MethodGet, "/api/things", nil)
	req.RemoteAddr = "127.0.0.1:1234"
	subjects := make([]string, benchSubjects)
	for i := range subjects {
		subjects[i] = "10.2." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	var n int
	for b.Loop() {
		n++
		req.Header.Set("X-Forwarded-For", subjects[n%benchSubjects])
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
	}
}
