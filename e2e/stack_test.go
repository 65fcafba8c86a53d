// Package e2e runs the service's parts together as they run in production:
// a real Temporal dev server (the CLI built from tools/), the API over HTTP,
// the workers and the store.
package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/web"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/config"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/refund"
	"github.com/paygate/paygate/subscription"
	"github.com/paygate/paygate/temporaldev"
	"github.com/paygate/paygate/webhook"
	pworker "github.com/paygate/paygate/worker"
	"github.com/paygate/paygate/workflows"
)

const merchantWallet = "0x52908400098527886E0F7030069857D2E4169EE7"

// scriptedVerifier answers each hash from a script: a list of results given
// in turn, the last one repeated.
type scriptedVerifier struct {
	mu      sync.Mutex
	scripts map[string][]chain.VerifyResult
}

func (v *scriptedVerifier) set(hash string, results ...chain.VerifyResult) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.scripts == nil {
		v.scripts = map[string][]chain.VerifyResult{}
	}
	v.scripts[hash] = results
}

func (v *scriptedVerifier) Verify(_ context.Context, req chain.VerifyRequest) (chain.VerifyResult, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := v.scripts[req.TxHash]
	if len(s) == 0 {
		return chain.VerifyResult{Verdict: chain.VerdictPending}, nil
	}
	r := s[0]
	if len(s) > 1 {
		v.scripts[req.TxHash] = s[1:]
	}
	return r, nil
}

type stack struct {
	t        *testing.T
	temporal client.Client
	// server is the stack's Temporal dev server.
	server   *temporaldev.Server
	store    *models.Store
	checkout *checkout.Service
	refunds  *refund.Service
	// subscriptions runs subscriptions on the checkout queue.
	subscriptions *subscription.Service
	http          *httptest.Server
	networks      *chain.Registry
	// The workers and their queues, so a test can stop and replace them.
	workers       []sdkworker.Worker
	checkoutQueue string
	webhookQueue  string
	verifier      chain.Verifier
	sender        *webhook.Sender
	// wallet is the customer wallet new sessions declare (the payer).
	wallet string
}

type stackOptions struct {
	verifier chain.Verifier
	lifetime time.Duration
	networks *chain.Registry
	// sender delivers webhooks; nil means the embedded policy's default.
	sender *webhook.Sender
	// relayer broadcasts signed authorizations (nil: none).
	relayer *chain.Relayer
	// watch runs the reference watcher (payments found without a submit,
	// late and unmatched payments, record verification) with the verifier
	// as finder, every watchEvery.
	watch      bool
	watchEvery time.Duration
	// watchRefunds runs the refund watcher (refunds paid without their
	// hash submitted) with the verifier as its chain, every watchEvery.
	watchRefunds bool
	// pages mounts the hosted checkout pages (web.Pages).
	pages bool
	// subscriptionPeriod, when set, makes every billing period of the
	// stack's subscriptions last this long (seconds instead of months).
	subscriptionPeriod time.Duration
	// dialect is the store's database: "sqlite" (the default) or "postgres".
	dialect string
	// stickyTimeout is the workers' sticky timeout (0: their default).
	stickyTimeout time.Duration
	// stickyCache turns sticky execution on with that many workflows
	// cached (0: off, the default). It is the SDK's setting for the whole
	// process: no stack of another setting may run at the same time.
	stickyCache int
	// noPollCache makes every status poll read the store (the bench's
	// reference); by default the poll answers from memory, as deployed.
	noPollCache bool
	// refundNotFound is the refunds' not-found window (0: an hour).
	refundNotFound time.Duration
	// refundWindow is how long a refund waits for its transfer (0: a day).
	refundWindow time.Duration
}

func startStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	ts := temporaldev.StartForTest(t)
	copts := client.Options{HostPort: ts.Address(), Namespace: ts.Namespace(), Logger: quietLogger{}}
	// As paygate dials it (TEMPORAL_GRPC_COMPRESSION's default).
	if !(config.TemporalConfig{Address: ts.Address(), Compression: config.CompressionAuto}).Gzip() {
		copts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	}
	c, err := client.Dial(copts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if o.dialect == "" {
		o.dialect = "sqlite"
	}
	st := storetest.Open(t, o.dialect)
	if o.networks == nil {
		o.networks = chain.DefaultRegistry()
		for _, name := range []string{"base_sepolia", "eth_sepolia"} {
			n, _ := o.networks.Lookup(name)
			n.PollInterval = 100 * time.Millisecond
			o.networks.Set(n)
		}
	}
	queue := "checkout-" + models.NewID()
	webhookQueue := "webhooks-" + models.NewID()
	if o.sender == nil {
		o.sender = webhook.NewSender(webhook.Policy{AllowLoopbackHTTP: true})
	}
	hasher := auth.NewHasher("e2e-secret-e2e-secret-e2e-secret-e2e")
	if o.lifetime == 0 {
		o.lifetime = 30 * time.Minute
	}
	svc := &checkout.Service{Store: st, Temporal: c, Hasher: hasher, Networks: o.networks, Tax: checkout.DefaultRates(),
		TaskQueue: queue, Lifetime: o.lifetime, NotFoundWindow: time.Hour, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Relayer: o.relayer}
	ws, err := pworker.New(c, pworker.Config{CheckoutQueue: queue, WebhookQueue: webhookQueue, Store: st,
		Verifier: o.verifier, Sender: o.sender, Sessions: svc, PublicBaseURL: "http://paygate.test", StickyTimeout: o.stickyTimeout,
		StickyCache: o.stickyCache})
	if err != nil {
		t.Fatal(err)
	}
	if err := pworker.Start(ws); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pworker.Stop(ws) })
	policy := workflows.DefaultSubscriptionPolicy()
	policy.FixedPeriod = o.subscriptionPeriod
	if o.subscriptionPeriod > 0 {
		// Periods of seconds: a held subscription tries again as often.
		policy.BlockedRecheck = o.subscriptionPeriod / 2
	}
	subs := &subscription.Service{Store: st, Temporal: c, Networks: o.networks, TaskQueue: queue, Policy: policy,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Sessions: svc, Dispatch: pworker.Dispatcher{Client: c, Queue: webhookQueue}.Dispatch}
	if mv, ok := o.verifier.(*chain.MultiVerifier); ok && o.watch {
		svc.Finder, svc.Verifier = mv, mv
		every := o.watchEvery
		if every == 0 {
			every = 200 * time.Millisecond
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go svc.RunWatcher(ctx, every, pworker.Dispatcher{Client: c, Queue: webhookQueue})
	}
	if o.refundNotFound == 0 {
		o.refundNotFound = time.Hour
	}
	// A transfer no pending refund took is offered to the expired ones a
	// second after it was read (a day's refunds, not a test's, need the
	// default's minutes).
	refunds := &refund.Service{Store: st, Temporal: c, Networks: o.networks, TaskQueue: queue, Window: cmp.Or(o.refundWindow, 24*time.Hour),
		NotFoundWindow: o.refundNotFound, LateOfferDelay: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mv, ok := o.verifier.(*chain.MultiVerifier); ok && o.watchRefunds {
		refunds.Chain = mv
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go refunds.RunWatcher(ctx, cmp.Or(o.watchEvery, 200*time.Millisecond))
	}
	var root []func(e *gin.Engine)
	var pageNotFound func(*gin.Context) bool
	if o.pages {
		pages, err := web.New(web.Pages{Checkout: svc, Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		root, pageNotFound = append(root, pages.Register), pages.NotFound
	}
	var changes *models.SessionChanges
	if !o.noPollCache {
		changes = st.SessionChanges()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); changes.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	srv, err := api.New(api.Deps{Store: st, Hasher: hasher, Networks: o.networks, Checkout: svc, Refunds: refunds, Subscriptions: subs, Root: root,
		PageNotFound: pageNotFound, SessionChanges: changes,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		WebhookPolicy: webhook.Policy{AllowLoopbackHTTP: true},
		Deliveries:    pworker.Retrier{Client: c, Queue: webhookQueue}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &stack{t: t, temporal: c, server: ts, store: st, checkout: svc, refunds: refunds, subscriptions: subs, http: hs, networks: o.networks,
		workers: ws, checkoutQueue: queue, webhookQueue: webhookQueue, verifier: o.verifier, sender: o.sender,
		wallet: "0x8617E340B3D01FA5F11F306F4090FD50E238070D"}
}

type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

// call sends a JSON request and decodes the envelope's data.
func (s *stack) call(method, path, token string, body any, want int) map[string]any {
	s.t.Helper()
	var rdr io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rdr = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.http.URL+path, rdr)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		s.t.Fatalf("%s %s: %d, want %d: %s", method, path, res.StatusCode, want, raw)
	}
	var env map[string]any
	_ = json.Unmarshal(raw, &env)
	d, _ := env["data"].(map[string]any)
	if d == nil {
		d = env
	}
	return d
}

// merchant signs up, sets a default EVM wallet and returns its test key.
func (s *stack) merchant() (key, session string) {
	d := s.call("POST", "/api/auth/signup", "", map[string]any{"email": strings.ReplaceAll(models.NewID(), "-", "") + "@example.com",
		"password": "correct horse battery", "businessName": "E2E Shop"}, 201)
	key = d["testKey"].(map[string]any)["fullKey"].(string)
	session = d["sessionToken"].(string)
	s.call("PATCH", "/api/merchant", session, map[string]any{"wallets": map[string]any{"evm": merchantWallet}}, 200)
	return key, session
}

// openSession creates a link (if linkID is "") and a session on it, through
// the public quote and session routes, as the checkout page does.
func (s *stack) openSession(key, linkID, amount string) (sessionID, link string) {
	if linkID == "" {
		linkID = s.call("POST", "/api/payment-links", key, map[string]any{"name": "Mug", "amount": amount, "network": "base_sepolia"}, 201)["id"].(string)
	}
	q := s.call("POST", "/api/checkout/quote", "", map[string]any{"linkId": linkID, "network": "base_sepolia",
		"customer": map[string]any{"country": "DE", "address": "Berlin"}}, 200)
	d := s.call("POST", "/api/checkout/session", "", map[string]any{
		"linkId": linkID, "quoteToken": q["quoteToken"], "walletAddress": s.wallet,
		"walletType": "evm", "network": "base_sepolia",
		"customer": map[string]any{"name": "Ann", "email": "ann@example.com", "address": "Berlin", "country": "DE"},
		"totalsSnapshot": map[string]any{"subtotalCents": q["subtotalCents"], "taxCents": q["taxCents"],
			"totalCents": q["totalCents"], "calculationId": q["calculationId"]},
	}, 201)
	if d["status"] != "payment_session_created" {
		s.t.Fatalf("new session %v", d)
	}
	return d["id"].(string), linkID
}

// waitReleased polls the public status route until the session gave back
// the hash it held (a transaction that is not its payment) and waits for
// its payment again; it returns the session.
func (s *stack) waitReleased(id string, within time.Duration) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		sess := s.call("GET", "/api/checkout/session/"+id, "", nil, 200)["session"].(map[string]any)
		msg, _ := sess["failureMessage"].(string)
		if sess["txHash"] == nil && strings.Contains(msg, "does not pay this session") {
			return sess
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("session %s did not give its hash back within %s: %v", id, within, sess)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitStatus polls the public status route until the session reaches want.
func (s *stack) waitStatus(id, want string, within time.Duration) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		d := s.call("GET", "/api/checkout/session/"+id, "", nil, 200)
		sess := d["session"].(map[string]any)
		if sess["status"] == want {
			return d
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("session %s is %v after %s, want %s: %v", id, sess["status"], within, want, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
