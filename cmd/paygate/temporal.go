package main

import (
	"crypto/ecdsa"
	"go.temporal.io/api/workflowservice/v1"
	"math/big"
	"strconv"
	"strings"

	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/ethereum/go-ethereum/crypto"
	"os"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/metrics"
	"github.com/paygate/paygate/refund"
	"github.com/paygate/paygate/subscription"
	"github.com/paygate/paygate/temporaldev"
	"github.com/paygate/paygate/webhook"
	pworker "github.com/paygate/paygate/worker"
	"github.com/paygate/paygate/workflows"
)

// dialTemporal connects to the configured Temporal frontend (with TLS when
// any TLS setting is given).
func (a *app) dialTemporal(ctx context.Context) (client.Client, error) {
	t := a.cfg.Temporal
	opts := client.Options{HostPort: t.Address, Namespace: t.Namespace, Logger: sdklog.NewStructuredLogger(a.log)}
	if !t.Gzip() {
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	}
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
	// The dial does not look at the namespace: a wrong one would leave the
	// API answering 201 to sessions whose workflows never start.
	if err := namespaceReady(dctx, c, t.Namespace); err != nil {
		c.Close()
		return nil, fmt.Errorf("TEMPORAL_NAMESPACE %q: %w", t.Namespace, err)
	}
	return c, nil
}

// namespaceReady asks the frontend for the namespace: it fails when the
// frontend is unreachable or the namespace does not exist.
func namespaceReady(ctx context.Context, c client.Client, namespace string) error {
	_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	return err
}

// checkoutService builds the checkout service on a Temporal client.
func (a *app) checkoutService(c client.Client) (*checkout.Service, error) {
	rates, err := checkout.ParseRates(os.Getenv("TAX_RATES"))
	if err != nil {
		return nil, err
	}
	window, err := notFoundWindow()
	if err != nil {
		return nil, err
	}
	keys, err := relayerKeys(a.networks, os.Getenv)
	if err != nil {
		return nil, err
	}
	for name, k := range a.devRelayers {
		if _, set := keys[name]; !set {
			keys[name] = k
		}
	}
	relayer := chain.NewRelayer(a.networks, keys)
	relayer.Ledger = checkout.RelayLedger{Store: a.store}
	if relayer.MaxFeeCap, err = maxRelayFee(os.Getenv("RELAYER_MAX_FEE_GWEI")); err != nil {
		return nil, err
	}
	svc := &checkout.Service{Store: a.store, Temporal: c, Hasher: a.hasher(), Networks: a.networks, Tax: rates,
		TaskQueue: a.cfg.Temporal.TaskQueueCheckout, Lifetime: a.cfg.CheckoutLifetime, NotFoundWindow: window, Log: a.log,
		UpdateTimeout: a.cfg.UpdateTimeout,
		Relayer:       relayer}
	// New sessions' "workflow started" marks are written behind their
	// requests: the last ones go to the store before it closes.
	a.closers = append(a.closers, func() error { svc.FlushMarks(context.Background()); return nil })
	return svc, nil
}

// notFoundWindow reads TX_NOT_FOUND_WINDOW: how long a submitted hash may
// stay unseen on chain (checkouts and refunds), default 1 hour.
func notFoundWindow() (time.Duration, error) {
	v := os.Getenv("TX_NOT_FOUND_WINDOW")
	if v == "" {
		return time.Hour, nil
	}
	w, err := time.ParseDuration(v)
	if err != nil || w <= 0 {
		return 0, fmt.Errorf("TX_NOT_FOUND_WINDOW: must be a positive duration, got %q", v)
	}
	return w, nil
}

// refundService builds the refund service on a Temporal client: refunds
// run on the checkout queue, with the configured window (REFUND_WINDOW).
func (a *app) refundService(c client.Client) (*refund.Service, error) {
	window, err := notFoundWindow()
	if err != nil {
		return nil, err
	}
	return &refund.Service{Store: a.store, Temporal: c, Networks: a.networks, TaskQueue: a.cfg.Temporal.TaskQueueCheckout,
		Window: a.cfg.RefundWindow, NotFoundWindow: window, Log: a.log}, nil
}

// subscriptionService builds the subscription service on a Temporal client
// (subscriptions run on the checkout task queue).
func (a *app) subscriptionService(c client.Client) *subscription.Service {
	sc := a.cfg.Subscriptions
	return &subscription.Service{Store: a.store, Temporal: c, Networks: a.networks, TaskQueue: a.cfg.Temporal.TaskQueueCheckout,
		Policy: workflows.SubscriptionPolicy{GracePeriod: sc.GracePeriod, Reminders: sc.Reminders, DunningPeriod: sc.DunningPeriod,
			InFlightRecheck: time.Minute}, Log: a.log}
}

