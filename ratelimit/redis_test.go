package ratelimit

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisUnreachableFallsBack: a store whose Redis is a closed loopback port
// limits from memory, exactly, logs the outage once, and still blocks.
func TestRedisUnreachableFallsBack(t *testing.T) {
	var logs logBuffer
	c := redis.NewClient(&redis.Options{Addr: closedPort(t), MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	store := NewRedisStore(c, "", WithRedisLogger(logs.logger()), WithRetryInterval(time.Millisecond))
	clock := newClock()
	lim := New(store, testConfig(), WithClock(clock.Now))
	srv := server(t, newEngine(t, lim, []string{"127.0.0.1"}))

	if got := burst(t, []*httptest.Server{srv}, "POST", "/api/developer/keys", "198.51.100.1", 15); got[200] != 5 || got[429] != 10 {
		t.Fatalf("burst during outage: %v, want 5×200 and 10×429", got)
	}
	if !store.Degraded() {
		t.Fatal("store not degraded with Redis on a closed port")
	}
	for i := 0; i < 10; i++ {
		time.Sleep(2 * time.Millisecond) // let probes happen; they fail quietly
		if err := lim.RecordAuthFailure(context.Background(), "198.51.100.2"); err != nil {
			t.Fatalf("RecordAuthFailure during outage: %v", err)
		}
	}
	if r := call(t, srv, "GET", "/api/protected", "198.51.100.2", "Authorization", goodKey); r.code != 401 {
		t.Fatalf("block during outage: %d", r.code)
	}
	if r := call(t, srv, "GET", "/api/protected", "198.51.100.3", "Authorization", goodKey); r.code != 200 {
		t.Fatalf("other address during outage: %d", r.code)
	}
	if n := logs.count("redis unreachable"); n != 1 {
		t.Fatalf("outage logged %d times, want once:\n%s", n, logs.buf.String())
	}
}

// TestRedisOutageAndRecovery: Redis goes away behind a proxy and comes back.
// The fallback starts warm (this process's recent requests still count), a
// block established during the outage survives the recovery, and the outage
// and the recovery are each logged once.
func TestRedisOutageAndRecovery(t *testing.T) {
	direct := testRedis(t)
	prefix := testPrefix(t, direct)
	proxy := newFlakyProxy(t, redisAddr())
	c := redis.NewClient(&redis.Options{Addr: proxy.addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	var logs logBuffer
	store := NewRedisStore(c, prefix, WithRedisLogger(logs.logger()),
		WithRetryInterval(10*time.Millisecond), WithRedisTimeout(5*time.Second))
	clock := newClock()
	lim := New(store, testConfig(), WithClock(clock.Now))
	srv := server(t, newEngine(t, lim, []string{"127.0.0.1"}))
	ctx := context.Background()
	const client, attacker, other = "198.51.100.10", "198.51.100.11", "198.51.100.12"

	for i := 0; i < 3; i++ {
		if r := call(t, srv, "POST", "/api/developer/keys", client); r.code != 200 {
			t.Fatalf("healthy request %d: %d", i+1, r.code)
		}
	}
	if n := direct.ZCard(ctx, prefix+"{"+client+"}:"+TierKeyManagement).Val(); n != 3 || store.Degraded() {
		t.Fatalf("healthy: %d events in Redis, degraded=%v", n, store.Degraded())
	}

	proxy.setDown(true)
	codes := map[int]int{}
	for i := 0; i < 4; i++ {
		codes[call(t, srv, "POST", "/api/developer/keys", client).code]++
	}
	if codes[200] != 2 || codes[429] != 2 || !store.Degraded() {
		t.Fatalf("outage: %v degraded=%v; want 2 more 200s then 429 (fallback warm with the 3 earlier requests)", codes, store.Degraded())
	}
	for i := 0; i < 10; i++ {
		_ = lim.RecordAuthFailure(ctx, attacker)
	}
	if r := call(t, srv, "GET", "/api/protected", attacker, "Authorization", goodKey); r.code != 401 {
		t.Fatalf("block during outage: %d", r.code)
	}

	proxy.setDown(false)
	time.Sleep(30 * time.Millisecond) // past the retry interval
	if r := call(t, srv, "GET", "/api/things", other); r.code != 200 || store.Degraded() {
		t.Fatalf("after recovery: %d degraded=%v", r.code, store.Degraded())
	}
	if n := direct.ZCard(ctx, prefix+"{"+other+"}:"+TierGlobal).Val(); n != 1 {
		t.Fatalf("after recovery the request was not counted in Redis (%d)", n)
	}
	// Redis never saw the attacker's failures; the block holds anyway.
	if r := call(t, srv, "GET", "/api/protected", attacker, "Authorization", goodKey); r.code != 401 {
		t.Fatalf("block after recovery: %d, want 401", r.code)
	}
	clock.Advance(5 * time.Minute)
	if r := call(t, srv, "GET", "/api/protected", attacker, "Authorization", goodKey); r.code != 200 {
		t.Fatalf("block after its window: %d", r.code)
	}
	if d, u := logs.count("redis unreachable"), logs.count("redis reachable again"); d != 1 || u != 1 {
		t.Fatalf("logged outage %d and recovery %d times, want once each:\n%s", d, u, logs.buf.String())
	}
}

// TestOpenStore: no URL gives memory; a URL gives a Redis store that falls
// back when nothing listens; a bad URL is an error.
func TestOpenStore(t *testing.T) {
	s, closeFn, err := OpenStore("", "")
	if err != nil || closeFn() != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*MemoryStore); !ok {
		t.Fatalf("empty URL gave %T", s)
	}
	if _, _, err := OpenStore("http://nope", ""); err == nil {
		t.Fatal("bad URL accepted")
	}
	s, closeFn, err = OpenStore("redis://"+closedPort(t)+"/0?dial_timeout=200ms", "x:",
		WithRedisLogger(new(logBuffer).logger()))
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	rs, ok := s.(*RedisStore)
	if !ok {
		t.Fatalf("redis URL gave %T", s)
	}
	r, err := rs.Take(context.Background(), "1.2.3.4", t0, nil, []Rule{{Name: "g", Limit: 1, Window: time.Second}})
	if err != nil || !r.Allowed || !rs.Degraded() {
		t.Fatalf("Take with Redis down: %+v %v degraded=%v", r, err, rs.Degraded())
	}
}
