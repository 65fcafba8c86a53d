package models_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/keyring"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/webhook"
)

const rotatedSecret = "rotated-server-secret-rotated-server-secret"

func ring(t *testing.T, current string, previous ...string) *keyring.Ring {
	t.Helper()
	r, err := keyring.New(keyring.PurposeWebhookSecret, current, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rawSecret reads the two secret columns as they are on disk.
func rawSecret(t *testing.T, st *models.Store, id string) (clear, sealed string) {
	t.Helper()
	var row struct {
		Secret       string
		SecretSealed *string
	}
	if err := st.DB().Table("webhook_endpoints").Select("secret, secret_sealed").Where("id = ?", id).Take(&row).Error; err != nil {
		t.Fatal(err)
	}
	if row.SecretSealed != nil {
		sealed = *row.SecretSealed
	}
	return row.Secret, sealed
}

func newEndpoint(t *testing.T, st *models.Store, merchantID string) (*models.WebhookEndpoint, string) {
	t.Helper()
	secret, _ := webhook.NewSecret()
	ep := &models.WebhookEndpoint{MerchantID: merchantID, Mode: models.ModeTest, URL: "https://hooks.example.com/" + models.NewID(),
		Events: models.StringList{"checkout.completed"}, Secret: secret}
	if err := st.CreateWebhookEndpoint(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	return ep, secret
}

// TestWebhookSecretsEncryptedAtRest: a created or rotated secret is on disk
// only sealed (AES-GCM under the server secret's derived key), never in
// clear; it opens for its own endpoint only; the rotation's answer still
// carries the new secret once.
func TestWebhookSecretsEncryptedAtRest(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "sealed@example.com")
		ep, secret := newEndpoint(t, st, m.ID)
		clear, sealed := rawSecret(t, st, ep.ID)
		key := strings.TrimPrefix(secret, "whsec_")
		if clear != "" || !keyring.IsSealed(sealed) || strings.Contains(sealed, key) {
			t.Fatalf("on disk: clear %q, sealed %q", clear, sealed)
		}
		if got, err := st.EndpointSecret(ctx, ep.ID); err != nil || got != secret {
			t.Fatalf("EndpointSecret: %q %v", got, err)
		}
		if read, _ := st.WebhookEndpoint(ctx, m.ID, ep.ID); read.Secret != "" {
			t.Fatal("a plain read opened the secret")
		}
		// A sealed secret copied onto another endpoint does not open there.
		other, _ := newEndpoint(t, st, m.ID)
		if err := st.DB().Table("webhook_endpoints").Where("id = ?", other.ID).Update("secret_sealed", sealed).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := st.EndpointSecret(ctx, other.ID); !errors.Is(err, keyring.ErrDecrypt) {
			t.Fatalf("a secret moved to another row opened: %v", err)
		}

		next, _ := webhook.NewSecret()
		rot, err := st.RotateWebhookSecret(ctx, m.ID, ep.ID, next, 0)
		if err != nil || rot.Secret != next {
			t.Fatalf("rotation answer: %+v %v", rot, err)
		}
		clear, sealed = rawSecret(t, st, ep.ID)
		if clear != "" || strings.Contains(sealed, strings.TrimPrefix(next, "whsec_")) {
			t.Fatalf("rotated secret on disk: %q %q", clear, sealed)
		}
		if got, _ := st.EndpointSecret(ctx, ep.ID); got != next {
			t.Fatalf("rotated secret opens as %q", got)
		}
		// Without a keyring nothing is created in clear instead.
		bare := st.WithSecrets(nil)
		if err := bare.CreateWebhookEndpoint(ctx, &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest,
			URL: "https://x.example.com", Events: models.StringList{"checkout.completed"}, Secret: secret}); err == nil {
			t.Fatal("an endpoint was created without a keyring")
		}
	})
}

