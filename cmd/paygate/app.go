package main

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"github.com/gin-gonic/gin"
	"github.com/paygate/paygate/web"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/checkout"
	"github.com/paygate/paygate/config"
	"github.com/paygate/paygate/keyring"
	"github.com/paygate/paygate/logging"
	"github.com/paygate/paygate/metrics"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/notify"
	"github.com/paygate/paygate/ratelimit"
	"github.com/paygate/paygate/refund"
	"github.com/paygate/paygate/subscription"
	"github.com/paygate/paygate/webhook"
	pworker "github.com/paygate/paygate/worker"
)

// app holds what every command shares: configuration, logger, store.
type app struct {
	cfg      config.Config
	log      *slog.Logger
	store    *models.Store
	networks *chain.Registry
	closers  []func() error
	// metrics is the process's Prometheus registry (HTTP, outcomes, Temporal SDK).
	metrics *metrics.Metrics
	// devRelayers are the dev chains' funded relayer keys (embedded
	// profile); RELAYER_KEY_<NETWORK> overrides them.
	devRelayers map[string]*ecdsa.PrivateKey
}

func newApp() (*app, error) {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	// JSON lines with the request id of the context and credentials masked.
	log := logging.NewJSON(os.Stderr, level)
	slog.SetDefault(log)
	if _, err := cfg.EnsureSecret(); err != nil {
		return nil, err
	}
	networks, err := chain.RegistryFromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	pool, err := poolFromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	secrets, err := keyring.New(keyring.PurposeWebhookSecret, cfg.SecretKey, cfg.SecretKeyPrevious...)
	if err != nil {
		return nil, fmt.Errorf("PAYGATE_SECRET_KEY: %w", err)
	}
	st, err := models.Open(models.Options{DatabaseURL: cfg.DatabaseURL, SQLitePath: filepath.Join(cfg.DataDir, "paygate.db"), Logger: log,
		Secrets: secrets, Pool: pool})
	if err != nil {
		return nil, err
	}
	return &app{cfg: cfg, log: log, store: st, networks: networks, metrics: metrics.New()}, nil
}

// newMigratedApp is newApp with the schema moved to the newest version.
func newMigratedApp() (*app, error) {
	a, err := newApp()
	if err != nil {
		return nil, err
	}
	if err := a.store.Migrate(); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// apiWithCheckout builds the API with the checkout and refund services on
// a Temporal client.
func (a *app) apiWithCheckout(c client.Client) (*api.Server, error) {
	svc, err := a.checkoutService(c)
	if err != nil {
		return nil, err
	}
	refunds, err := a.refundService(c)
	if err != nil {
		return nil, err
	}
	return a.apiServer(svc, refunds)
}

func (a *app) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		_ = a.closers[i]()
	}
	_ = a.store.Close()
}

// uploadDir is where uploaded logos live: PAYGATE_UPLOAD_DIR, or uploads/
// under the data directory. Several API replicas must share it (a volume).
func (a *app) uploadDir() string {
	if v := os.Getenv("PAYGATE_UPLOAD_DIR"); v != "" {
		return v
	}
	return filepath.Join(a.cfg.DataDir, "uploads")
}

func (a *app) hasher() *auth.Hasher {
	return auth.NewHasher(a.cfg.SecretKey, a.cfg.SecretKeyPrevious...)
}

