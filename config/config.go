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
	DataDir string  // PAYGATE_DATA_DIR: embedded state (SQLite, secret, Temporal)
	// DatabaseURL selects PostgreSQL; empty means SQLite under DataDir.
	DatabaseURL string // DATABASE_URL
	// SecretKey keys API-key hashing, quote signatures and other HMACs.
	// Embedded: generated once into DataDir/secret.key when unset.
	SecretKey string // PAYGATE_SECRET_KEY (at least 32 characters)

	SessionTTL       time.Duration // DASHBOARD_SESSION_TTL (12h)
	CheckoutLifetime time.Duration // CHECKOUT_LIFETIME (30m)

	Temporal  TemporalConfig
	RateLimit RateLimitConfig
	SMTP      SMTPConfig

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
		DataDir:          ".data",
		SessionTTL:       12 * time.Hour,
		CheckoutLifetime: 30 * time.Minute,
		Temporal: TemporalConfig{
			Address:           "127.0.0.1:7233",
			Namespace:         "default",
			TaskQueueCheckout: "paygate-checkout",
			TaskQueueWebhooks: "paygate-webhooks",
		},
		RateLimit:     RateLimitConfig{Enabled: true, ExemptLoopback: true},
		SMTP:          SMTPConfig{Port: 587},
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
	str("PAYGATE_DATA_DIR", &c.DataDir)
	str("DATABASE_URL", &c.DatabaseURL)
	str("PAYGATE_SECRET_KEY", &c.SecretKey)
	duration("DASHBOARD_SESSION_TTL", &c.SessionTTL)
	duration("CHECKOUT_LIFETIME", &c.CheckoutLifetime)
	str("TEMPORAL_ADDRESS", &c.Temporal.Address)
	str("TEMPORAL_NAMESPACE", &c.Temporal.Namespace)
	str("TEMPORAL_TLS_CERT", &c.Temporal.TLSCert)
	str("TEMPORAL_TLS_KEY", &c.Temporal.TLSKey)
	str("TEMPORAL_TLS_CA", &c.Temporal.TLSCA)
	str("TEMPORAL_TLS_SERVER_NAME", &c.Temporal.ServerName)
	str("TEMPORAL_TASK_QUEUE_CHECKOUT", &c.Temporal.TaskQueueCheckout)
	str("TEMPORAL_TASK_QUEUE_WEBHOOKS", &c.Temporal.TaskQueueWebhooks)
	boolean("RATE_LIMIT_ENABLED", &c.RateLimit.Enabled)
	if c.Profile == ProfileProduction {
		// Behind a reverse proxy on the same host every client would look
		// like loopback: production limits loopback too unless told not to.
		c.RateLimit.ExemptLoopback = false
	}
	boolean("RATE_LIMIT_EXEMPT_LOOPBACK", &c.RateLimit.ExemptLoopback)
	str("REDIS_URL", &c.RateLimit.RedisURL)
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
	str("LOG_LEVEL", &c.LogLevel)
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
	}
	if c.SecretKey != "" && len(c.SecretKey) < 32 {
		errs = append(errs, errors.New("PAYGATE_SECRET_KEY: must be at least 32 characters"))
	}
	if _, _, err := net.SplitHostPort(c.Temporal.Address); err != nil {
		errs = append(errs, fmt.Errorf("TEMPORAL_ADDRESS: must be host:port, got %q", c.Temporal.Address))
	}
	if c.Temporal.Namespace == "" {
		errs = append(errs, errors.New("TEMPORAL_NAMESPACE: must not be empty"))
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
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("LOG_LEVEL: must be debug, info, warn or error, got %q", c.LogLevel))
	}
	return errors.Join(errs...)
}

// Embedded reports whether this is the single-machine default profile, which
// also accepts http:// webhooks to loopback for local development.
func (c Config) Embedded() bool { return c.Profile == ProfileEmbedded }

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
