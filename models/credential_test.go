package models_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestWritesAfterTheCredentialEnded: a request admitted with a session or
// a key whose write comes after a password reset took the account back
// (the session ended, the key revoked) writes nothing: no key, wallet,
// webhook endpoint or wallet proof of a stranger's lands after the
// reclaim. While the credential holds, the same writes land.
func TestWritesAfterTheCredentialEnded(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		m := &models.Merchant{Email: "held@example.com", PasswordHash: "x", BusinessName: "Shop"}
		sess := &models.DashboardSession{TokenHash: "sess-held", ExpiresAt: time.Now().Add(time.Hour)}
		key, err := st.CreateMerchant(ctx, m, sess, models.NewKey{Hash: "key-held", Prefix: "p", Suffix: "s", Type: models.ModeTest})
		if err != nil {
			t.Fatal(err)
		}
		asSession := models.WithCredential(ctx, models.Credential{SessionID: sess.ID})
		asKey := models.WithCredential(ctx, models.Credential{KeyID: key.ID})
		checked := m.PasswordHash
		writes := map[string]func(context.Context) error{
			"api key": func(ctx context.Context) error {
				_, err := st.ReplaceAPIKey(ctx, m.ID, models.NewKey{Hash: "key-" + models.NewID(), Prefix: "p", Suffix: "s", Type: models.ModeTest})
				return err
			},
			"wallet": func(ctx context.Context) error {
				w := "0x52908400098527886E0F7030069857D2E4169EE7"
				_, err := st.UpdateMerchant(ctx, m.ID, models.MerchantUpdate{WalletEVM: &w})
				return err
			},
			"endpoint": func(ctx context.Context) error {
				return st.RegisterWebhookEndpoint(ctx, &models.WebhookEndpoint{MerchantID: m.ID, Mode: models.ModeTest,
					URL: "https://hooks.example.com/" + models.NewID(), Events: models.StringList{"checkout.completed"},
					Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, 10)
			},
			"wallet proof": func(ctx context.Context) error {
				_, err := st.RecordWalletProof(ctx, &models.WalletProof{MerchantID: m.ID, Family: "evm",
					Address: "0x" + models.NewID()[:8] + "00000000000000000000000000000000", Message: "m", Signature: "s", ProvedAt: time.Now()}, 10)
				return err
			},
		}
		if err := writes["wallet"](asKey); err != nil {
			t.Fatalf("a write while the key holds: %v", err)
		}
		for name, write := range writes {
			if err := write(asSession); err != nil {
				t.Fatalf("%s while the session holds: %v", name, err)
			}
		}
		// The "api key" write replaced the key: the reset is to revoke the
		// current one.
		keys, err := st.APIKeys(ctx, m.ID)
		if err != nil || len(keys) != 1 || keys[0].ID == key.ID {
			t.Fatalf("keys before the reset: %+v %v", keys, err)
		}
		asKey = models.WithCredential(ctx, models.Credential{KeyID: keys[0].ID})
		if err := writes["wallet"](asKey); err != nil {
			t.Fatalf("a write while the current key holds: %v", err)
		}
		// No KYB application before the address is confirmed.
		kyb := func(ctx context.Context) error {
			return st.SubmitConfirmedKYB(ctx, &models.KYBApplication{MerchantID: m.ID, BusinessName: "Shop", BusinessType: "llc",
				Country: "US", ContactName: "A", ContactEmail: "a@example.com"})
		}
		if err := kyb(asSession); !errors.Is(err, models.ErrEmailUnconfirmed) {
			t.Fatalf("KYB of an unconfirmed account: %v", err)
		}
		if ok, err := st.CreatePasswordReset(ctx, m.ID, m.Email, "reset-held", time.Hour, 5); err != nil || !ok {
			t.Fatalf("reset link: %v %v", ok, err)
		}
		r, err := st.PasswordResetByHash(ctx, "reset-held")
		if err != nil {
			t.Fatal(err)
		}
		if _, took, err := st.ResetPassword(ctx, r.ID, "owner"); err != nil || !took.Any() {
			t.Fatalf("reset: %+v %v", took, err)
		}
		writes["kyb"] = kyb
		for name, write := range writes {
			for _, ctx := range []context.Context{asSession, asKey} {
				if err := write(ctx); !errors.Is(err, models.ErrCredentialEnded) {
					t.Fatalf("%s after the credential ended: %v", name, err)
				}
			}
		}
		if _, err := st.KYB(ctx, m.ID); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("a KYB application after the reclaim: %v", err)
		}
		// A sign-in whose (old) password was checked before the reset
		// committed opens no session after it.
		late := &models.DashboardSession{MerchantID: m.ID, TokenHash: "sess-late", ExpiresAt: time.Now().Add(time.Hour)}
		if err := st.SignIn(ctx, late, checked); !errors.Is(err, models.ErrPasswordChanged) {
			t.Fatalf("a sign-in with the password from before the reset: %v", err)
		}
		if open, err := st.OpenDashboardSessions(ctx, m.ID); err != nil || len(open) != 0 {
			t.Fatalf("sessions after the reset: %+v %v", open, err)
		}
		if keys, err := st.APIKeys(ctx, m.ID); err != nil || len(keys) != 0 {
			t.Fatalf("keys after the reclaim: %+v %v", keys, err)
		}
		if eps, err := st.WebhookEndpoints(ctx, models.Scope{MerchantID: m.ID, Mode: models.ModeTest}); err != nil || len(eps) != 0 {
			t.Fatalf("endpoints after the reclaim: %+v %v", eps, err)
		}
		if proofs, err := st.WalletProofs(ctx, m.ID); err != nil || len(proofs) != 0 {
			t.Fatalf("proofs after the reclaim: %+v %v", proofs, err)
		}
		if got, _ := st.Merchant(ctx, m.ID); got.WalletEVM != "" || got.EmailConfirmedAt == nil {
			t.Fatalf("merchant after the reclaim: %+v", got)
		}
		// A write with no credential noted (the operator's, a worker's) is
		// not held to one.
		if err := writes["wallet"](ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestConfirmAndResetAtOnce: an address confirmation and a password reset
// of the same account at once both take the merchant's row before the
// links' rows (PostgreSQL would otherwise find them deadlocked, a 500):
// each ends done, or not found when the other confirmed first.
func TestConfirmAndResetAtOnce(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		for i := range 15 {
			m, r := unconfirmedWithReset(t, st)
			if _, err := st.CreateEmailConfirmation(ctx, m.ID, m.Email, m.Email, "c-"+m.ID, time.Hour, 5); err != nil {
				t.Fatal(err)
			}
			c, err := st.EmailConfirmationByHash(ctx, "c-"+m.ID)
			if err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 2)
			go func() { _, err := st.ConfirmEmail(ctx, m.ID, c.ID); errs <- err }()
			go func() { _, _, err := st.ResetPassword(ctx, r.ID, "new"); errs <- err }()
			for range 2 {
				if err := <-errs; err != nil && !errors.Is(err, apperr.ErrNotFound) {
					t.Fatalf("round %d: %v", i, err)
				}
			}
			if got, _ := st.Merchant(ctx, m.ID); got.EmailConfirmedAt == nil || got.PasswordHash != "new" {
				t.Fatalf("round %d: %+v", i, got)
			}
		}
	})
}

