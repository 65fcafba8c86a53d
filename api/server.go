// Package api is the HTTP interface of SPEC.md on Gin: the router and its
// middleware, one file per resource, the response envelope and the single
// error mapper. Handlers bind and validate, call the store or a workflow,
// and map results to response structs; GORM models never reach JSON.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/logging"
	"github.com/paygate/paygate/metrics"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/notify"
	"github.com/paygate/paygate/refund"
	"github.com/paygate/paygate/subscription"
	"github.com/paygate/paygate/webhook"
)

// Auth says which credential a route takes.
type Auth string

// The credential kinds of SPEC.md's endpoint tags.
const (
	AuthNone    Auth = "NONE"
	AuthKey     Auth = "KEY"
	AuthSession Auth = "SESSION"
)

// RouteInfo describes one route of the table (method, path, credential).
type RouteInfo struct {
	Method string
	Path   string
	Auth   Auth
	// Idempotent: the route keeps its answers under an Idempotency-Key.
	Idempotent bool
}

// AuthFailureRecorder counts failed authentications per client IP (the rate
// limiter's brute-force tier).
type AuthFailureRecorder interface {
	RecordAuthFailure(ctx context.Context, ip string) error
}

// AccountLimiter limits failed sign-ins per account as well as per address
// (*ratelimit.Limiter implements it).
type AccountLimiter interface {
	// AllowAccount answers and aborts the request (401) when the account
	// has too many recent failures; it returns false then.
	AllowAccount(c *gin.Context, account string) bool
	// RecordLoginFailure counts a failed sign-in against the client address
	// and the account.
	RecordLoginFailure(ctx context.Context, ip, account string) error
	// AccountTurn waits for the account's sign-in turn across the API
	// replicas and returns its release; an error (other than the
	// context's) when it does not come in time.
	AccountTurn(ctx context.Context, ip, account string) (func(), error)
}

// Deps is what the API needs from the rest of the service.
type Deps struct {
	Store    *models.Store
	Hasher   *auth.Hasher
	Networks *chain.Registry
	// SessionTTL is the lifetime of a dashboard session (12 h).
	SessionTTL time.Duration
	// Limiter, when set, is mounted in front of every /api route.
	Limiter gin.HandlerFunc
	// AuthFailures, when set, is told about every failed authentication.
	AuthFailures AuthFailureRecorder
	// Accounts, when set, limits failed sign-ins per account; a wrong
	// password is then recorded through it (address and account) instead
	// of AuthFailures.
	Accounts AccountLimiter
	// TrustedProxies are the proxies whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// Logger receives request logs; nil uses slog.Default.
	Logger *slog.Logger
	// UploadDir, when set, stores uploaded images (logos) and serves them.
	UploadDir string
	// Checkout, when set, serves the customer-facing checkout routes.
	Checkout *checkout.Service
	// Refunds serves the refund routes. Nil means a service on Store
	// without a Temporal client: refunds are stored and the worker's
	// repairer starts their workflows; submits answer 500.
	Refunds *refund.Service
	// Subscriptions, when set, creates subscriptions and runs their actions
	// through their workflows (without it those routes answer 500).
	Subscriptions *subscription.Service
	// OnLinkDeleted, when set, fails the open checkout sessions of a
	// deleted link (the checkout feature provides it).
	OnLinkDeleted LinkDeleteHook
	// WebhookPolicy checks webhook endpoint URLs at registration; its
	// AllowLoopbackHTTP follows WEBHOOK_ALLOW_LOOPBACK (a single-machine
	// embedded setup; never production) and applies to test-mode endpoints
	// only: live endpoints always need https to a public address, here and
	// at dial time.
	WebhookPolicy webhook.Policy
	// Deliveries, when set, makes manual webhook delivery retries through
	// Temporal (worker.Retrier); without it the retry route answers 500.
	Deliveries DeliveryRetrier
	// DialContractWallet connects to an EVM network to ask a contract
	// wallet about its proof (EIP-1271); nil dials the network's RPC URL.
	DialContractWallet func(ctx context.Context, n chain.Network) (chain.ContractWalletClient, error)
	// Dispatcher, when set, starts the delivery workflows of events the API
	// emits itself (a resolved payment exception's payment.completed);
	// without it they wait for the delivery reconciler.
	Dispatcher EventDispatcher
	// Extra registers routes of later features on the /api group.
	Extra []func(s *Server, g *gin.RouterGroup)
	// PublicURL is where the hosted pages are reached from outside (e.g.
	// https://pay.example.com); empty: the request's own host.
	PublicURL string
	// Root registers routes outside /api (the hosted pages, web.Pages).
	Root []func(e *gin.Engine)
	// Mailer sends the password-reset and e-mail confirmation links;
	// without one (production without SMTP: a log mailer would write every
	// reset link where log readers can take the account) a reset request
	// answers 503 and no address is confirmed (nor asked to be).
	Mailer notify.Mailer
	// ResetBaseURL is where merchants reach the dashboard (the configured
	// PAYGATE_PUBLIC_URL or its default): the e-mailed links lead to it.
	// Without it no reset e-mail is sent (503): a link built from the
	// request's Host header would let a stranger point a merchant's reset
	// link at their own site.
	ResetBaseURL string
	// PageNotFound, when set, answers a request that matched no route (or
	// not its method) on a path the pages own (web.Pages.NotFound) with a
	// page, and reports whether it did; the API's JSON answers the rest.
	PageNotFound func(c *gin.Context) bool
	// Ready lists what GET /readyz checks (store, Temporal); nil means a
	// ping of Store.
	Ready []ReadyCheck
	// Metrics, when set, records every request. It is not served by the
	// API's handler: the process serves it with OpsHandler on its own
	// listener (PAYGATE_METRICS_ADDR).
	Metrics *metrics.Metrics
	// SessionChanges, when set, lets the status poll answer from memory
	// while its session does not change (pollcache.go); the caller runs
	// the feed (SessionChanges.Run). Without it every poll reads the store.
	SessionChanges *models.SessionChanges
	// IdempotencyRenew is how often a request run under an Idempotency-Key
	// renews its claim (zero: models.IdemRenewEvery; tests shorten it).
	IdempotencyRenew time.Duration
}