// TestWebhookSecretMigration rewinds a store to the schema before migration
// 20261123_0005 (no secret_sealed column, secrets in clear, one of them on a
// deleted endpoint) and migrates again: every secret is sealed and the clear
// column emptied; a second run changes nothing; a store without a keyring
// refuses to migrate secrets in clear rather than skip them.
func TestWebhookSecretMigration(t *testing.T) {
	const id = "20261123_0005_webhook_secret_encryption"
	found := false
	for _, m := range models.MigrationIDs() {
		found = found || m == id
	}
	if !found {
		t.Fatalf("migration %s is not in the list %v", id, models.MigrationIDs())
	}
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "migrate@example.com")
		eps := map[string]string{}
		for i := 0; i < 3; i++ {
			ep, secret := newEndpoint(t, st, m.ID)
			eps[ep.ID] = secret
		}
		var deleted string
		for id := range eps {
			deleted = id
			break
		}
		if err := st.DeleteWebhookEndpoint(ctx, m.ID, deleted); err != nil {
			t.Fatal(err)
		}
		db := st.DB()
		for id, secret := range eps {
			if err := db.Table("webhook_endpoints").Where("id = ?", id).Update("secret", secret).Error; err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Migrator().DropColumn(&models.WebhookEndpoint{}, "SecretSealed"); err != nil {
			t.Fatal(err)
		}
		if err := db.Exec("DELETE FROM schema_migrations WHERE id = ?", id).Error; err != nil {
			t.Fatal(err)
		}

		if err := st.WithSecrets(nil).Migrate(); err == nil || !strings.Contains(err.Error(), "no keyring") {
			t.Fatalf("migration without a keyring over secrets in clear: %v", err)
		}
		// The clear column of databases made before the migration has no
		// default: the store must keep writing it ("") on every insert.
		if st.Dialect() == "postgres" {
			if err := db.Exec("ALTER TABLE webhook_endpoints ALTER COLUMN secret DROP DEFAULT").Error; err != nil {
				t.Fatal(err)
			}
		}
		for round := 1; round <= 2; round++ {
			if err := st.Migrate(); err != nil {
				t.Fatalf("migrate (round %d): %v", round, err)
			}
			for id, secret := range eps {
				clear, sealed := rawSecret(t, st, id)
				if clear != "" || !keyring.IsSealed(sealed) || strings.Contains(sealed, strings.TrimPrefix(secret, "whsec_")) {
					t.Fatalf("round %d, endpoint %s: clear %q sealed %q", round, id, clear, sealed)
				}
				if got, err := st.EndpointSecret(ctx, id); id != deleted && (err != nil || got != secret) {
					t.Fatalf("round %d, endpoint %s opens as %q %v", round, id, got, err)
				}
			}
		}
		// Endpoints made after the migration are stored sealed too.
		ep, secret := newEndpoint(t, st, m.ID)
		if clear, sealed := rawSecret(t, st, ep.ID); clear != "" || !keyring.IsSealed(sealed) {
			t.Fatalf("new endpoint on a migrated database: %q %q", clear, sealed)
		}
		if got, err := st.EndpointSecret(ctx, ep.ID); err != nil || got != secret {
			t.Fatalf("new endpoint opens as %q %v", got, err)
		}
	})
}

