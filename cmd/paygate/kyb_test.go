package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
)

// TestKYBReviewCommand runs `paygate kyb approve|reject` as an operator
// would, on the embedded store, and checks the merchant's status and the
// stored notification.
func TestKYBReviewCommand(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PAYGATE_DATA_DIR", dir)
	t.Setenv("DATABASE_URL", "")
	t.Setenv("SMTP_HOST", "")
	st := embeddedStore(t, dir)
	ctx := context.Background()
	mk := func(email string, confirmed bool) string {
		m := &models.Merchant{Email: email, PasswordHash: "x", BusinessName: "Shop"}
		if confirmed {
			at := time.Now()
			m.EmailConfirmedAt = &at
		}
		if _, err := st.CreateMerchant(ctx, m, &models.DashboardSession{TokenHash: "s" + email}, models.NewKey{Hash: "k" + email, Type: models.ModeTest}); err != nil {
			t.Fatal(err)
		}
		if err := st.SubmitKYB(ctx, &models.KYBApplication{MerchantID: m.ID, BusinessName: "Shop", BusinessType: "llc",
			Country: "US", ContactName: "A", ContactEmail: email}); err != nil {
			t.Fatal(err)
		}
		return m.ID
	}
	approved, rejected, unconfirmed := mk("a@example.com", true), mk("b@example.com", true), mk("c@example.com", false)
	// An account whose address is not confirmed is not approved (this
	// server e-mails, to the log: it confirms addresses).
	rev := func(id string) string {
		t.Helper()
		app, err := st.KYB(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return app.Revision()
	}
	if err := run(ctx, []string{"kyb", "approve", unconfirmed, "--revision", rev(unconfirmed)}); err == nil || !strings.Contains(err.Error(), "not confirmed") {
		t.Fatalf("an unconfirmed account approved: %v", err)
	}
	if m, _ := st.Merchant(ctx, unconfirmed); m.KYBStatus != models.KYBPending {
		t.Fatalf("the refused approval left %s", m.KYBStatus)
	}
	// An approval names the revision the operator read: without one it
	// is refused, and one the merchant edited since is not approved.
	var ue usageError
	if err := run(ctx, []string{"kyb", "approve", approved}); err == nil || !asUsage(err, &ue) {
		t.Fatalf("an approval without the revision: %v", err)
	}
	if err := run(ctx, []string{"kyb", "show", approved}); err != nil {
		t.Fatal(err)
	}
	read := rev(approved)
	time.Sleep(2 * time.Millisecond)
	if _, err := st.UpdateKYB(ctx, approved, map[string]any{"country": "KP", "updated_at": time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"kyb", "approve", approved, "--revision", read}); err == nil || !strings.Contains(err.Error(), "edited since") {
		t.Fatalf("an edited application approved: %v", err)
	}
	if m, _ := st.Merchant(ctx, approved); m.KYBStatus != models.KYBPending {
		t.Fatalf("the refused approval left %s", m.KYBStatus)
	}
	if err := run(ctx, []string{"kyb", "approve", approved, "--revision=" + rev(approved)}); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"kyb", "reject", rejected, "registration", "number", "unreadable"}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{approved: models.KYBApproved, rejected: models.KYBRejected} {
		m, _ := st.Merchant(ctx, id)
		if m.KYBStatus != want {
			t.Fatalf("merchant %s is %s, want %s", id, m.KYBStatus, want)
		}
		notes, _ := st.Notifications(ctx, id)
		if len(notes) != 1 || notes[0].Kind != "kyb.reviewed" || notes[0].EmailedAt != nil {
			t.Fatalf("notification of %s: %+v", id, notes)
		}
	}
	notes, _ := st.Notifications(ctx, rejected)
	if !strings.Contains(notes[0].Body, "registration number unreadable") {
		t.Fatalf("the reviewer's note must reach the merchant: %q", notes[0].Body)
	}
	// A second decision, an unknown merchant and bad usage are refused.
	if err := run(ctx, []string{"kyb", "reject", approved}); err == nil {
		t.Fatal("a reviewed application was reviewed again")
	}
	if err := run(ctx, []string{"kyb", "approve", models.NewID(), "--revision", "x"}); err == nil {
		t.Fatal("unknown merchant accepted")
	}
	if err := run(ctx, []string{"kyb", "maybe", approved}); err == nil || !asUsage(err, &ue) {
		t.Fatalf("bad usage: %v", err)
	}
}

func asUsage(err error, ue *usageError) bool {
	u, ok := err.(usageError)
	if ok {
		*ue = u
	}
	return ok
}

func TestPoolFromEnv(t *testing.T) {
	env := map[string]string{"DB_MAX_OPEN_CONNS": "64", "DB_CONN_MAX_LIFETIME": "10m"}
	p, err := poolFromEnv(func(k string) string { return env[k] })
	if err != nil || p.MaxOpen != 64 || p.MaxLifetime != 10*time.Minute || p.MaxIdle != 0 {
		t.Fatalf("%+v %v", p, err)
	}
	for k, v := range map[string]string{"DB_MAX_IDLE_CONNS": "-1", "DB_CONN_MAX_IDLE_TIME": "soon"} {
		if _, err := poolFromEnv(func(n string) string {
			if n == k {
				return v
			}
			return ""
		}); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v", k, v, err)
		}
	}
}