// TestReviewAndResetAtOnce: an operator's KYB decision and a reset taking
// the account back (it withdraws the pending application) at once both take
// the merchant's row first: PostgreSQL found them deadlocked.
func TestReviewAndResetAtOnce(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		for i := range 15 {
			m, r := unconfirmedWithReset(t, st)
			if err := st.SubmitKYB(ctx, &models.KYBApplication{MerchantID: m.ID, BusinessName: "Shop", BusinessType: "llc",
				Country: "US", ContactName: "A", ContactEmail: "a@example.com"}); err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 2)
			go func() {
				_, err := st.ReviewKYB(ctx, m.ID, false, "no", "", &models.Notification{Kind: "kyb.reviewed", Subject: "s", Body: "b"})
				errs <- err
			}()
			go func() { _, _, err := st.ResetPassword(ctx, r.ID, "new"); errs <- err }()
			for range 2 {
				if err := <-errs; err != nil && !errors.Is(err, apperr.ErrNotFound) {
					t.Fatalf("round %d: %v", i, err)
				}
			}
		}
	})
}

// unconfirmedWithReset is a new merchant whose address is not confirmed,
// with a signed-in session and a reset link.
func unconfirmedWithReset(t *testing.T, st *models.Store) (*models.Merchant, *models.PasswordReset) {
	t.Helper()
	ctx := context.Background()
	id := models.NewID()
	m := &models.Merchant{Email: id + "@example.com", PasswordHash: "x", BusinessName: "Shop"}
	if _, err := st.CreateMerchant(ctx, m, &models.DashboardSession{TokenHash: "s-" + id, ExpiresAt: time.Now().Add(time.Hour)},
		models.NewKey{Hash: "k-" + id, Prefix: "p", Suffix: "s", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreatePasswordReset(ctx, m.ID, m.Email, "r-"+id, time.Hour, 5); err != nil {
		t.Fatal(err)
	}
	r, err := st.PasswordResetByHash(ctx, "r-"+id)
	if err != nil {
		t.Fatal(err)
	}
	return m, r
}
