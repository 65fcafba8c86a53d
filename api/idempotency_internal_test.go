package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// newIdempotentServer is a server on a SQLite store whose clock runs
// offset ahead, renewing idempotency claims every 5 ms.
func newIdempotentServer(t *testing.T) (*Server, *atomic.Int64) {
	st := storetest.Open(t, "sqlite")
	offset := new(atomic.Int64)
	st.SetClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	gin.SetMode(gin.TestMode)
	return &Server{Deps: Deps{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), IdempotencyRenew: 5 * time.Millisecond}}, offset
}

// TestIdempotentRequestKeepsItsKeyWhileRunning: a request under an
// Idempotency-Key that runs past the takeover time renews its claim, so a
// retry meanwhile is a 409 and the handler runs once (a settlement or a
// refund retried after a minute was run twice before); the retry after it
// replays its answer.
func TestIdempotentRequestKeepsItsKeyWhileRunning(t *testing.T) {
	s, offset := newIdempotentServer(t)
	m := &models.Merchant{Email: "slow@example.com", PasswordHash: "x", BusinessName: "Slow"}
	if _, err := s.Store.CreateMerchant(context.Background(), m, &models.DashboardSession{TokenHash: "s"}, models.NewKey{Hash: "k", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	entered, release := make(chan struct{}, 1), make(chan struct{})
	e := gin.New()
	e.POST("/slow", func(c *gin.Context) {
		c.Set(principalKey, Principal{MerchantID: m.ID, Mode: models.ModeTest})
	}, s.idempotent, func(c *gin.Context) {
		n := runs.Add(1)
		entered <- struct{}{}
		<-release
		c.JSON(http.StatusCreated, gin.H{"status": "success", "data": gin.H{"run": n}})
	})
	post := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/slow", strings.NewReader(`{"amount":"5.00"}`))
		r.Header.Set(HeaderIdempotencyKey, "payout-1")
		e.ServeHTTP(w, r)
		return w
	}

	var wg sync.WaitGroup
	var first *httptest.ResponseRecorder
	wg.Add(1)
	go func() { defer wg.Done(); first = post() }()
	<-entered
	// Two minutes pass while it runs; it renews meanwhile.
	offset.Store(int64(2 * time.Minute))
	// Forty renewal periods for one to land under the moved clock.
	time.Sleep(200 * time.Millisecond)
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- post() }()
	select {
	case retry := <-done:
		if retry.Code != http.StatusConflict {
			t.Fatalf("retry while the first runs: %d %s, want 409", retry.Code, retry.Body)
		}
	case <-entered:
		close(release)
		wg.Wait()
		t.Fatalf("the retry took the key over and ran the handler a second time")
	}
	close(release)
	wg.Wait()
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	if again := post(); again.Code != http.StatusCreated || again.Body.String() != first.Body.String() || again.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("retry after it: %d %s", again.Code, again.Body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times for one key", n)
	}
}

// TestIdempotentRequestThatPanicsStopsRenewing: a handler that panics (the
// recovery outside answers 500) leaves no claim renewed for ever: a minute
// later a retry takes the key over and runs.
func TestIdempotentRequestThatPanicsStopsRenewing(t *testing.T) {
	s, offset := newIdempotentServer(t)
	var runs atomic.Int32
	e := gin.New()
	e.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusInternalServerError) }))
	e.POST("/boom", func(c *gin.Context) {
		c.Set(principalKey, Principal{MerchantID: "m1", Mode: models.ModeTest})
	}, s.idempotent, func(c *gin.Context) {
		if runs.Add(1) == 1 {
			panic("boom")
		}
		c.JSON(http.StatusCreated, gin.H{"status": "success"})
	})
	post := func() int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/boom", strings.NewReader(`{}`))
		r.Header.Set(HeaderIdempotencyKey, "boom-1")
		e.ServeHTTP(w, r)
		return w.Code
	}
	if code := post(); code != http.StatusInternalServerError {
		t.Fatalf("the panicking request: %d", code)
	}
	offset.Store(int64(2 * time.Minute))
	time.Sleep(100 * time.Millisecond) // twenty renewal periods: none may land
	if code := post(); code != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("retry a minute after a panic: %d after %d runs, want it run (201)", code, runs.Load())
	}
}
