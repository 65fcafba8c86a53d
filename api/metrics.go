package api

import (
	"time"

	"github.com/gin-gonic/gin"
)

// unmatchedRoute labels requests that matched no route, so that scanners
// probing random paths cannot blow up the metric's label set.
const unmatchedRoute = "(no route)"

// observe records every request in Deps.Metrics by route pattern (Gin's
// FullPath, never the raw path), method and status, with its latency.
func (s *Server) observe(c *gin.Context) {
	if s.Metrics == nil {
		c.Next()
		return
	}
	start := time.Now()
	s.Metrics.HTTPInFlight.Inc()
	defer s.Metrics.HTTPInFlight.Dec()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = unmatchedRoute
	}
	s.Metrics.ObserveHTTP(route, methodLabel(c.Request.Method), c.Writer.Status(), time.Since(start))
}

// methodLabel keeps the method label to the standard methods.
func methodLabel(m string) string {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS":
		return m
	}
	return "OTHER"
}