// apiServer builds the HTTP API with every feature wired in.
func (a *app) apiServer(svc *checkout.Service, refunds *refund.Service) (*api.Server, error) {
	rl := a.cfg.RateLimit
	store, closeStore, err := ratelimit.OpenStore(rl.RedisURL, ratelimit.DefaultRedisPrefix, ratelimit.WithRedisLogger(a.log))
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	a.closers = append(a.closers, closeStore)
	cfg := ratelimit.DefaultConfig()
	cfg.Enabled, cfg.ExemptLoopback, cfg.IPv6PrefixBits = rl.Enabled, rl.ExemptLoopback, rl.IPv6PrefixBits
	limiter := ratelimit.New(store, cfg, ratelimit.WithLogger(a.log))
	var deliveries api.DeliveryRetrier
	var dispatcher api.EventDispatcher
	var subs *subscription.Service
	if svc != nil && svc.Temporal != nil {
		deliveries = pworker.Retrier{Client: svc.Temporal, Queue: a.cfg.Temporal.TaskQueueWebhooks, Reload: a.store.WebhookDelivery}
		dispatcher = pworker.Dispatcher{Client: svc.Temporal, Queue: a.cfg.Temporal.TaskQueueWebhooks}
		subs = a.subscriptionService(svc.Temporal)
		// A cancel of a subscription whose workflow stopped voids its open
		// invoice and delivers its event here.
		subs.Sessions, subs.Dispatch = svc, dispatcher.Dispatch
	}
	var root []func(e *gin.Engine)
	var pageNotFound func(*gin.Context) bool
	// The reset and confirmation e-mails' sender; with the dashboard's
	// address the server confirms addresses (api.Server.confirmationsOn).
	mailer := a.resetMailer()
	if svc != nil {
		public := os.Getenv("PAYGATE_PUBLIC_URL")
		pages, err := web.New(web.Pages{Checkout: svc, Store: a.store, Log: a.log, FrameAncestors: os.Getenv("CHECKOUT_FRAME_ANCESTORS"),
			PublicURL: public, SecureCookies: strings.HasPrefix(public, "https://"), Limiter: limiter,
			ConfirmsEmail: mailer != nil && a.cfg.PublicBaseURL != ""})
		if err != nil {
			return nil, err
		}
		root, pageNotFound = append(root, pages.Register), pages.NotFound
	}
	var changes *models.SessionChanges
	if pollCacheOn() {
		changes = a.store.SessionChanges()
		changes.SetLogger(a.log)
	}
	return api.New(api.Deps{
		SessionChanges: changes,
		Root:           root,
		PageNotFound:   pageNotFound,
		PublicURL:      os.Getenv("PAYGATE_PUBLIC_URL"),
		Mailer:         mailer,
		ResetBaseURL:   a.cfg.PublicBaseURL,
		WebhookPolicy:  webhook.Policy{AllowLoopbackHTTP: a.cfg.WebhookAllowLoopback},
		Deliveries:     deliveries,
		Dispatcher:     dispatcher,
		Limiter:        limiter.Middleware(),
		AuthFailures:   limiter,
		Accounts:       limiter,
		Store:          a.store,
		Hasher:         a.hasher(),
		Checkout:       svc,
		Refunds:        refunds,
		Subscriptions:  subs,
		UploadDir:      a.uploadDir(),
		Networks:       a.networks,
		SessionTTL:     a.cfg.SessionTTL,
		TrustedProxies: a.cfg.RateLimit.TrustedProxies,
		Logger:         a.log,
		Ready:          a.readyChecks(temporalOf(svc)),
		Metrics:        a.metrics,
	})
}

// resetMailer sends the password-reset e-mails: by SMTP when configured;
// else, outside the production profile, into the log (where the developer
// running `make run` finds the link). In production without SMTP there is
// none: a reset link in the log would let whoever reads the log take the
// account.
func (a *app) resetMailer() notify.Mailer {
	if a.cfg.SMTP.Host == "" && a.cfg.Profile == config.ProfileProduction {
		return nil
	}
	return notify.NewMailer(a.cfg.SMTP, a.log)
}

// pollCacheOn reports whether the status poll may answer from memory
// (PAYGATE_POLL_CACHE, on unless "off"; off: every poll reads the store).
func pollCacheOn() bool { return os.Getenv("PAYGATE_POLL_CACHE") != "off" }

// followSessionChanges runs the store's session change feed until ctx ends
// (the poll cache's invalidations), when the cache is on.
func (a *app) followSessionChanges(ctx context.Context) {
	if pollCacheOn() {
		go a.store.SessionChanges().Run(ctx)
	}
}

// temporalOf is the checkout service's Temporal client, if any.
func temporalOf(svc *checkout.Service) client.Client {
	if svc == nil {
		return nil
	}
	return svc.Temporal
}

