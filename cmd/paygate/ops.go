package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/paygate/paygate/api"
)

// WorkerMetricsAddrEnv names the variable of the worker's operational
// listener (/metrics, /healthz, /readyz); empty means no listener.
const WorkerMetricsAddrEnv = "WORKER_METRICS_ADDR"

// readyChecks are the dependencies a process needs to do its work: the
// store and, when c is set, the Temporal frontend.
func (a *app) readyChecks(c client.Client) []api.ReadyCheck {
	checks := []api.ReadyCheck{{Name: "store", Check: a.store.Ping}}
	if c != nil {
		checks = append(checks, api.ReadyCheck{Name: "temporal", Check: func(ctx context.Context) error {
			return namespaceReady(ctx, c, a.cfg.Temporal.Namespace)
		}})
	}
	return checks
}

// serveOps runs the worker's operational listener on WORKER_METRICS_ADDR
// until ctx ends; with the variable unset it does nothing.
func (a *app) serveOps(ctx context.Context, c client.Client) error {
	return a.serveOpsOn(ctx, c, strings.TrimSpace(os.Getenv(WorkerMetricsAddrEnv)), WorkerMetricsAddrEnv)
}

// serveOpsOn serves /metrics, /healthz and /readyz (api.OpsHandler) on addr
// until ctx ends: a listener of its own, never the public API port. An empty
// addr serves nothing. envName names the variable in errors.
func (a *app) serveOpsOn(ctx context.Context, c client.Client, addr, envName string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%s: must be host:port, got %q", envName, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", envName, err)
	}
	srv := &http.Server{Handler: api.OpsHandler(a.metrics.Handler(), a.readyChecks(c), a.log), ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	a.log.Info("metrics listening", "addr", "http://"+ln.Addr().String(), "variable", envName, "paths", []string{api.PathMetrics, api.PathHealthz, api.PathReadyz})
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("metrics listener failed", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return nil
}

// runHealthcheck probes a running process's /readyz on addr (the container
// health check: distroless images have no curl). It exits non-zero unless
// the answer is 200.
func runHealthcheck(ctx context.Context, addr, envName string) error {
	if addr == "" {
		return fmt.Errorf("%s is not set: nothing to probe", envName)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: must be host:port, got %q", envName, addr)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+api.PathReadyz, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %d: %s", req.URL, res.StatusCode, strings.TrimSpace(string(body)))
	}
	slog.Debug("healthy", "url", req.URL.String())
	return nil
}

// envOr returns the trimmed variable name, or def when it is empty.
func envOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}
