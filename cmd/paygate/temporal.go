package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/metrics"
	"github.com/paygate/paygate/temporaldev"
	"github.com/paygate/paygate/webhook"
	pworker "github.com/paygate/paygate/worker"
)

// dialTemporal connects to the configured Temporal frontend (with TLS when
// any TLS setting is given).
func (a *app) dialTemporal(ctx context.Context) (client.Client, error) {
	t := a.cfg.Temporal
	opts := client.Options{HostPort: t.Address, Namespace: t.Namespace, Logger: sdklog.NewStructuredLogger(a.log)}
	if a.metrics != nil {
		// The SDK's client and worker metrics, and the business outcomes the
		// workers record, land in the process's registry.
		opts.MetricsHandler = metrics.NewTemporalHandler(a.metrics.Registry)
		opts.Interceptors = []interceptor.ClientInterceptor{metrics.NewOutcomeInterceptor(a.metrics)}
	}
	if t.TLSEnabled() {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
		if t.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(t.TLSCert, t.TLSKey)
			if err != nil {
				return nil, fmt.Errorf("TEMPORAL_TLS_CERT: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		if t.TLSCA != "" {
			pem, err := os.ReadFile(t.TLSCA)
			if err != nil {
				return nil, fmt.Errorf("TEMPORAL_TLS_CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, errors.New("TEMPORAL_TLS_CA: no certificate found")
			}
			tc.RootCAs = pool
		}
		opts.ConnectionOptions.TLS = tc
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.DialContext(dctx, opts)
	if err != nil {
		return nil, fmt.Errorf("TEMPORAL_ADDRESS %s: %w", t.Address, err)
	}
	return c, nil
}

// checkoutService builds the checkout service on a Temporal client.
func (a *app) checkoutService(c client.Client) (*checkout.Service, error) {
	rates, err := checkout.ParseRates(os.Getenv("TAX_RATES"))
	if err != nil {
		return nil, err
	}
	window := time.Hour
	if v := os.Getenv("TX_NOT_FOUND_WINDOW"); v != "" {
		if window, err = time.ParseDuration(v); err != nil || window <= 0 {
			return nil, fmt.Errorf("TX_NOT_FOUND_WINDOW: must be a positive duration, got %q", v)
		}
	}
	return &checkout.Service{Store: a.store, Temporal: c, Hasher: a.hasher(), Networks: a.networks, Tax: rates,
		TaskQueue: a.cfg.Temporal.TaskQueueCheckout, Lifetime: a.cfg.CheckoutLifetime, NotFoundWindow: window, Log: a.log}, nil
}

// runWorkers runs the checkout and webhook workers and the session repairer
// until ctx ends. Search attributes are registered first (idempotent).
func (a *app) runWorkers(ctx context.Context, c client.Client) error {
	if err := temporaldev.RegisterSearchAttributes(ctx, c, a.cfg.Temporal.Namespace, temporaldev.PaygateSearchAttributes()); err != nil {
		return fmt.Errorf("register search attributes: %w", err)
	}
	verifier := chain.NewMultiVerifier(a.networks)
	defer verifier.Close()
	sender := webhook.NewSender(webhook.Policy{AllowLoopbackHTTP: a.cfg.Embedded()})
	ws, err := pworker.New(c, pworker.Config{CheckoutQueue: a.cfg.Temporal.TaskQueueCheckout, WebhookQueue: a.cfg.Temporal.TaskQueueWebhooks,
		Store: a.store, Verifier: verifier, Sender: sender})
	if err != nil {
		return err
	}
	if err := pworker.Start(ws); err != nil {
		return err
	}
	a.log.Info("workers polling", "checkoutQueue", a.cfg.Temporal.TaskQueueCheckout, "webhookQueue", a.cfg.Temporal.TaskQueueWebhooks)
	svc, err := a.checkoutService(c)
	if err != nil {
		pworker.Stop(ws)
		return err
	}
	go svc.RunRepairer(ctx, 15*time.Second, 10*time.Second)
	<-ctx.Done()
	a.log.Info("workers stopping; running activities are left to Temporal's retries")
	pworker.Stop(ws)
	return nil
}

func runWorker(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "healthcheck" {
		return runHealthcheck(ctx, os.Getenv(WorkerMetricsAddrEnv), WorkerMetricsAddrEnv)
	}
	a, err := newMigratedApp()
	if err != nil {
		return err
	}
	defer a.close()
	c, err := a.dialTemporal(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := a.serveOps(ctx, c); err != nil {
		return err
	}
	return a.runWorkers(ctx, c)
}
