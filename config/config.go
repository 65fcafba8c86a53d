// Package config is the service's one typed configuration: defaults, then the
// environment, then Validate, which names the variable at fault.
package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Profile names a runtime profile (DESIGN.md section 2).
type Profile string

// The two runtime profiles.
const (
	ProfileEmbedded   Profile = "embedded"
	ProfileProduction Profile = "production"
)

// Config is everything the binary reads from its environment.
type Config struct {
	Profile Profile // PAYGATE_PROFILE: embedded (default) or production
	Addr    string  // PAYGATE_ADDR: API listen address
	// MetricsAddr is the API process's operational listener (/metrics,
	// /healthz, /readyz), apart from the public port: loopback in the
	// embedded profile, off ("") in production unless set.
	MetricsAddr string // PAYGATE_METRICS_ADDR: host:port, or "off"
	DataDir     string // PAYGATE_DATA_DIR: embedded state (SQLite, secret, Temporal)
	// DatabaseURL selects PostgreSQL; empty means SQLite under DataDir.
	DatabaseURL string // DATABASE_URL
	// SecretKey keys API-key hashing, quote signatures and other HMACs.
	// Embedded: generated once into DataDir/secret.key when unset.
	SecretKey string // PAYGATE_SECRET_KEY (at least 32 characters)
	// SecretKeyPrevious are earlier server secrets, kept while rotating
	// PAYGATE_SECRET_KEY: webhook secrets sealed under them still open (and
	// are sealed again under the current one), API keys and dashboard
	// sessions hashed under them still sign in (and are hashed again), and
	// quotes signed under them still verify.
	SecretKeyPrevious []string // PAYGATE_SECRET_KEY_PREVIOUS: comma separated

	SessionTTL       time.Duration // DASHBOARD_SESSION_TTL (12h)
	CheckoutLifetime time.Duration // CHECKOUT_LIFETIME (30m)
	// RefundWindow is how long a merchant has to submit a refund's
	// transfer before the refund fails and frees its amount.
	RefundWindow time.Duration // REFUND_WINDOW (24h)
	// UpdateTimeout bounds how long the API waits for a session's workflow
	// to answer a submit, a wallet report or a cancel before it answers 503.
	UpdateTimeout time.Duration // CHECKOUT_UPDATE_TIMEOUT (10s)

	Temporal      TemporalConfig
	RateLimit     RateLimitConfig
	SMTP          SMTPConfig
	Subscriptions SubscriptionConfig

	// WebhookAllowLoopback lets test-mode webhook endpoints use http:// and
	// loopback addresses (WEBHOOK_ALLOW_LOOPBACK), for local development.
	// Live endpoints never get it. Default: on only in the embedded profile
	// on one machine (API, Temporal on loopback, SQLite); a deployment that
	// forgot PAYGATE_PROFILE=production therefore does not open the worker
	// host's loopback to anyone who signs up. The production profile
	// refuses to start with it.
	WebhookAllowLoopback bool

	// PublicBaseURL is where the hosted pages are reachable (links in mails).
	PublicBaseURL string // PAYGATE_PUBLIC_URL
	LogLevel      string // LOG_LEVEL: debug, info, warn, error
}

// TemporalConfig locates the Temporal frontend.
type TemporalConfig struct {
	Address           string // TEMPORAL_ADDRESS (127.0.0.1:7233)
	Namespace         string // TEMPORAL_NAMESPACE (default)
	TLSCert           string // TEMPORAL_TLS_CERT: client certificate file
	TLSKey            string // TEMPORAL_TLS_KEY: client key file
	TLSCA             string // TEMPORAL_TLS_CA: CA bundle file
	ServerName        string // TEMPORAL_TLS_SERVER_NAME
	TaskQueueCheckout string // TEMPORAL_TASK_QUEUE_CHECKOUT (paygate-checkout)
	TaskQueueWebhooks string // TEMPORAL_TASK_QUEUE_WEBHOOKS (paygate-webhooks)
	// StickyTimeout is the workers' sticky schedule-to-start timeout
	// (TEMPORAL_STICKY_TIMEOUT, 15s); it applies only with a sticky cache.
	StickyTimeout time.Duration
	// StopTimeout is how long a stopping worker lets its running
	// activities (a webhook attempt, a store write) finish
	// (WORKER_STOP_TIMEOUT, 20s): abandoned, an attempt the receiver took
	// is sent again after the restart.
	StopTimeout time.Duration
	// StickyCache is how many workflows a worker process keeps in memory
	// between their tasks (TEMPORAL_STICKY_CACHE, 0: sticky execution off,
	// every task goes to the shared queue and replays its history).
	StickyCache int
	// Compression is the gRPC compression of requests to the frontend
	// (TEMPORAL_GRPC_COMPRESSION): CompressionGzip, CompressionNone, or
	// CompressionAuto (the default), which is none when the frontend is on
	// loopback and gzip otherwise. See Gzip.
	Compression string
}

