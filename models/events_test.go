package models_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestEmitEventTwice: emitting an event again by its key (an activity
// retried after its commit) records nothing new and answers the same
// deliveries.
func TestEmitEventTwice(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "emit@x.io")
		ep := &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/a",
			Events: models.StringList{"*"}, Secret: "whsec_dGVzdA==", Active: true}
		if err := st.CreateWebhookEndpoint(ctx, ep); err != nil {
			t.Fatal(err)
		}
		spec := models.EventSpec{Type: "checkout.expired", Key: "checkout.expired:s1", Data: map[string]any{"livemode": false}}
		first, err := st.EmitEvent(ctx, m.ID, models.ModeTest, spec)
		if err != nil || len(first) != 1 {
			t.Fatalf("first: %v %v", first, err)
		}
		again, err := st.EmitEvent(ctx, m.ID, models.ModeTest, spec)
		if err != nil || len(again) != 1 || again[0] != first[0] {
			t.Fatalf("again: %v %v", again, err)
		}
	})
}

// TestOpenPathWithHash: a database path holding '#' (the temp dir of a
// repeated subtest, "name#01") opens that very file, not a truncated path.
func TestOpenPathWithHash(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a#01?b")
	path := filepath.Join(dir, "paygate.db")
	st, err := models.Open(models.Options{SQLitePath: path})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at %s: %v", path, err)
	}
}