// relayerKeys reads RELAYER_KEY_<NETWORK> (a hex private key of a wallet
// holding gas on that EVM network) for every network that sets it.
func relayerKeys(reg *chain.Registry, getenv func(string) string) (map[string]*ecdsa.PrivateKey, error) {
	keys := map[string]*ecdsa.PrivateKey{}
	for _, mode := range []chain.Mode{chain.ModeTest, chain.ModeLive} {
		for _, name := range reg.Names(mode) {
			v := getenv("RELAYER_KEY_" + strings.ToUpper(name))
			if v == "" {
				continue
			}
			if fam, _ := chain.FamilyOf(name); fam != chain.FamilyEVM {
				return nil, fmt.Errorf("RELAYER_KEY_%s: only EVM networks have a relayer", strings.ToUpper(name))
			}
			k, err := crypto.HexToECDSA(strings.TrimPrefix(v, "0x"))
			if err != nil {
				return nil, fmt.Errorf("RELAYER_KEY_%s: must be a hex private key", strings.ToUpper(name))
			}
			keys[name] = k
		}
	}
	return keys, nil
}

// maxRelayFee reads RELAYER_MAX_FEE_GWEI: the most a relayed transaction's
// fee cap may reach when it is sent again, in gwei per gas (none: no
// bound).
func maxRelayFee(v string) (*big.Int, error) {
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("RELAYER_MAX_FEE_GWEI: must be a positive whole number of gwei, got %q", v)
	}
	return new(big.Int).Mul(new(big.Int).SetUint64(n), big.NewInt(1_000_000_000)), nil
}

// runWorkers runs the checkout and webhook workers and the session repairer
// until ctx ends. Search attributes are registered first (idempotent).
func (a *app) runWorkers(ctx context.Context, c client.Client) error {
	if err := temporaldev.RegisterSearchAttributes(ctx, c, a.cfg.Temporal.Namespace, temporaldev.PaygateSearchAttributes()); err != nil {
		return fmt.Errorf("register search attributes: %w", err)
	}
	verifier := chain.NewMultiVerifier(a.networks)
	defer verifier.Close()
	svc, err := a.checkoutService(c)
	if err != nil {
		return err
	}
	svc.Finder, svc.Verifier = verifier, verifier
	// Test-mode endpoints may use loopback only where configured; live ones
	// are always held to the strict policy at dial time.
	sender := webhook.NewSender(webhook.Policy{AllowLoopbackHTTP: a.cfg.WebhookAllowLoopback})
	ws, err := pworker.New(c, pworker.Config{CheckoutQueue: a.cfg.Temporal.TaskQueueCheckout, WebhookQueue: a.cfg.Temporal.TaskQueueWebhooks,
		Store: a.store, Verifier: verifier, Sender: sender, Sessions: svc, PublicBaseURL: a.cfg.PublicBaseURL,
		StickyTimeout: a.cfg.Temporal.StickyTimeout, StickyCache: a.cfg.Temporal.StickyCache, StopTimeout: a.cfg.Temporal.StopTimeout})
	if err != nil {
		return err
	}
	if err := pworker.Start(ws); err != nil {
		return err
	}
	a.log.Info("workers polling", "checkoutQueue", a.cfg.Temporal.TaskQueueCheckout, "webhookQueue", a.cfg.Temporal.TaskQueueWebhooks)
	go svc.RunRepairer(ctx, 15*time.Second, 10*time.Second)
	refunds, err := a.refundService(c)
	if err != nil {
		pworker.Stop(ws)
		return err
	}
	// Pending webhook deliveries without a running workflow: started,
	// resumed or settled.
	rec := &pworker.DeliveryReconciler{Client: c, Queue: a.cfg.Temporal.TaskQueueWebhooks, Store: a.store, Log: a.log}
	go rec.Run(ctx, 30*time.Second)
	// Refunds whose workflow did not start (a crash after the write).
	go refunds.RunRepairer(ctx, 15*time.Second, 10*time.Second)
	// Refunds paid on chain without their hash submitted.
	refunds.Chain = verifier
	go refunds.RunWatcher(ctx, watchInterval(a.networks))
	go a.subscriptionService(c).RunRepairer(ctx, 15*time.Second, 10*time.Second)
	// Payments found by their session's reference, late payments, and
	// recorded transactions checked on chain.
	go svc.RunWatcher(ctx, watchInterval(a.networks), pworker.Dispatcher{Client: c, Queue: a.cfg.Temporal.TaskQueueWebhooks})
	// Relayed transactions left unmined are sent again at higher fees.
	go svc.Relayer.RunTender(ctx, 5*time.Second, a.log.Warn)
	<-ctx.Done()
	a.log.Info("workers stopping; running activities are left to Temporal's retries")
	pworker.Stop(ws)
	return nil
}

func runWorker(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "healthcheck" {
		return runHealthcheck(ctx, os.Getenv(WorkerMetricsAddrEnv), WorkerMetricsAddrEnv)
	}
	if err := noArgs("worker", args); err != nil {
		return err
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

// watchInterval is the shortest poll interval of the configured networks,
// at least one second.
func watchInterval(reg *chain.Registry) time.Duration {
	d := 15 * time.Second
	for _, mode := range []chain.Mode{chain.ModeTest, chain.ModeLive} {
		for _, name := range reg.Names(mode) {
			if n, ok := reg.Lookup(name); ok && n.PollInterval > 0 && n.PollInterval < d {
				d = n.PollInterval
			}
		}
	}
	return max(d, time.Second)
}