// Server holds the API's dependencies and its route table.
type Server struct {
	Deps
	engine *gin.Engine
	routes []RouteInfo
	// handler is the engine behind the operational routes (health.go).
	handler http.Handler
	// hub shares session readers among event streams (h_stream.go).
	hub *checkout.StatusHub
	// polls keeps the status poll's answers (nil without SessionChanges).
	polls *pollCache
	// uploadLocks hold each merchant's upload turn (h_upload.go).
	uploadLocks sync.Map
	// passwords bounds sign-up's and sign-in's password hashing
	// (passwords.go).
	passwords *passwordGate
	// mails bounds the e-mails being sent at once (h_password.go).
	mails chan struct{}
	// drain is closed when the server shuts down (Drain): status streams end.
	drain                chan struct{}
	drainInit, drainOnce sync.Once
}

// New builds the router.
func New(d Deps) (*Server, error) {
	if d.SessionTTL == 0 {
		d.SessionTTL = 12 * time.Hour
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Checkout != nil && d.OnLinkDeleted == nil {
		svc := d.Checkout
		d.OnLinkDeleted = func(c *gin.Context, l *models.PaymentLink) error { return svc.LinkDeleted(c.Request.Context(), l) }
	}
	if d.Networks == nil {
		d.Networks = chain.DefaultRegistry()
	}

	if d.Refunds == nil && d.Store != nil {
		d.Refunds = &refund.Service{Store: d.Store, Networks: d.Networks, Log: d.Logger}
	}
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	// A trailing slash names no API route: NoRoute answers it with a 404 in
	// the envelope. Gin's default redirect (301, or 307 for a POST, which
	// clients follow with the body) answered outside the middleware, so
	// without a request id, and made "/api/payment-links/" create a link.
	// The pages keep their redirect (web's NotFound).
	e.RedirectTrailingSlash = false
	proxies := make([]string, 0, len(d.TrustedProxies))
	for _, p := range d.TrustedProxies {
		proxies = append(proxies, p.String())
	}
	if err := e.SetTrustedProxies(proxies); err != nil {
		return nil, fmt.Errorf("api: trusted proxies: %w", err)
	}
	s := &Server{Deps: d, engine: e, passwords: newPasswordGate(), mails: make(chan struct{}, mailsAtOnce)}
	if d.SessionChanges != nil {
		s.polls = newPollCache(d.SessionChanges)
	}
	e.Use(s.requestID, s.observe, s.recovery, s.accessLog)
	s.handler = s.withOps(e)
	// An unmatched /api path is limited as the routes are: without it a
	// stranger probing paths, or one blocked for failed sign-ins, went
	// unlimited there.
	apiLimit := func(c *gin.Context) {
		if d.Limiter != nil && strings.HasPrefix(c.Request.URL.Path, "/api/") {
			d.Limiter(c)
			return
		}
		c.Next()
	}
	e.NoRoute(apiLimit, func(c *gin.Context) {
		if d.PageNotFound != nil && d.PageNotFound(c) {
			return
		}
		fail(c, apperr.New(apperr.ErrNotFound, "not found: no route "+c.Request.Method+" "+c.Request.URL.Path))
	})
	e.NoMethod(apiLimit, func(c *gin.Context) {
		if d.PageNotFound != nil && d.PageNotFound(c) {
			return
		}
		c.AbortWithStatusJSON(http.StatusMethodNotAllowed, errorBody{Status: "error", Code: CodeMethodNotAllowed,
			Message: "method " + c.Request.Method + " is not allowed on " + c.Request.URL.Path,
			Hint:    "the methods this path takes are in the Allow header"})
	})
	g := e.Group("/api")
	if d.Limiter != nil {
		g.Use(d.Limiter)
	}
	s.registerAuth(g)
	s.registerMerchant(g)
	s.registerKeys(g)
	s.registerKYB(g)
	s.registerLinks(g)
	s.registerCustomers(g)
	s.registerTransactions(g)
	s.registerPayments(g)
	s.registerSubscriptions(g)
	s.registerSettlements(g)
	s.registerCheckout(g)
	s.registerOpenAPI(g)
	s.registerUploads(g)
	s.registerWebhooks(g)
	s.registerExceptions(g)
	s.registerCatalog(g)
	s.registerRefunds(g)
	s.registerWalletProofs(g)
	for _, f := range d.Extra {
		f(s, g)
	}
	for _, f := range d.Root {
		f(e)
	}
	return s, nil
}

// Handler is the http.Handler to serve.
func (s *Server) Handler() http.Handler { return s.handler }

// Engine exposes the Gin engine (its own route table is read by tests).
func (s *Server) Engine() *gin.Engine { return s.engine }

// Routes returns the route table with each route's credential.
func (s *Server) Routes() []RouteInfo { return append([]RouteInfo(nil), s.routes...) }

// Handle adds a route to the group and the table, behind the credential
// check its Auth kind requires.
func (s *Server) Handle(g *gin.RouterGroup, method, path string, a Auth, h gin.HandlerFunc) {
	full := strings.TrimSuffix(g.BasePath(), "/") + path
	s.routes = append(s.routes, RouteInfo{Method: method, Path: full, Auth: a,
		Idempotent: method == http.MethodPost && (a == AuthKey || (a == AuthSession && !ownSessionRoutes[full]))})
	switch {
	case a == AuthKey && method == http.MethodPost:
		g.Handle(method, path, s.requireKey, s.idempotent, h)
	case a == AuthSession && method == http.MethodPost && ownSessionRoutes[full]:
		// These act on or from the caller's own session: a stored answer
		// (an Idempotency-Key is the merchant's, not the session's) would
		// tell another session "signed out" and leave it signed in, or
		// "password changed" without its current password checked.
		g.Handle(method, path, s.requireSession, h)
	case a == AuthSession && method == http.MethodPost:
		g.Handle(method, path, s.requireSession, s.idempotent, h)
	case a == AuthKey:
		g.Handle(method, path, s.requireKey, h)
	case a == AuthSession:
		g.Handle(method, path, s.requireSession, h)
	default:
		g.Handle(method, path, h)
	}
}

// ownSessionRoutes are the session routes not kept under an
// Idempotency-Key (Handle).
var ownSessionRoutes = map[string]bool{"/api/auth/logout": true, "/api/auth/logout-others": true, "/api/auth/password": true,
	// The address is confirmed by the session and the link together: a
	// stored answer would tell another session what it did not prove.
	"/api/auth/email-confirmation": true, "/api/auth/email-confirmation/confirm": true,
	// Checks the current password (as /api/auth/password).
	"/api/auth/email-change": true}

const requestIDKey = "requestId"

// requestID gives every request an id (or keeps a sane one from the
// caller), echoed in X-Request-Id and attached to every log line.
func (s *Server) requestID(c *gin.Context) {
	id := c.GetHeader("X-Request-Id")
	if id == "" || len(id) > 64 || strings.ContainsAny(id, " \t\r\n\"") {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		id = "req_" + hex.EncodeToString(b)
	}
	c.Set(requestIDKey, id)
	c.Request = c.Request.WithContext(logging.WithRequestID(c.Request.Context(), id))
	c.Header("X-Request-Id", id)
	c.Next()
}

func requestID(c *gin.Context) string { return c.GetString(requestIDKey) }

func (s *Server) recovery(c *gin.Context) {
	defer func() {
		if r := recover(); r != nil {
			s.Logger.Error("panic serving request", "requestId", requestID(c), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			fail(c, fmt.Errorf("panic: %v", r))
		}
	}()
	c.Next()
}

func (s *Server) accessLog(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "(no route)"
	}
	s.Logger.Info("request", "requestId", requestID(c), "method", c.Request.Method, "route", route,
		"status", c.Writer.Status(), "durationMs", time.Since(start).Milliseconds(), "clientIp", c.ClientIP())
}
