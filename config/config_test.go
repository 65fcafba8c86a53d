package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Profile != ProfileEmbedded || c.Addr != "127.0.0.1:8080" || c.CheckoutLifetime != 30*time.Minute ||
		c.SessionTTL != 12*time.Hour || c.RefundWindow != 24*time.Hour || !c.RateLimit.Enabled || !c.RateLimit.ExemptLoopback || c.Temporal.Namespace != "default" ||
		c.RateLimit.IPv6PrefixBits != 64 || c.MetricsAddr != "127.0.0.1:9090" ||
		c.UpdateTimeout != 10*time.Second || c.Temporal.StickyCache != 0 {
		t.Fatalf("defaults %+v", c)
	}
}

func TestEnvironmentOverrides(t *testing.T) {
	c, err := Load(env(map[string]string{
		"PAYGATE_PROFILE": "production", "PAYGATE_PUBLIC_URL": "https://pay.example.com", "DATABASE_URL": "postgres://u@db/paygate", "PAYGATE_SECRET_KEY": strings.Repeat("k", 32),
		"CHECKOUT_LIFETIME": "2m", "REFUND_WINDOW": "72h", "CHECKOUT_UPDATE_TIMEOUT": "3s", "TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1", "RATE_LIMIT_EXEMPT_LOOPBACK": "false",
		"RATE_LIMIT_IPV6_PREFIX": "/56", "TEMPORAL_ADDRESS": "temporal:7233", "SMTP_HOST": "mail", "SMTP_FROM": "ops@shop.example", "SMTP_PORT": "2525",
		"TEMPORAL_STICKY_CACHE": "2000",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.CheckoutLifetime != 2*time.Minute || c.RefundWindow != 72*time.Hour || c.UpdateTimeout != 3*time.Second || len(c.RateLimit.TrustedProxies) != 2 || c.RateLimit.ExemptLoopback ||
		c.Temporal.Address != "temporal:7233" || c.SMTP.Port != 2525 || c.Embedded() || c.RateLimit.IPv6PrefixBits != 56 || c.Temporal.StickyCache != 2000 {
		t.Fatalf("overrides %+v", c)
	}
	prod, err := Load(env(map[string]string{"PAYGATE_PROFILE": "production", "PAYGATE_PUBLIC_URL": "https://pay.example.com", "DATABASE_URL": "postgres://u@db/p",
		"PAYGATE_SECRET_KEY": strings.Repeat("k", 32)}))
	if err != nil || prod.RateLimit.ExemptLoopback {
		t.Fatalf("production must rate-limit loopback by default: %v %v", prod.RateLimit.ExemptLoopback, err)
	}
	if prod.MetricsAddr != "" {
		t.Fatalf("production serves no metrics listener unless PAYGATE_METRICS_ADDR is set: %q", prod.MetricsAddr)
	}
	if c.RateLimit.TrustedProxies[1].String() != "192.0.2.1/32" {
		t.Fatalf("single IP as a /32: %v", c.RateLimit.TrustedProxies[1])
	}
}

// The client compresses requests to a remote frontend and not to one on the
// same machine, unless told otherwise.
func TestTemporalCompression(t *testing.T) {
	cases := []struct {
		address, setting string
		gzip             bool
	}{
		{"127.0.0.1:7233", "", false},
		{"localhost:7233", "", false},
		{"[::1]:7233", "", false},
		{"temporal:7233", "", true},
		{"10.0.0.5:7233", "", true},
		{"127.0.0.1:7233", "gzip", true},
		{"temporal:7233", "none", false},
		{"temporal:7233", "auto", true},
	}
	for _, tc := range cases {
		c, err := Load(env(map[string]string{"TEMPORAL_ADDRESS": tc.address, "TEMPORAL_GRPC_COMPRESSION": tc.setting}))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Temporal.Gzip(); got != tc.gzip {
			t.Errorf("TEMPORAL_ADDRESS=%s TEMPORAL_GRPC_COMPRESSION=%q: gzip %v, want %v", tc.address, tc.setting, got, tc.gzip)
		}
	}
}

// Every bad value is refused with the variable's name in the error.
func TestValidationNamesTheVariable(t *testing.T) {
	cases := map[string]map[string]string{
		"PAYGATE_PROFILE":             {"PAYGATE_PROFILE": "staging"},
		"PAYGATE_ADDR":                {"PAYGATE_ADDR": "8080"},
		"DATABASE_URL":                {"DATABASE_URL": "mysql://x"},
		"PAYGATE_SECRET_KEY":          {"PAYGATE_SECRET_KEY": "short"},
		"PAYGATE_SECRET_KEY_PREVIOUS": {"PAYGATE_SECRET_KEY_PREVIOUS": strings.Repeat("k", 32) + ",short"},
		"CHECKOUT_LIFETIME":           {"CHECKOUT_LIFETIME": "soon"},
		"REFUND_WINDOW":               {"REFUND_WINDOW": "-1h"},
		"DASHBOARD_SESSION_TTL":       {"DASHBOARD_SESSION_TTL": "-1h"},
		"RATE_LIMIT_ENABLED":          {"RATE_LIMIT_ENABLED": "maybe"},
		"TRUSTED_PROXIES":             {"TRUSTED_PROXIES": "not-an-ip"},
		"TEMPORAL_ADDRESS":            {"TEMPORAL_ADDRESS": "nohostport"},
		"TEMPORAL_TLS_CERT":           {"TEMPORAL_TLS_CERT": "/cert.pem"},
		"TEMPORAL_STICKY_CACHE":       {"TEMPORAL_STICKY_CACHE": "-1"},
		"TEMPORAL_GRPC_COMPRESSION":   {"TEMPORAL_GRPC_COMPRESSION": "zstd"},
		"REDIS_URL":                   {"REDIS_URL": "localhost:6379"},
		"SUBSCRIPTION_GRACE_PERIOD":   {"SUBSCRIPTION_GRACE_PERIOD": "0s"},
		"SUBSCRIPTION_REMINDERS":      {"SUBSCRIPTION_REMINDERS": "48h,24h"},
		"SUBSCRIPTION_DUNNING_PERIOD": {"SUBSCRIPTION_DUNNING_PERIOD": "100h"},
		"CHECKOUT_UPDATE_TIMEOUT":     {"CHECKOUT_UPDATE_TIMEOUT": "0s"},
		"RATE_LIMIT_IPV6_PREFIX":      {"RATE_LIMIT_IPV6_PREFIX": "129"},
		"PAYGATE_METRICS_ADDR":        {"PAYGATE_METRICS_ADDR": "9090"},
		"PAYGATE_METRICS_ADDR (API)":  {"PAYGATE_ADDR": "0.0.0.0:8080", "PAYGATE_METRICS_ADDR": "127.0.0.1:8080"},
		"SMTP_PORT":                   {"SMTP_PORT": "99999"},
		"SMTP_FROM":                   {"SMTP_HOST": "mail"},
		"LOG_LEVEL":                   {"LOG_LEVEL": "verbose"},
		"DATABASE_URL (production)":   {"PAYGATE_PROFILE": "production", "PAYGATE_PUBLIC_URL": "https://pay.example.com", "PAYGATE_SECRET_KEY": strings.Repeat("k", 32)},
		"WEBHOOK_ALLOW_LOOPBACK":      {"WEBHOOK_ALLOW_LOOPBACK": "sometimes"},
		"WEBHOOK_ALLOW_LOOPBACK (production)": {"PAYGATE_PROFILE": "production", "PAYGATE_PUBLIC_URL": "https://pay.example.com", "DATABASE_URL": "postgres://u@db/p",
			"PAYGATE_SECRET_KEY": strings.Repeat("k", 32), "WEBHOOK_ALLOW_LOOPBACK": "true"},
		"PAYGATE_SECRET_KEY (prod.)":           {"PAYGATE_PROFILE": "production", "PAYGATE_PUBLIC_URL": "https://pay.example.com", "DATABASE_URL": "postgres://u@db/p"},
		"PAYGATE_SECRET_KEY (shared database)": {"DATABASE_URL": "postgres://u@db/p"},
		"PAYGATE_PUBLIC_URL (production)": {"PAYGATE_PROFILE": "production", "DATABASE_URL": "postgres://u@db/p",
			"PAYGATE_SECRET_KEY": strings.Repeat("k", 32)},
		"PAYGATE_PUBLIC_URL": {"PAYGATE_PUBLIC_URL": "pay.example.com"},
	}
	for name, vars := range cases {
		_, err := Load(env(vars))
		want := strings.Fields(name)[0]
		if err == nil || !strings.Contains(err.Error(), want+":") {
			t.Errorf("%s: error %v does not name %s", name, err, want)
		}
	}
}

func TestEnsureSecretPersists(t *testing.T) {
	dir := t.TempDir()
	c := Defaults()
	c.DataDir = filepath.Join(dir, "data")
	first, err := c.EnsureSecret()
	if err != nil || len(first) < 32 {
		t.Fatalf("%q %v", first, err)
	}
	again := Defaults()
	again.DataDir = c.DataDir
	second, err := again.EnsureSecret()
	if err != nil || second != first {
		t.Fatalf("the secret must survive a restart: %q vs %q (%v)", second, first, err)
	}
	info, _ := os.Stat(filepath.Join(c.DataDir, "secret.key"))
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode %v", info.Mode().Perm())
	}
	prod := Defaults()
	prod.Profile = ProfileProduction
	if _, err := prod.EnsureSecret(); err == nil || !strings.Contains(err.Error(), "PAYGATE_SECRET_KEY") {
		t.Fatalf("production without a secret: %v", err)
	}
}

// The dunning schedule: defaults, overrides, and "none" for no reminders.
func TestSubscriptionSchedule(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil || c.Subscriptions.GracePeriod != 72*time.Hour || len(c.Subscriptions.Reminders) != 3 ||
		c.Subscriptions.DunningPeriod != 168*time.Hour {
		t.Fatalf("defaults %+v %v", c.Subscriptions, err)
	}
	c, err = Load(env(map[string]string{"SUBSCRIPTION_GRACE_PERIOD": "24h", "SUBSCRIPTION_REMINDERS": "12h, 36h",
		"SUBSCRIPTION_DUNNING_PERIOD": "48h"}))
	if err != nil || c.Subscriptions.GracePeriod != 24*time.Hour || len(c.Subscriptions.Reminders) != 2 ||
		c.Subscriptions.Reminders[1] != 36*time.Hour || c.Subscriptions.DunningPeriod != 48*time.Hour {
		t.Fatalf("overrides %+v %v", c.Subscriptions, err)
	}
	c, err = Load(env(map[string]string{"SUBSCRIPTION_REMINDERS": "none"}))
	if err != nil || len(c.Subscriptions.Reminders) != 0 {
		t.Fatalf("none %+v %v", c.Subscriptions, err)
	}
}

// TestMetricsAddr: /metrics has its own listener: loopback by default in the
// embedded profile, off in production unless set, "off" turns it off.
func TestMetricsAddr(t *testing.T) {
	cases := []struct {
		vars map[string]string
		want string
	}{
		{nil, "127.0.0.1:9090"},
		{map[string]string{"PAYGATE_METRICS_ADDR": "off"}, ""},
		{map[string]string{"PAYGATE_METRICS_ADDR": "127.0.0.1:0"}, "127.0.0.1:0"},
		{map[string]string{"PAYGATE_PROFILE": "production", "PAYGATE_PUBLIC_URL": "https://pay.example.com", "DATABASE_URL": "postgres://u@db/p", "PAYGATE_SECRET_KEY": strings.Repeat("k", 32)}, ""},
		{map[string]string{"PAYGATE_PROFILE": "production", "PAYGATE_PUBLIC_URL": "https://pay.example.com", "DATABASE_URL": "postgres://u@db/p", "PAYGATE_SECRET_KEY": strings.Repeat("k", 32),
			"PAYGATE_METRICS_ADDR": "10.0.0.5:9090"}, "10.0.0.5:9090"},
	}
	for _, c := range cases {
		got, err := Load(env(c.vars))
		if err != nil || got.MetricsAddr != c.want {
			t.Errorf("%v: MetricsAddr %q (%v), want %q", c.vars, got.MetricsAddr, err, c.want)
		}
	}
}

// TestWebhookLoopbackAllowance: test endpoints may use loopback only on a
// single-machine embedded setup, or where WEBHOOK_ALLOW_LOOPBACK says so
// outside production; a deployment that forgot PAYGATE_PROFILE=production
// (PostgreSQL, a listener on every interface, a remote Temporal) does not
// get it; production refuses to start with it.
func TestWebhookLoopbackAllowance(t *testing.T) {
	cases := []struct {
		name string
		vars map[string]string
		want bool
	}{
		{"embedded defaults", nil, true},
		{"embedded on localhost", map[string]string{"PAYGATE_ADDR": "localhost:8080", "TEMPORAL_ADDRESS": "[::1]:7233"}, true},
		{"forgotten profile: PostgreSQL", map[string]string{"DATABASE_URL": "postgres://u@db/p", "PAYGATE_SECRET_KEY": strings.Repeat("k", 32)}, false},
		{"forgotten profile: public listener", map[string]string{"PAYGATE_ADDR": "0.0.0.0:8080"}, false},
		{"forgotten profile: remote Temporal", map[string]string{"TEMPORAL_ADDRESS": "temporal:7233"}, false},
		{"explicit on, embedded", map[string]string{"DATABASE_URL": "postgres://u@db/p", "PAYGATE_SECRET_KEY": strings.Repeat("k", 32),
			"WEBHOOK_ALLOW_LOOPBACK": "true"}, true},
		{"explicit off, embedded", map[string]string{"WEBHOOK_ALLOW_LOOPBACK": "false"}, false},
		{"production", map[string]string{"PAYGATE_PROFILE": "production", "PAYGATE_PUBLIC_URL": "https://pay.example.com", "DATABASE_URL": "postgres://u@db/p", "PAYGATE_SECRET_KEY": strings.Repeat("k", 32)}, false},
	}
	for _, c := range cases {
		got, err := Load(env(c.vars))
		if err != nil || got.WebhookAllowLoopback != c.want {
			t.Errorf("%s: WebhookAllowLoopback %v (%v), want %v", c.name, got.WebhookAllowLoopback, err, c.want)
		}
	}
	_, err := Load(env(map[string]string{"PAYGATE_PROFILE": "production", "PAYGATE_PUBLIC_URL": "https://pay.example.com", "DATABASE_URL": "postgres://u@db/p",
		"PAYGATE_SECRET_KEY": strings.Repeat("k", 32), "WEBHOOK_ALLOW_LOOPBACK": "1"}))
	if err == nil || !strings.Contains(err.Error(), "WEBHOOK_ALLOW_LOOPBACK: embedded-only") {
		t.Fatalf("production with the loopback allowance must refuse to start: %v", err)
	}
}