// Values of TemporalConfig.Compression.
const (
	CompressionAuto = "auto"
	CompressionGzip = "gzip"
	CompressionNone = "none"
)

// Gzip reports whether the Temporal client compresses its requests (and
// so asks for compressed answers). The SDK compresses by default, which
// saves bandwidth to a remote cluster; to a frontend on the same machine it
// only costs CPU on both sides: a fresh gzip state per message, for
// messages of a few hundred bytes to a few kilobytes (make bench, a storm
// of 1,000 expiries: 7% of the worker process's CPU and 2% of the dev
// server's went to compressing and decompressing them).
func (t TemporalConfig) Gzip() bool {
	switch t.Compression {
	case CompressionGzip:
		return true
	case CompressionNone:
		return false
	}
	return !loopbackHostPort(t.Address)
}

// TLSEnabled reports whether any TLS setting was given.
func (t TemporalConfig) TLSEnabled() bool {
	return t.TLSCert != "" || t.TLSKey != "" || t.TLSCA != "" || t.ServerName != ""
}

// RateLimitConfig configures SPEC.md's limiter tiers.
type RateLimitConfig struct {
	Enabled        bool           // RATE_LIMIT_ENABLED (true)
	ExemptLoopback bool           // RATE_LIMIT_EXEMPT_LOOPBACK (true)
	RedisURL       string         // REDIS_URL: shared store for several API replicas
	TrustedProxies []netip.Prefix // TRUSTED_PROXIES: CIDRs or IPs, comma separated
	// IPv6PrefixBits groups IPv6 clients per network of this prefix length
	// (RATE_LIMIT_IPV6_PREFIX, 64); 128 limits each address on its own.
	IPv6PrefixBits int
}

// SubscriptionConfig is the dunning schedule of subscriptions.
type SubscriptionConfig struct {
	// GracePeriod: an invoice unpaid this long after it is issued makes the
	// subscription past_due.
	GracePeriod time.Duration // SUBSCRIPTION_GRACE_PERIOD (72h)
	// Reminders are offsets from past_due at which a reminder goes out.
	Reminders []time.Duration // SUBSCRIPTION_REMINDERS (24h,72h,120h; "none" for none)
	// DunningPeriod: still unpaid this long after past_due, it is canceled.
	DunningPeriod time.Duration // SUBSCRIPTION_DUNNING_PERIOD (168h)
}

// SMTPConfig sends merchant notifications when Host is set.
type SMTPConfig struct {
	Host     string // SMTP_HOST
	Port     int    // SMTP_PORT (587)
	Username string // SMTP_USERNAME
	Password string // SMTP_PASSWORD
	From     string // SMTP_FROM
}

// Defaults returns the embedded profile's configuration.
func Defaults() Config {
	return Config{
		Profile:          ProfileEmbedded,
		Addr:             "127.0.0.1:8080",
		MetricsAddr:      "127.0.0.1:9090",
		DataDir:          ".data",
		SessionTTL:       12 * time.Hour,
		CheckoutLifetime: 30 * time.Minute,
		RefundWindow:     24 * time.Hour,
		UpdateTimeout:    10 * time.Second,
		Temporal: TemporalConfig{
			Address:           "127.0.0.1:7233",
			Namespace:         "default",
			TaskQueueCheckout: "paygate-checkout",
			TaskQueueWebhooks: "paygate-webhooks",
			StickyTimeout:     15 * time.Second,
			StopTimeout:       20 * time.Second,
			Compression:       CompressionAuto,
		},
		RateLimit: RateLimitConfig{Enabled: true, ExemptLoopback: true, IPv6PrefixBits: 64},
		SMTP:      SMTPConfig{Port: 587},
		Subscriptions: SubscriptionConfig{GracePeriod: 72 * time.Hour,
			Reminders: []time.Duration{24 * time.Hour, 72 * time.Hour, 120 * time.Hour}, DunningPeriod: 168 * time.Hour},
		PublicBaseURL: "http://127.0.0.1:8080",
		LogLevel:      "info",
	}
}

