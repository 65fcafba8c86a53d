package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Operational routes, served outside /api: no credential, no rate limit.
// The API's port answers the probes; /metrics is on the operational listener.
const (
	// PathHealthz answers 200 while the process runs (liveness).
	PathHealthz = "/healthz"
	// PathReadyz answers 200 when every dependency answers, 503 otherwise.
	PathReadyz = "/readyz"
	// PathMetrics serves the Prometheus metrics, on the operational
	// listener only (OpsHandler), never on the API's port.
	PathMetrics = "/metrics"
)

// ReadyCheckTimeout bounds each readiness check.
const ReadyCheckTimeout = 3 * time.Second

// ReadyCheck is one dependency GET /readyz checks, e.g. "store" (a database
// ping) or "temporal" (the frontend's health check).
type ReadyCheck struct {
	// Name identifies the dependency in the answer ("store", "temporal").
	Name string
	// Check returns nil when the dependency answers.
	Check func(ctx context.Context) error
}

// HealthBody is the JSON answer of /healthz and /readyz.
type HealthBody struct {
	// Status is "ok" or, for /readyz, "unavailable".
	Status string `json:"status"`
	// Checks maps each readiness check to "ok" or "failed" (/readyz only).
	Checks map[string]string `json:"checks,omitempty"`
	// Failed lists the checks that failed (/readyz only).
	Failed []string `json:"failed,omitempty"`
}

// HealthHandler answers liveness: 200 {"status":"ok"} while the process
// serves HTTP at all.
func HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeHealth(w, http.StatusOK, HealthBody{Status: "ok"})
	})
}

// ReadyHandler answers readiness: it runs every check concurrently (each
// bounded by ReadyCheckTimeout) and answers 200 when all pass, else 503
// naming the failed ones. The errors themselves are logged, not returned:
// the route is unauthenticated and an error may name internal hosts.
func ReadyHandler(checks []ReadyCheck, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := RunReadyChecks(r.Context(), checks, log)
		status := http.StatusOK
		if body.Status != "ok" {
			status = http.StatusServiceUnavailable
		}
		writeHealth(w, status, body)
	})
}

// RunReadyChecks runs checks concurrently and reports each one's result;
// Status is "ok" when all passed, "unavailable" otherwise.
func RunReadyChecks(ctx context.Context, checks []ReadyCheck, log *slog.Logger) HealthBody {
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, ReadyCheckTimeout)
			defer cancel()
			errs[i] = c.Check(cctx)
		}()
	}
	wg.Wait()
	body := HealthBody{Status: "ok", Checks: map[string]string{}}
	for i, c := range checks {
		if errs[i] != nil {
			body.Status = "unavailable"
			body.Checks[c.Name] = "failed"
			body.Failed = append(body.Failed, c.Name)
			if log != nil {
				log.WarnContext(ctx, "readiness check failed", "check", c.Name, "err", errs[i])
			}
			continue
		}
		body.Checks[c.Name] = "ok"
	}
	return body
}

func writeHealth(w http.ResponseWriter, status int, body HealthBody) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// withOps answers /healthz and /readyz in front of the Gin engine: outside
// /api, so no rate limit and no credential, and outside the router, so they
// are not resources of SPEC.md (the route table and the tenant-isolation
// tests do not see them) and probes do not fill the access log. Every other
// request goes to next unchanged. /metrics is not served here: it tells
// anyone checkout outcomes and volumes, so it lives on the operational
// listener (OpsHandler) that the process binds apart from the public port.
func (s *Server) withOps(next http.Handler) http.Handler {
	ops := map[string]http.Handler{
		PathHealthz: HealthHandler(),
		PathReadyz:  ReadyHandler(s.readyChecks(), s.Logger),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			if h, ok := ops[r.URL.Path]; ok {
				h.ServeHTTP(w, r)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) readyChecks() []ReadyCheck {
	if s.Ready == nil && s.Store != nil {
		return []ReadyCheck{{Name: "store", Check: s.Store.Ping}}
	}
	return s.Ready
}

// OpsHandler serves the operational routes of a process on a listener of its
// own, never the public API port: GET /metrics (metrics, when not nil),
// /healthz and /readyz (checks).
func OpsHandler(metrics http.Handler, checks []ReadyCheck, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle("GET "+PathMetrics, metrics)
	}
	mux.Handle("GET "+PathHealthz, HealthHandler())
	mux.Handle("GET "+PathReadyz, ReadyHandler(checks, log))
	return mux
}
