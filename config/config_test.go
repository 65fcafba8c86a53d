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
		c.SessionTTL != 12*time.Hour || !c.RateLimit.Enabled || !c.RateLimit.ExemptLoopback || c.Temporal.Namespace != "default" {
		t.Fatalf("defaults %+v", c)
	}
}

func TestEnvironmentOverrides(t *testing.T) {
	c, err := Load(env(map[string]string{
		"PAYGATE_PROFILE": "production", "DATABASE_URL": "postgres://u@db/paygate", "PAYGATE_SECRET_KEY": strings.Repeat("k", 32),
		"CHECKOUT_LIFETIME": "2m", "TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1", "RATE_LIMIT_EXEMPT_LOOPBACK": "false",
		"TEMPORAL_ADDRESS": "temporal:7233", "SMTP_HOST": "mail", "SMTP_FROM": "ops@shop.example", "SMTP_PORT": "2525",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.CheckoutLifetime != 2*time.Minute || len(c.RateLimit.TrustedProxies) != 2 || c.RateLimit.ExemptLoopback ||
		c.Temporal.Address != "temporal:7233" || c.SMTP.Port != 2525 || c.Embedded() {
		t.Fatalf("overrides %+v", c)
	}
	prod, err := Load(env(map[string]string{"PAYGATE_PROFILE": "production", "DATABASE_URL": "postgres://u@db/p",
		"PAYGATE_SECRET_KEY": strings.Repeat("k", 32)}))
	if err != nil || prod.RateLimit.ExemptLoopback {
		t.Fatalf("production must rate-limit loopback by default: %v %v", prod.RateLimit.ExemptLoopback, err)
	}
	if c.RateLimit.TrustedProxies[1].String() != "192.0.2.1/32" {
		t.Fatalf("single IP as a /32: %v", c.RateLimit.TrustedProxies[1])
	}
}

// Every bad value is refused with the variable's name in the error.
func TestValidationNamesTheVariable(t *testing.T) {
	cases := map[string]map[string]string{
		"PAYGATE_PROFILE":            {"PAYGATE_PROFILE": "staging"},
		"PAYGATE_ADDR":               {"PAYGATE_ADDR": "8080"},
		"DATABASE_URL":               {"DATABASE_URL": "mysql://x"},
		"PAYGATE_SECRET_KEY":         {"PAYGATE_SECRET_KEY": "short"},
		"CHECKOUT_LIFETIME":          {"CHECKOUT_LIFETIME": "soon"},
		"DASHBOARD_SESSION_TTL":      {"DASHBOARD_SESSION_TTL": "-1h"},
		"RATE_LIMIT_ENABLED":         {"RATE_LIMIT_ENABLED": "maybe"},
		"TRUSTED_PROXIES":            {"TRUSTED_PROXIES": "not-an-ip"},
		"TEMPORAL_ADDRESS":           {"TEMPORAL_ADDRESS": "nohostport"},
		"TEMPORAL_TLS_CERT":          {"TEMPORAL_TLS_CERT": "/cert.pem"},
		"REDIS_URL":                  {"REDIS_URL": "localhost:6379"},
		"SMTP_PORT":                  {"SMTP_PORT": "99999"},
		"SMTP_FROM":                  {"SMTP_HOST": "mail"},
		"LOG_LEVEL":                  {"LOG_LEVEL": "verbose"},
		"DATABASE_URL (production)":  {"PAYGATE_PROFILE": "production", "PAYGATE_SECRET_KEY": strings.Repeat("k", 32)},
		"PAYGATE_SECRET_KEY (prod.)": {"PAYGATE_PROFILE": "production", "DATABASE_URL": "postgres://u@db/p"},
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