// Load reads the environment over the defaults and validates the result.
// getenv is os.Getenv in production and a map in tests.
func Load(getenv func(string) string) (Config, error) {
	c := Defaults()
	var errs []error
	str := func(name string, dst *string) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			*dst = v
		}
	}
	boolean := func(name string, dst *bool) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: must be true or false, got %q", name, v))
				return
			}
			*dst = b
		}
	}
	duration := func(name string, dst *time.Duration) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("%s: must be a positive duration such as 30m, got %q", name, v))
				return
			}
			*dst = d
		}
	}
	var profile string
	str("PAYGATE_PROFILE", &profile)
	if profile != "" {
		c.Profile = Profile(profile)
	}
	str("PAYGATE_ADDR", &c.Addr)
	if c.Profile == ProfileProduction {
		c.MetricsAddr = "" // off unless asked for: production decides where it is reachable
	}
	if v := strings.TrimSpace(getenv("PAYGATE_METRICS_ADDR")); v != "" {
		c.MetricsAddr = v
		if strings.EqualFold(v, "off") {
			c.MetricsAddr = ""
		}
	}
	str("PAYGATE_DATA_DIR", &c.DataDir)
	str("DATABASE_URL", &c.DatabaseURL)
	str("PAYGATE_SECRET_KEY", &c.SecretKey)
	for _, p := range strings.Split(getenv("PAYGATE_SECRET_KEY_PREVIOUS"), ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.SecretKeyPrevious = append(c.SecretKeyPrevious, p)
		}
	}
	duration("DASHBOARD_SESSION_TTL", &c.SessionTTL)
	duration("CHECKOUT_LIFETIME", &c.CheckoutLifetime)
	duration("REFUND_WINDOW", &c.RefundWindow)
	duration("CHECKOUT_UPDATE_TIMEOUT", &c.UpdateTimeout)
	str("TEMPORAL_ADDRESS", &c.Temporal.Address)
	str("TEMPORAL_NAMESPACE", &c.Temporal.Namespace)
	str("TEMPORAL_TLS_CERT", &c.Temporal.TLSCert)
	str("TEMPORAL_TLS_KEY", &c.Temporal.TLSKey)
	str("TEMPORAL_TLS_CA", &c.Temporal.TLSCA)
	str("TEMPORAL_TLS_SERVER_NAME", &c.Temporal.ServerName)
	str("TEMPORAL_TASK_QUEUE_CHECKOUT", &c.Temporal.TaskQueueCheckout)
	str("TEMPORAL_TASK_QUEUE_WEBHOOKS", &c.Temporal.TaskQueueWebhooks)
	duration("TEMPORAL_STICKY_TIMEOUT", &c.Temporal.StickyTimeout)
	duration("WORKER_STOP_TIMEOUT", &c.Temporal.StopTimeout)
	str("TEMPORAL_GRPC_COMPRESSION", &c.Temporal.Compression)
	if v := strings.TrimSpace(getenv("TEMPORAL_STICKY_CACHE")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("TEMPORAL_STICKY_CACHE: must be a number of workflows, 0 or more (0 turns sticky execution off), got %q", v))
		} else {
			c.Temporal.StickyCache = n
		}
	}
	boolean("RATE_LIMIT_ENABLED", &c.RateLimit.Enabled)
	if c.Profile == ProfileProduction {
		// Behind a reverse proxy on the same host every client would look
		// like loopback: production limits loopback too unless told not to.
		c.RateLimit.ExemptLoopback = false
	}
	boolean("RATE_LIMIT_EXEMPT_LOOPBACK", &c.RateLimit.ExemptLoopback)
	str("REDIS_URL", &c.RateLimit.RedisURL)
	if v := strings.TrimSpace(getenv("RATE_LIMIT_IPV6_PREFIX")); v != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(v, "/"))
		if err != nil || n < 1 || n > 128 {
			errs = append(errs, fmt.Errorf("RATE_LIMIT_IPV6_PREFIX: must be a prefix length from 1 to 128 (64 groups a /64; 128 is per address), got %q", v))
		} else {
			c.RateLimit.IPv6PrefixBits = n
		}
	}
	if v := strings.TrimSpace(getenv("TRUSTED_PROXIES")); v != "" {
		for _, part := range strings.Split(v, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			p, err := netip.ParsePrefix(part)
			if err != nil {
				a, aerr := netip.ParseAddr(part)
				if aerr != nil {
					errs = append(errs, fmt.Errorf("TRUSTED_PROXIES: %q is not an IP address or CIDR", part))
					continue
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			c.RateLimit.TrustedProxies = append(c.RateLimit.TrustedProxies, p)
		}
	}
	c.WebhookAllowLoopback = c.Profile == ProfileEmbedded && c.DatabaseURL == "" &&
		loopbackHostPort(c.Addr) && loopbackHostPort(c.Temporal.Address)
	boolean("WEBHOOK_ALLOW_LOOPBACK", &c.WebhookAllowLoopback)
	str("SMTP_HOST", &c.SMTP.Host)
	if v := strings.TrimSpace(getenv("SMTP_PORT")); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p <= 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("SMTP_PORT: must be a port number, got %q", v))
		} else {
			c.SMTP.Port = p
		}
	}
	str("SMTP_USERNAME", &c.SMTP.Username)
	str("SMTP_PASSWORD", &c.SMTP.Password)
	str("SMTP_FROM", &c.SMTP.From)
	str("PAYGATE_PUBLIC_URL", &c.PublicBaseURL)
	if u, err := url.Parse(c.PublicBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("PAYGATE_PUBLIC_URL: must be an absolute http(s) URL, got %q", c.PublicBaseURL))
	}
	duration("SUBSCRIPTION_GRACE_PERIOD", &c.Subscriptions.GracePeriod)
	duration("SUBSCRIPTION_DUNNING_PERIOD", &c.Subscriptions.DunningPeriod)
	if v := strings.TrimSpace(getenv("SUBSCRIPTION_REMINDERS")); v != "" {
		c.Subscriptions.Reminders = nil
		if v != "none" {
			for _, part := range strings.Split(v, ",") {
				d, err := time.ParseDuration(strings.TrimSpace(part))
				if err != nil || d <= 0 {
					errs = append(errs, fmt.Errorf("SUBSCRIPTION_REMINDERS: must be positive durations separated by commas (or none), got %q", v))
					break
				}
				c.Subscriptions.Reminders = append(c.Subscriptions.Reminders, d)
			}
		}
	}
	str("LOG_LEVEL", &c.LogLevel)
	if c.Profile == ProfileProduction && strings.TrimSpace(getenv("PAYGATE_PUBLIC_URL")) == "" {
		// Its default is the embedded profile's loopback address: the
		// invoices' checkoutUrl would send customers to 127.0.0.1.
		errs = append(errs, errors.New("PAYGATE_PUBLIC_URL: required in the production profile (where customers reach the hosted pages, e.g. https://pay.example.com)"))
	}
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// Validate checks the assembled configuration and names the variable at fault.
func (c Config) Validate() error {
	var errs []error
	switch c.Profile {
	case ProfileEmbedded, ProfileProduction:
	default:
		errs = append(errs, fmt.Errorf("PAYGATE_PROFILE: must be embedded or production, got %q", c.Profile))
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("PAYGATE_ADDR: must be host:port, got %q", c.Addr))
	}
	if c.MetricsAddr != "" {
		_, mport, err := net.SplitHostPort(c.MetricsAddr)
		_, aport, _ := net.SplitHostPort(c.Addr)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("PAYGATE_METRICS_ADDR: must be host:port or off, got %q", c.MetricsAddr))
		case mport == aport && mport != "0":
			errs = append(errs, errors.New("PAYGATE_METRICS_ADDR: must not share the API's port (PAYGATE_ADDR): /metrics stays off the public listener"))
		}
	}
	if c.DatabaseURL != "" && !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
		errs = append(errs, errors.New("DATABASE_URL: must be a postgres:// URL"))
	}
	if c.Profile == ProfileProduction {
		if c.DatabaseURL == "" {
			errs = append(errs, errors.New("DATABASE_URL: required in the production profile"))
		}
		if c.SecretKey == "" {
			errs = append(errs, errors.New("PAYGATE_SECRET_KEY: required in the production profile"))
		}
		// Embedded-only settings: a production process refuses them rather
		// than run with a development allowance.
		if c.WebhookAllowLoopback {
			errs = append(errs, errors.New("WEBHOOK_ALLOW_LOOPBACK: embedded-only (http:// and loopback webhooks); not allowed in the production profile"))
		}
	}
	if c.DatabaseURL != "" && c.SecretKey == "" && c.Profile != ProfileProduction {
		// Without it each process makes a secret of its own in its data
		// directory: processes sharing the database could not open each
		// other's sealed webhook secrets, nor check API keys.
		errs = append(errs, errors.New("PAYGATE_SECRET_KEY: required with DATABASE_URL (every process sharing the database must use the same secret)"))
	}
	if c.SecretKey != "" && len(c.SecretKey) < 32 {
		errs = append(errs, errors.New("PAYGATE_SECRET_KEY: must be at least 32 characters"))
	}
	for _, p := range c.SecretKeyPrevious {
		if len(p) < 32 {
			errs = append(errs, errors.New("PAYGATE_SECRET_KEY_PREVIOUS: every previous secret has at least 32 characters"))
			break
		}
	}
	if _, _, err := net.SplitHostPort(c.Temporal.Address); err != nil {
		errs = append(errs, fmt.Errorf("TEMPORAL_ADDRESS: must be host:port, got %q", c.Temporal.Address))
	}
	if c.Temporal.Namespace == "" {
		errs = append(errs, errors.New("TEMPORAL_NAMESPACE: must not be empty"))
	}
	switch c.Temporal.Compression {
	case "", CompressionAuto, CompressionGzip, CompressionNone: // "": a Config built without Defaults; Gzip reads it as auto
	default:
		errs = append(errs, fmt.Errorf("TEMPORAL_GRPC_COMPRESSION: must be auto, gzip or none, got %q", c.Temporal.Compression))
	}
	if (c.Temporal.TLSCert == "") != (c.Temporal.TLSKey == "") {
		errs = append(errs, errors.New("TEMPORAL_TLS_CERT: TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY go together"))
	}
	if c.RateLimit.RedisURL != "" && !strings.HasPrefix(c.RateLimit.RedisURL, "redis://") && !strings.HasPrefix(c.RateLimit.RedisURL, "rediss://") {
		errs = append(errs, errors.New("REDIS_URL: must be a redis:// or rediss:// URL"))
	}
	if c.SMTP.Host != "" && c.SMTP.From == "" {
		errs = append(errs, errors.New("SMTP_FROM: required when SMTP_HOST is set"))
	}
	prev := time.Duration(0)
	for _, r := range c.Subscriptions.Reminders {
		if r <= prev {
			errs = append(errs, errors.New("SUBSCRIPTION_REMINDERS: offsets must ascend"))
			break
		}
		prev = r
	}
	if prev >= c.Subscriptions.DunningPeriod {
		errs = append(errs, fmt.Errorf("SUBSCRIPTION_DUNNING_PERIOD: must be longer than the last reminder (%s)", prev))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("LOG_LEVEL: must be debug, info, warn or error, got %q", c.LogLevel))
	}
	return errors.Join(errs...)
}

// Embedded reports whether this is the single-machine default profile.
func (c Config) Embedded() bool { return c.Profile == ProfileEmbedded }

// loopbackHostPort reports whether addr's host is a loopback address or
// "localhost" (an empty host listens everywhere: not loopback).
func loopbackHostPort(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// EnsureSecret returns the configured secret, or in the embedded profile the
// one kept in DataDir/secret.key, generating it on first use.
func (c *Config) EnsureSecret() (string, error) {
	if c.SecretKey != "" {
		return c.SecretKey, nil
	}
	if c.Profile != ProfileEmbedded {
		return "", errors.New("PAYGATE_SECRET_KEY: required in the production profile")
	}
	path := filepath.Join(c.DataDir, "secret.key")
	if b, err := os.ReadFile(path); err == nil {
		c.SecretKey = strings.TrimSpace(string(b))
		if len(c.SecretKey) >= 32 {
			return c.SecretKey, nil
		}
		return "", fmt.Errorf("%s: holds fewer than 32 characters", path)
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("PAYGATE_DATA_DIR: %w", err)
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	c.SecretKey = hex.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(c.SecretKey+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("PAYGATE_DATA_DIR: %w", err)
	}
	return c.SecretKey, nil
}
