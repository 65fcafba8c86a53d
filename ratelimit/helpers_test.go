package ratelimit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	// go-redis logs every refused dial of the outage tests; the store's own
	// log is what those tests check.
	redis.SetLogger(quietRedis{})
	os.Exit(m.Run())
}

// t0 is a whole-millisecond instant, so expected header values are exact.
var t0 = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

// fakeClock is a settable clock shared by limiters in one test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// redisAddr is the test Redis; loopback only.
func redisAddr() string {
	if a := os.Getenv("PAYGATE_TEST_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// testRedis connects to the test Redis or skips (fails when CI is set).
func testRedis(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redisAddr(), PoolSize: 64, MaxRetries: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		if os.Getenv("CI") != "" {
			t.Fatalf("Redis at %s unreachable and CI is set: %v", redisAddr(), err)
		}
		t.Skipf("Redis at %s unreachable (%v): skipping Redis tests; set CI to make this a failure", redisAddr(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testPrefix returns a fresh key prefix and deletes its keys when the test ends.
func testPrefix(t testing.TB, c *redis.Client) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "paygate-test:rl:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			_ = c.Del(ctx, keys...).Err()
		}
	})
	return prefix
}

// storeKind builds stores of one kind for a test; every call to open returns a
// store over the same shared state (the same Redis prefix), like one replica
// each, except for memory where each call gives an independent process.
type storeKind struct {
	name string
	open func(t *testing.T) func() Store
}

var storeKinds = []storeKind{
	{"memory", func(t *testing.T) func() Store {
		s := NewMemoryStore()
		return func() Store { return s }
	}},
	{"redis", func(t *testing.T) func() Store {
		c := testRedis(t)
		prefix := testPrefix(t, c)
		var stores []*RedisStore
		t.Cleanup(func() {
			for _, s := range stores {
				if s.Degraded() {
					t.Errorf("redis store fell back to memory during the test")
				}
			}
		})
		return func() Store {
			s := NewRedisStore(c, prefix, WithRedisTimeout(10*time.Second))
			stores = append(stores, s)
			return s
		}
	}},
}

func forEachStore(t *testing.T, f func(t *testing.T, open func() Store)) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) { f(t, k.open(t)) })
	}
}

// testConfig is DefaultConfig with limits applied to loopback, as tests run there.
func testConfig() Config {
	c := DefaultConfig()
	c.ExemptLoopback = false
	return c
}

// goodKey is the only credential the dummy auth accepts.
const goodKey = "Bearer svc_test_sk_good"

// newEngine mounts lim on /api of a gin engine with dummy routes. trusted are
// the engine's trusted proxies (nil trusts none).
func newEngine(t testing.TB, lim *Limiter, trusted []string) *gin.Engine {
	t.Helper()
	e := gin.New()
	if err := e.SetTrustedProxies(trusted); err != nil {
		t.Fatal(err)
	}
	ok := func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "success"}) }
	api := e.Group("/api", lim.Middleware())
	api.Any("/things", ok)
	api.Any("/things/:id", ok)
	api.POST("/checkout/session", ok)
	api.GET("/checkout/session/:id", ok)
	api.POST("/checkout/quote", ok)
	api.POST("/checkout/submit", ok)
	api.GET("/checkout/links/:id", ok)
	api.Any("/developer/keys", ok)
	api.Any("/webhooks", ok)
	api.Any("/webhooks/:id", ok)
	api.POST("/auth/signup", ok)
	api.POST("/upload", ok)
	// A stand-in for the real auth middleware: every failure is recorded.
	auth := func(c *gin.Context) {
		if c.GetHeader("Authorization") != goodKey {
			if err := lim.RecordAuthFailure(c.Request.Context(), c.ClientIP()); err != nil {
				t.Errorf("RecordAuthFailure: %v", err)
			}
			c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{
				"status": "error", "message": "invalid or revoked API key", "code": "UNAUTHORIZED",
			})
			return
		}
		c.Next()
	}
	api.GET("/protected", auth, ok)
	api.POST("/protected", auth, ok)
	return e
}

// server runs e on a loopback httptest server whose clients may send X-Forwarded-For.
func server(t testing.TB, e *gin.Engine) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}

var httpClient = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &http.Transport{
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     30 * time.Second,
	},
}

type response struct {
	code   int
	header http.Header
	body   string
}

// call sends one request; ip, when set, goes in X-Forwarded-For.
func call(t testing.TB, srv *httptest.Server, method, path, ip string, hdr ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ip != "" {
		req.Header.Set("X-Forwarded-For", ip)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, header: resp.Header, body: string(b)}
}

// burst fires n requests at once, round-robin over srvs, and counts statuses.
func burst(t testing.TB, srvs []*httptest.Server, method, path, ip string, n int) map[int]int {
	t.Helper()
	var (
		mu     sync.Mutex
		counts = map[int]int{}
		wg     sync.WaitGroup
		start  = make(chan struct{})
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(srv *httptest.Server) {
			defer wg.Done()
			<-start
			req, _ := http.NewRequest(method, srv.URL+path, nil)
			if ip != "" {
				req.Header.Set("X-Forwarded-For", ip)
			}
			resp, err := httpClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			counts[resp.StatusCode]++
			mu.Unlock()
		}(srvs[i%len(srvs)])
	}
	close(start)
	wg.Wait()
	return counts
}

// logBuffer collects slog output for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) count(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), substr)
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// flakyProxy forwards TCP to Redis and can simulate an outage: while down it
// drops every open connection and refuses new ones (accept, then close).
type flakyProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	down     bool
	conns    map[net.Conn]struct{}
}

func newFlakyProxy(t testing.TB, upstream string) *flakyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &flakyProxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.setDown(true)
	})
	return p
}

func (p *flakyProxy) addr() string { return p.ln.Addr().String() }

func (p *flakyProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			_ = c.Close()
		}
		clear(p.conns)
	}
}

func (p *flakyProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *flakyProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			up, err := net.Dial("tcp", p.upstream)
			if err != nil || !p.track(c, up) {
				_ = c.Close()
				if up != nil {
					_ = up.Close()
				}
				return
			}
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			_, _ = io.Copy(c, up)
			_ = c.Close()
		}()
	}
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