// serveHTTP serves h until ctx ends, then lets in-flight requests finish;
// onShutdown (the API's Drain) ends the long-lived ones (status streams)
// as shutdown starts.
func serveHTTP(ctx context.Context, log *slog.Logger, addr string, h http.Handler, onShutdown ...func()) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second}
	for _, f := range onShutdown {
		srv.RegisterOnShutdown(f)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("PAYGATE_ADDR: %w", err)
	}
	log.Info("API listening", "addr", "http://"+ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	log.Info("API shutting down; waiting for in-flight requests")
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func runAPI(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "healthcheck" {
		return runHealthcheck(ctx, envOr("PAYGATE_ADDR", config.Defaults().Addr), "PAYGATE_ADDR")
	}
	if err := noArgs("api", args); err != nil {
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
	srv, err := a.apiWithCheckout(c)
	if err != nil {
		return err
	}
	if err := a.serveOpsOn(ctx, c, a.cfg.MetricsAddr, "PAYGATE_METRICS_ADDR"); err != nil {
		return err
	}
	a.followSessionChanges(ctx)
	return serveHTTP(ctx, a.log, a.cfg.Addr, srv.Handler(), srv.Drain)
}

// noArgs refuses arguments a command does not take (a typo, or -h, must
// not start a server): help prints the usage.
func noArgs(cmd string, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		return usageError("usage of " + cmd)
	}
	return usageError(fmt.Sprintf("%s takes no argument %q (only healthcheck)", cmd, args[0]))
}

func runMigrate(_ context.Context, args []string) error {
	status := len(args) == 1 && args[0] == "status"
	if len(args) > 0 && !status {
		// Only "status" asks; anything else (a typo, -h) must not move the
		// schema.
		return usageError(fmt.Sprintf("migrate takes no argument but status (got %q)", strings.Join(args, " ")))
	}
	a, err := newApp()
	if err != nil {
		return err
	}
	defer a.close()
	if status {
		applied, err := a.store.AppliedMigrations()
		if err != nil {
			return err
		}
		pending := 0
		for _, id := range models.MigrationIDs() {
			state := "pending"
			if applied[id] {
				state = "applied"
			} else {
				pending++
			}
			fmt.Printf("%-8s %s\n", state, id)
		}
		fmt.Printf("%s: %d applied, %d pending\n", a.store.Dialect(), len(models.MigrationIDs())-pending, pending)
		return nil
	}
	if err := a.store.Migrate(); err != nil {
		return err
	}
	fmt.Printf("schema is up to date (%s, %d migrations)\n", a.store.Dialect(), len(models.MigrationIDs()))
	return nil
}

// kybUsage is how the kyb command is used.
const kybUsage = "kyb needs show MERCHANT_ID, approve MERCHANT_ID --revision REVISION [NOTE] or reject MERCHANT_ID [NOTE]"

// runKYB serves `paygate kyb show|approve|reject`: the operator reads the
// application (show prints its revision) and decides on that revision: an
// approval names it, so an application the merchant edited after it was
// read is not approved (a 409-like refusal saying so).
func runKYB(ctx context.Context, args []string) error {
	if len(args) < 2 || (args[0] != "approve" && args[0] != "reject" && args[0] != "show") {
		return usageError(kybUsage)
	}
	verb, merchantID, rest := args[0], args[1], args[2:]
	revision := ""
	if len(rest) > 0 && (rest[0] == "--revision" || strings.HasPrefix(rest[0], "--revision=")) {
		if v, ok := strings.CutPrefix(rest[0], "--revision="); ok {
			revision, rest = v, rest[1:]
		} else if len(rest) > 1 {
			revision, rest = rest[1], rest[2:]
		}
		if revision == "" {
			return usageError(kybUsage)
		}
	}
	if (verb == "show" && len(rest) > 0) || (verb == "approve" && revision == "") {
		return usageError(kybUsage + " (approve names the revision `paygate kyb show` printed: an application edited since is not approved)")
	}
	approve := verb == "approve"
	note := strings.Join(rest, " ")
	a, err := newMigratedApp()
	if err != nil {
		return err
	}
	defer a.close()
	m, err := a.store.Merchant(ctx, merchantID)
	if err != nil {
		return fmt.Errorf("merchant %s: %w", merchantID, err)
	}
	if verb == "show" {
		app, err := a.store.KYB(ctx, merchantID)
		if err != nil {
			return fmt.Errorf("KYB application of %s: %w", merchantID, err)
		}
		printKYB(m, app)
		return nil
	}
	if approve && m.EmailConfirmedAt == nil && a.resetMailer() != nil {
		// An application is read as coming from the account's address;
		// until its holder proves it, anyone may have typed it.
		return fmt.Errorf("merchant %s: its e-mail address %s is not confirmed yet; the merchant confirms it from the dashboard "+
			"(the application stays pending; reject it if it should not wait)", merchantID, m.Email)
	}
	n := kybNotice(m.BusinessName, approve, note)
	app, err := a.store.ReviewKYB(ctx, merchantID, approve, note, revision, n)
	if err != nil {
		return fmt.Errorf("review: %w", err)
	}
	mailer := notify.NewMailer(a.cfg.SMTP, a.log)
	sendCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := mailer.Send(sendCtx, notify.Message{To: m.Email, Subject: n.Subject, Body: n.Body}); err != nil {
		a.log.Warn("KYB decision stored but the e-mail failed; the notification is kept", "err", err)
	} else if a.cfg.SMTP.Host != "" {
		_ = a.store.MarkNotificationEmailed(ctx, n.ID)
	}
	fmt.Printf("KYB application of %s (%s) is now %s\n", m.BusinessName, merchantID, app.Status)
	return nil
}

// printKYB prints an application for its review, with its revision.
func printKYB(m *models.Merchant, app *models.KYBApplication) {
	confirmed := "not confirmed"
	if m.EmailConfirmedAt != nil {
		confirmed = "confirmed " + m.EmailConfirmedAt.UTC().Format(time.RFC3339)
	}
	fmt.Printf("merchant            %s (%s, e-mail %s)\n", m.ID, m.Email, confirmed)
	for _, f := range [][2]string{{"status", app.Status}, {"business name", app.BusinessName}, {"business type", app.BusinessType},
		{"registration number", app.RegistrationNumber}, {"country", app.Country}, {"website", app.Website},
		{"contact name", app.ContactName}, {"contact e-mail", app.ContactEmail}, {"contact role", app.ContactRole},
		{"products", app.ProductDescription}, {"monthly volume", app.ExpectedMonthlyVolume}, {"use case", app.PrimaryUseCase},
		{"review note", app.ReviewNote}, {"submitted", app.SubmittedAt.UTC().Format(time.RFC3339)},
		{"updated", app.UpdatedAt.UTC().Format(time.RFC3339)}} {
		fmt.Printf("%-19s %q\n", f[0], f[1])
	}
	fmt.Printf("revision            %s\n", app.Revision())
	if app.Status == models.KYBPending {
		fmt.Printf("decide: paygate kyb approve %s --revision %s [NOTE]   or   paygate kyb reject %s NOTE\n", m.ID, app.Revision(), m.ID)
	}
}

// runRefunds serves `paygate refunds enable|disable MERCHANT_ID`: the
// operator's switch of the merchant's refunds flag. Refunds are on in test
// mode by default and off in live mode; enable turns them on in both,
// disable off in both.
func runRefunds(ctx context.Context, args []string) error {
	if len(args) != 2 || (args[0] != "enable" && args[0] != "disable") {
		return usageError("refunds needs enable|disable MERCHANT_ID")
	}
	a, err := newMigratedApp()
	if err != nil {
		return err
	}
	defer a.close()
	m, err := a.store.SetRefundsEnabled(ctx, args[1], args[0] == "enable")
	if err != nil {
		return fmt.Errorf("merchant %s: %w", args[1], err)
	}
	onOff := map[bool]string{true: "on", false: "off"}
	fmt.Printf("refunds of %s (%s): test mode %s, live mode %s\n", m.BusinessName, m.ID,
		onOff[m.RefundsOn(models.ModeTest)], onOff[m.RefundsOn(models.ModeLive)])
	return nil
}

func kybNotice(business string, approved bool, note string) *models.Notification {
	n := &models.Notification{Kind: "kyb.reviewed"}
	if approved {
		n.Subject = "Your business verification was approved"
		n.Body = "Hello " + business + ",\n\nyour KYB application was approved. You can now create a live API key and accept payments on mainnet networks."
	} else {
		n.Subject = "Your business verification was not approved"
		n.Body = "Hello " + business + ",\n\nyour KYB application was not approved."
	}
	if note != "" {
		n.Body += "\n\nReviewer's note: " + note
	}
	return n
}

// poolFromEnv reads the PostgreSQL pool settings (DB_MAX_OPEN_CONNS,
// DB_MAX_IDLE_CONNS, DB_CONN_MAX_LIFETIME, DB_CONN_MAX_IDLE_TIME); unset
// ones take models.DefaultPool's.
func poolFromEnv(getenv func(string) string) (models.Pool, error) {
	var p models.Pool
	for _, n := range []struct {
		name string
		dst  *int
	}{{"DB_MAX_OPEN_CONNS", &p.MaxOpen}, {"DB_MAX_IDLE_CONNS", &p.MaxIdle}} {
		if v := getenv(n.name); v != "" {
			i, err := strconv.Atoi(v)
			if err != nil || i <= 0 || i > 10000 {
				return p, fmt.Errorf("%s: must be a positive integer", n.name)
			}
			*n.dst = i
		}
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"DB_CONN_MAX_LIFETIME", &p.MaxLifetime}, {"DB_CONN_MAX_IDLE_TIME", &p.MaxIdleTime}} {
		if v := getenv(d.name); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil || x <= 0 {
				return p, fmt.Errorf("%s: must be a positive duration such as 30m", d.name)
			}
			*d.dst = x
		}
	}
	return p, nil
}
