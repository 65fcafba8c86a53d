package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/checkout"
)

// streamLifetime bounds one event stream; the browser's EventSource
// reconnects by itself, so a proxy's idle limits never cut a stream mid-way.
const streamLifetime = 5 * time.Minute

var hubMu sync.Mutex

// statusHub is the server's shared session reader for event streams.
func (s *Server) statusHub() *checkout.StatusHub {
	hubMu.Lock()
	defer hubMu.Unlock()
	if s.hub == nil {
		s.hub = &checkout.StatusHub{Service: s.Checkout}
		if s.SessionChanges != nil {
			s.hub.Follow(s.SessionChanges)
		}
	}
	return s.hub
}

// checkoutEvents streams a session's status as server-sent events (event
// "status", data a JSON snapshot) until it ends: the hosted page's live
// status. Every client of one session shares one reader (checkout.StatusHub),
// so open tabs do not multiply database reads.
func (s *Server) checkoutEvents(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	if _, err := s.Store.CheckoutSession(c.Request.Context(), id); err != nil {
		fail(c, err)
		return
	}
	snaps, cancel := s.statusHub().Subscribe(id)
	defer cancel()
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Status(http.StatusOK)
	rc := http.NewResponseController(c.Writer)
	end := time.After(streamLifetime)
	beat := time.NewTicker(15 * time.Second)
	defer beat.Stop()
	write := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(c.Writer, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write("retry: 2000\n\n") {
		return
	}
	for {
		select {
		case <-c.Request.Context().Done():
			return
		case <-end:
			return
		case <-s.draining():
			// The server is shutting down: the page's EventSource
			// reconnects (retry: 2000) to a server that is up.
			return
		case <-beat.C:
			if !write(": keep-alive\n\n") {
				return
			}
		case snap := <-snaps:
			b, _ := json.Marshal(snap)
			if !write("event: status\ndata: %s\n\n", b) || snap.Terminal {
				return
			}
		}
	}
}

// Drain ends the open status streams (call it when the HTTP server starts
// shutting down: http.Server.Shutdown does not end long-lived responses,
// and would wait for each until its deadline). Safe to call more than once.
func (s *Server) Drain() {
	s.drainOnce.Do(func() { close(s.drainCh()) })
}

func (s *Server) draining() <-chan struct{} { return s.drainCh() }

func (s *Server) drainCh() chan struct{} {
	s.drainInit.Do(func() { s.drain = make(chan struct{}) })
	return s.drain
}