// TestWebhookSecretKeyRotation: after PAYGATE_SECRET_KEY is rotated (the
// old one kept in PAYGATE_SECRET_KEY_PREVIOUS), secrets sealed under the old
// key still open; the first delivery to an endpoint seals its secret again
// under the new key (lazily), ResealWebhookSecrets (`paygate secrets rotate`)
// does the rest; afterwards the new key alone opens everything, while
// without the previous key an un-resealed secret is refused, not guessed.
func TestWebhookSecretKeyRotation(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, old *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, old, "rotate@example.com")
		lazy, lazySecret := newEndpoint(t, old, m.ID)
		batch, batchSecret := newEndpoint(t, old, m.ID)
		ids, err := old.EmitEvent(ctx, m.ID, models.ModeTest, models.EventSpec{Type: "checkout.completed",
			Key: "k:" + models.NewID(), Data: map[string]any{"livemode": false}})
		if err != nil || len(ids) != 2 {
			t.Fatalf("emit: %v %v", ids, err)
		}
		newOnly := old.WithSecrets(ring(t, rotatedSecret))
		if _, err := newOnly.EndpointSecret(ctx, lazy.ID); !errors.Is(err, keyring.ErrUnknownKey) {
			t.Fatalf("the new key alone opened an old secret: %v", err)
		}
		rotating := old.WithSecrets(ring(t, rotatedSecret, storetest.Secret))
		newID := ring(t, rotatedSecret).CurrentKeyID()

		// A delivery to the lazy endpoint opens and re-seals its secret.
		for _, id := range ids {
			tgt, err := rotating.DeliveryTarget(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if tgt.Secret != lazySecret && tgt.Secret != batchSecret {
				t.Fatalf("delivery target secret %q", tgt.Secret)
			}
			break // only the first: one endpoint is left for the batch
		}
		resealed := 0
		for _, id := range []string{lazy.ID, batch.ID} {
			if _, sealed := rawSecret(t, old, id); strings.HasPrefix(sealed, "pgs1."+newID+".") {
				resealed++
			}
		}
		if resealed != 1 {
			t.Fatalf("%d secrets re-sealed by the delivery, want 1", resealed)
		}

		res, err := rotating.ResealWebhookSecrets(ctx)
		if err != nil || res.Endpoints != 2 || res.Resealed != 1 || res.Current != 1 {
			t.Fatalf("reseal: %+v %v", res, err)
		}
		if res, _ := rotating.ResealWebhookSecrets(ctx); res.Resealed != 0 || res.Current != 2 {
			t.Fatalf("second reseal: %+v", res)
		}
		for id, want := range map[string]string{lazy.ID: lazySecret, batch.ID: batchSecret} {
			if got, err := newOnly.EndpointSecret(ctx, id); err != nil || got != want {
				t.Fatalf("after rotation, endpoint %s opens as %q %v", id, got, err)
			}
		}
	})
}

