package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/paygate/paygate/keyring"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/webhook"
)

// TestSecretsRotateCommand rotates PAYGATE_SECRET_KEY as the README says:
// endpoints created under the old secret; the new secret set with the old
// one in PAYGATE_SECRET_KEY_PREVIOUS; `paygate secrets rotate`; then the new
// secret alone opens every webhook secret. Without the previous secret the
// command fails and names the variable.
func TestSecretsRotateCommand(t *testing.T) {
	const oldSecret, newSecret = "old-operator-secret-old-operator-secret", "new-operator-secret-new-operator-secret"
	dir := t.TempDir()
	t.Setenv("PAYGATE_DATA_DIR", dir)
	t.Setenv("DATABASE_URL", "")
	t.Setenv("PAYGATE_PROFILE", "embedded")
	open := func(current string, previous ...string) *models.Store {
		r, err := keyring.New(keyring.PurposeWebhookSecret, current, previous...)
		if err != nil {
			t.Fatal(err)
		}
		st, err := models.Open(models.Options{SQLitePath: filepath.Join(dir, "paygate.db"), Secrets: r})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	ctx := context.Background()
	st := open(oldSecret)
	if err := st.Migrate(); err != nil {
		t.Fatal(err)
	}
	m := &models.Merchant{Email: "ops@example.com", PasswordHash: "x", BusinessName: "Shop"}
	if _, err := st.CreateMerchant(ctx, m, &models.DashboardSession{TokenHash: "s"}, models.NewKey{Hash: "k", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{}
	for i := 0; i < 3; i++ {
		secret, _ := webhook.NewSecret()
		ep := &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest, URL: fmt.Sprintf("https://hooks.example.com/h%d", i),
			Events: models.StringList{"checkout.completed"}, Secret: secret}
		if err := st.CreateWebhookEndpoint(ctx, ep); err != nil {
			t.Fatal(err)
		}
		secrets[ep.ID] = secret
	}

	t.Setenv("PAYGATE_SECRET_KEY", newSecret)
	t.Setenv("PAYGATE_SECRET_KEY_PREVIOUS", "")
	if err := run(ctx, []string{"secrets", "rotate"}); err == nil {
		t.Fatal("rotate without the previous secret must fail")
	}
	t.Setenv("PAYGATE_SECRET_KEY_PREVIOUS", oldSecret)
	if err := run(ctx, []string{"secrets", "rotate"}); err != nil {
		t.Fatal(err)
	}
	after := open(newSecret)
	for id, want := range secrets {
		if got, err := after.EndpointSecret(ctx, id); err != nil || got != want {
			t.Fatalf("endpoint %s after rotation: %q %v", id, got, err)
		}
	}
	var ue usageError
	if err := run(ctx, []string{"secrets", "spin"}); !asUsage(err, &ue) {
		t.Fatalf("bad usage: %v", err)
	}
}
