package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
)

// HeaderIdempotencyKey names a POST's idempotency key; HeaderReplayed marks
// an answer replayed from the key's first request.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
	// CodeIdempotencyMismatch: the key was first used with another request.
	CodeIdempotencyMismatch = "IDEMPOTENCY_KEY_REUSED"
)

// maxIdempotencyKey bounds the header (Stripe's limit).
const maxIdempotencyKey = 255

// captureWriter keeps a copy of what a handler writes.
type captureWriter struct {
	gin.ResponseWriter
	body bytes.Buffer
}

func (w *captureWriter) Write(b []byte) (int, error) {
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *captureWriter) WriteString(s string) (int, error) {
	w.body.WriteString(s)
	return w.ResponseWriter.WriteString(s)
}

// idempotent makes an authenticated POST safe to retry: with an
// Idempotency-Key, the first successful answer is stored (in the database,
// shared by every API replica, for 24 hours) and replayed exactly to a
// retry with the same key and body, with Idempotent-Replayed: true. The same
// key with another body is a 422; while the first request still runs, a 409.
// Failures are not stored, so a corrected request may reuse the key.
func (s *Server) idempotent(c *gin.Context) {
	key := c.GetHeader(HeaderIdempotencyKey)
	if key == "" {
		c.Next()
		return
	}
	if len(key) > maxIdempotencyKey || strings.ContainsFunc(key, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		// Printable ASCII: a byte above it is no text the database will
		// store (PostgreSQL refuses invalid UTF-8 with an error).
		fail(c, apperr.Invalid(HeaderIdempotencyKey, "must be 1 to 255 printable ASCII characters"))
		return
	}
	// Read what the largest route accepts (an upload) and one byte more: a
	// body cut short here would reach the handler cut short.
	limit := int64(MaxUploadBytes + 64<<10)
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, limit+1))
	if err != nil {
		fail(c, apperr.Invalid("body", "could not be read"))
		return
	}
	if int64(len(body)) > limit {
		fail(c, apperr.Invalid("body", "is too large"))
		return
	}
	c.Request.Body = io.NopCloser(bytes.NewReader(body))
	sum := sha256.New()
	sum.Write([]byte(c.Request.Method + " " + c.Request.URL.RequestURI() + "\n"))
	sum.Write(body)
	hash := hex.EncodeToString(sum.Sum(nil))
	p := principal(c)
	scope := string(p.Mode)
	if p.SessionID != "" {
		scope = "dashboard"
	}
	ctx := c.Request.Context()
	state, rec, err := s.Store.BeginIdempotent(ctx, p.MerchantID, scope, key, hash)
	if err != nil {
		fail(c, err)
		return
	}
	switch state {
	case models.IdemReplay:
		c.Header(HeaderReplayed, "true")
		c.Data(rec.ResponseStatus, "application/json; charset=utf-8", []byte(rec.ResponseBody))
		c.Abort()
		return
	case models.IdemMismatch:
		c.AbortWithStatusJSON(http.StatusUnprocessableEntity, errorBody{Status: "error", Code: CodeIdempotencyMismatch,
			Message: "this Idempotency-Key was used with a different request; use a new key for a new request"})
		return
	case models.IdemRunning:
		fail(c, apperr.Conflict("a request with this Idempotency-Key is still being processed; retry shortly"))
		return
	case models.IdemUnreadable:
		// It ran: running it again could do it twice.
		s.Logger.ErrorContext(ctx, "an idempotent answer is sealed under a server secret no longer configured; run `paygate secrets rotate` before dropping PAYGATE_SECRET_KEY_PREVIOUS",
			"key", key)
		fail(c, apperr.Conflict("this request was already processed, and its answer can no longer be read; "+
			"look the result up (e.g. list the resource) rather than retrying with this Idempotency-Key"))
		return
	}
	// The request renews its claim while it runs: a retry finds it running
	// (409), however long it takes, and only takes the key over once this
	// process stopped renewing it (it died mid-way).
	stop := s.renewIdempotent(ctx, rec)
	defer stop() // a handler that panics stops renewing too: a retry takes over
	w := &captureWriter{ResponseWriter: c.Writer}
	c.Writer = w
	c.Next()
	stop()
	// The request's context may be gone (client hung up): record anyway.
	store := context.WithoutCancel(ctx)
	if status := w.Status(); status >= 200 && status < 300 {
		err = s.Store.FinishIdempotent(store, rec, status, w.body.String())
	} else {
		err = s.Store.ForgetIdempotent(store, rec)
	}
	if err != nil {
		s.Logger.WarnContext(ctx, "idempotency key not recorded", "err", err, "key", key)
	}
}

// renewIdempotent renews rec's claim every IdempotencyRenew until the
// returned stop is called (and has waited for the renewing goroutine);
// stop may be called more than once.
func (s *Server) renewIdempotent(ctx context.Context, rec *models.IdempotencyKey) (stop func()) {
	every := s.IdempotencyRenew
	if every <= 0 {
		every = models.IdemRenewEvery
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := s.Store.RenewIdempotent(context.WithoutCancel(ctx), rec); err != nil {
					s.Logger.WarnContext(ctx, "idempotency key not renewed", "err", err)
					if errors.Is(err, models.ErrIdempotencyLost) {
						return
					}
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-exited
		})
	}
}