// TestRotationKeepsThePreviousSecret: a rotation asked to keep the replaced
// secret signs every attempt under both until the overlap ends; the kept
// secret is sealed on disk and opens as the previous one only; a second
// rotation replaces the kept one (two at most), one without overlap drops
// it (a leaked secret is revoked at once), and the reseal of a server key
// rotation covers it. The overlap is bounded.
func TestRotationKeepsThePreviousSecret(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
		st.SetClock(func() time.Time { return now })
		m := newMerchant(t, st, "overlap@example.com")
		ep, first := newEndpoint(t, st, m.ID)
		ids, err := st.EmitEvent(ctx, m.ID, models.ModeTest, models.EventSpec{Type: "checkout.completed",
			Key: "k:" + models.NewID(), Data: map[string]any{"livemode": false}})
		if err != nil || len(ids) != 1 {
			t.Fatalf("emit: %v %v", ids, err)
		}
		signing := func() (current, previous string) {
			t.Helper()
			tgt, err := st.DeliveryTarget(ctx, ids[0])
			if err != nil {
				t.Fatal(err)
			}
			return tgt.Secret, tgt.PreviousSecret
		}
		rotate := func(overlap time.Duration) string {
			t.Helper()
			next, _ := webhook.NewSecret()
			rot, err := st.RotateWebhookSecret(ctx, m.ID, ep.ID, next, overlap)
			if err != nil || rot.Secret != next {
				t.Fatalf("rotation answer: %+v %v", rot, err)
			}
			if overlap > 0 && (rot.PreviousSecretUntil == nil || !rot.PreviousSecretUntil.Equal(now.Add(overlap))) {
				t.Fatalf("kept until %v, want %v", rot.PreviousSecretUntil, now.Add(overlap))
			}
			return next
		}

		second := rotate(24 * time.Hour)
		if cur, prev := signing(); cur != second || prev != first {
			t.Fatalf("in the overlap: signing with %q and %q, want the new and the replaced secret", cur, prev)
		}
		var kept string
		if err := st.DB().Table("webhook_endpoints").Select("previous_secret_sealed").Where("id = ?", ep.ID).Scan(&kept).Error; err != nil {
			t.Fatal(err)
		}
		if !keyring.IsSealed(kept) || strings.Contains(kept, strings.TrimPrefix(first, "whsec_")) {
			t.Fatalf("kept secret on disk: %q", kept)
		}
		// Copied over the current column, it does not open there.
		other, _ := newEndpoint(t, st, m.ID)
		if err := st.DB().Table("webhook_endpoints").Where("id = ?", other.ID).Update("secret_sealed", kept).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := st.EndpointSecret(ctx, other.ID); !errors.Is(err, keyring.ErrDecrypt) {
			t.Fatalf("a kept secret opened as an endpoint's current one: %v", err)
		}
		if err := st.DB().Unscoped().Delete(&models.WebhookEndpoint{}, "id = ?", other.ID).Error; err != nil {
			t.Fatal(err)
		}

		// A second rotation in the overlap keeps the secret it replaced.
		third := rotate(time.Hour)
		if cur, prev := signing(); cur != third || prev != second {
			t.Fatalf("after a second rotation: %q and %q, want the third and the second secret", cur, prev)
		}
		// The overlap ends.
		now = now.Add(time.Hour)
		if cur, prev := signing(); cur != third || prev != "" {
			t.Fatalf("after the overlap: %q and %q, want the third secret alone", cur, prev)
		}
		if read, _ := st.WebhookEndpoint(ctx, m.ID, ep.ID); read.PreviousSecretUntil == nil {
			t.Fatal("the expired overlap was dropped by a read")
		}

		// A rotation without overlap drops a kept secret at once.
		fourth := rotate(2 * time.Hour)
		fifth := rotate(0)
		if cur, prev := signing(); cur != fifth || prev != "" {
			t.Fatalf("after a rotation without overlap: %q and %q (the fourth was %q)", cur, prev, fourth)
		}
		if read, _ := st.WebhookEndpoint(ctx, m.ID, ep.ID); read.PreviousSecretSealed != "" || read.PreviousSecretUntil != nil {
			t.Fatalf("a rotation without overlap kept %+v", read)
		}

		// The server key rotates within an overlap: the reseal covers the
		// kept secret, and the new key alone then opens both.
		sixth := rotate(48 * time.Hour)
		rotating := st.WithSecrets(ring(t, rotatedSecret, storetest.Secret))
		res, err := rotating.ResealWebhookSecrets(ctx)
		if err != nil || res.Endpoints != 1 || res.Resealed != 2 || res.Current != 0 {
			t.Fatalf("reseal of the current and the kept secret: %+v %v", res, err)
		}
		if res, err := rotating.ResealWebhookSecrets(ctx); err != nil || res.Resealed != 0 || res.Current != 1 {
			t.Fatalf("second reseal: %+v %v", res, err)
		}
		newOnly := st.WithSecrets(ring(t, rotatedSecret))
		tgt, err := newOnly.DeliveryTarget(ctx, ids[0])
		if err != nil || tgt.Secret != sixth || tgt.PreviousSecret != fifth {
			t.Fatalf("after the reseal, the new key alone: %q and %q, %v", tgt.Secret, tgt.PreviousSecret, err)
		}

		for _, bad := range []time.Duration{-time.Second, models.MaxSecretOverlap + time.Second} {
			if _, err := st.RotateWebhookSecret(ctx, m.ID, ep.ID, first, bad); err == nil {
				t.Fatalf("an overlap of %s was taken", bad)
			}
		}
		if _, err := st.RotateWebhookSecret(ctx, "another-merchant", ep.ID, first, time.Hour); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("another merchant's rotation: %v", err)
		}
	})
}

