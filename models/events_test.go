package models_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
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
		// A second subscriber, one of another event and a live one: the
		// event goes to the two test endpoints that subscribe to it.
		for _, e := range []*models.WebhookEndpoint{
			{MerchantID: m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/b", Events: models.StringList{"checkout.expired"}},
			{MerchantID: m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/c", Events: models.StringList{"checkout.completed"}},
			{MerchantID: m.ID, Mode: models.ModeLive, URL: "https://hooks.example.com/d", Events: models.StringList{"*"}},
		} {
			e.Secret = "whsec_dGVzdA=="
			if err := st.CreateWebhookEndpoint(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		spec := models.EventSpec{Type: "checkout.expired", Key: "checkout.expired:s1", Data: map[string]any{"livemode": false}}
		first, err := st.EmitEvent(ctx, m.ID, models.ModeTest, spec)
		if err != nil || len(first) != 2 || first[0] >= first[1] {
			t.Fatalf("first: %v %v (two deliveries in id order)", first, err)
		}
		again, err := st.EmitEvent(ctx, m.ID, models.ModeTest, spec)
		if err != nil || !slices.Equal(again, first) {
			t.Fatalf("again: %v %v, want %v", again, err, first)
		}
		// An endpoint made since gets its delivery when the event is
		// emitted again; the first two are kept.
		late := &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest, URL: "https://hooks.example.com/e",
			Events: models.StringList{"*"}, Secret: "whsec_dGVzdA=="}
		if err := st.CreateWebhookEndpoint(ctx, late); err != nil {
			t.Fatal(err)
		}
		third, err := st.EmitEvent(ctx, m.ID, models.ModeTest, spec)
		if err != nil || len(third) != 3 || !slices.IsSorted(third) || !slices.Contains(third, first[0]) || !slices.Contains(third, first[1]) {
			t.Fatalf("after a new endpoint: %v %v (first %v)", third, err, first)
		}
		for _, id := range third {
			d, err := st.WebhookDelivery(ctx, id)
			if err != nil || d.Event != "checkout.expired" || d.Mode != models.ModeTest || d.Status != models.DeliveryPending || len(d.Payload) == 0 {
				t.Fatalf("delivery %s: %+v %v", id, d, err)
			}
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