// TestIdempotentAnswerKeyRotation: a stored idempotent answer is sealed
// under the server secret. After a rotation, `paygate secrets rotate`
// (ResealIdempotentAnswers) seals it again under the new one, so a retry
// with the key is still answered once the previous secret is dropped;
// one never sealed again is a 409 state (IdemUnreadable), not a server
// error on every retry for a day, and not run again.
func TestIdempotentAnswerKeyRotation(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, old *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, old, "idem-rotate@example.com")
		answer := func(key string) {
			state, rec, err := old.BeginIdempotent(ctx, m.ID, "test", key, "hash-"+key)
			if err != nil || state != models.IdemNew {
				t.Fatalf("begin %s: %s %v", key, state, err)
			}
			if err := old.FinishIdempotent(ctx, rec, 201, `{"id":"`+key+`"}`); err != nil {
				t.Fatal(err)
			}
		}
		answer("kept")
		answer("lost")
		newOnly := old.WithSecrets(ring(t, rotatedSecret))
		if state, _, err := newOnly.BeginIdempotent(ctx, m.ID, "test", "lost", "hash-lost"); err != nil || state != models.IdemUnreadable {
			t.Fatalf("an answer under a dropped secret: %s %v, want unreadable", state, err)
		}
		rotating := old.WithSecrets(ring(t, rotatedSecret, storetest.Secret))
		res, err := rotating.ResealIdempotentAnswers(ctx)
		if err != nil || res.Stored != 2 || res.Resealed != 2 || res.Current != 0 {
			t.Fatalf("reseal: %+v %v", res, err)
		}
		if res, err := rotating.ResealIdempotentAnswers(ctx); err != nil || res.Resealed != 0 || res.Current != 2 {
			t.Fatalf("second reseal: %+v %v", res, err)
		}
		state, rec, err := newOnly.BeginIdempotent(ctx, m.ID, "test", "kept", "hash-kept")
		if err != nil || state != models.IdemReplay || rec.ResponseBody != `{"id":"kept"}` || rec.ResponseStatus != 201 {
			t.Fatalf("after the rotation: %s %+v %v", state, rec, err)
		}
	})
}

// TestUnopenedSecretFailsItsAttempts: an endpoint whose secret the
// server's keys do not open (PAYGATE_SECRET_KEY changed without the old one
// kept) gives its deliveries a target that says so, to record as failed
// attempts (before, a store error: never recorded, retried for ever); a
// rotation with an overlap mends it, keeping no previous secret (before, a
// 500: only a rotation without overlap did).
func TestUnopenedSecretFailsItsAttempts(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := newMerchant(t, st, "unopened@example.com")
		ep, _ := newEndpoint(t, st, m.ID)
		ids, err := st.EmitEvent(ctx, m.ID, models.ModeTest, models.EventSpec{Type: "checkout.completed",
			Key: "k:" + models.NewID(), Data: map[string]any{"livemode": false}})
		if err != nil || len(ids) != 1 {
			t.Fatalf("emit: %v %v", ids, err)
		}
		storetest.Exec(t, st, "UPDATE webhook_endpoints SET secret_sealed = 'v1.k0.garbage' WHERE id = ?", ep.ID)
		tgt, err := st.DeliveryTarget(ctx, ids[0])
		if err != nil || tgt.Secret != "" || !strings.Contains(tgt.Unsigned, "cannot be opened") || len(tgt.Body) == 0 {
			t.Fatalf("target of an unopened secret: %+v %v", tgt, err)
		}
		next, _ := webhook.NewSecret()
		rot, err := st.RotateWebhookSecret(ctx, m.ID, ep.ID, next, 24*time.Hour)
		if err != nil || rot.Secret != next || rot.PreviousSecretUntil != nil {
			t.Fatalf("rotation with an overlap: %+v %v", rot, err)
		}
		if tgt, err = st.DeliveryTarget(ctx, ids[0]); err != nil || tgt.Secret != next || tgt.Unsigned != "" || tgt.PreviousSecret != "" {
			t.Fatalf("after the rotation: %+v %v", tgt, err)
		}
	})
}
