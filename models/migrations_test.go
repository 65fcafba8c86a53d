package models

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/keyring"

	"github.com/paygate/paygate/money"
)

// TestRefundsMigrationUpgrades: a database migrated before the refunds
// (no refunds table, no refund columns, 0006 not recorded) is moved forward
// by 20261123_0006_refunds, keeping its rows, and refunds work on it.
func TestRefundsMigrationUpgrades(t *testing.T) {
	onFreshStores(t, testRefundsUpgrade)
}

// onFreshStores runs an upgrade test on a new SQLite file and on a new
// PostgreSQL schema.
func onFreshStores(t *testing.T, upgrade func(*testing.T, *Store)) {
	t.Run("sqlite", func(t *testing.T) {
		st, err := Open(Options{SQLitePath: filepath.Join(t.TempDir(), "old.db")})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		upgrade(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		st, err := Open(Options{DatabaseURL: freshPostgresSchema(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		upgrade(t, st)
	})
}

// freshPostgresSchema is storetest.PostgresURL, which this package's own
// tests cannot import (storetest imports models): a new schema on the test
// server, dropped at cleanup; skipped when the server is unreachable unless
// PAYGATE_REQUIRE_POSTGRES=1.
func freshPostgresSchema(t *testing.T) string {
	t.Helper()
	base := os.Getenv("PAYGATE_TEST_DATABASE_URL")
	if base == "" {
		base = os.Getenv("DATABASE_URL")
	}
	if base == "" {
		if os.Getenv("PAYGATE_REQUIRE_POSTGRES") != "1" {
			t.Skip("no DATABASE_URL: PostgreSQL not tested")
		}
		base = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		if os.Getenv("PAYGATE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("PostgreSQL is required but unreachable: %v", err)
		}
		t.Skipf("PostgreSQL unreachable: %v", err)
	}
	defer conn.Close(ctx)
	schema := "t_" + strings.ReplaceAll(NewID(), "-", "")[:20]
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, base); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
			c.Close(ctx)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func testRefundsUpgrade(t *testing.T, st *Store) {
	if err := st.Migrate(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := &Merchant{Email: "old@example.com", PasswordHash: "x", BusinessName: "Old"}
	if _, err := st.CreateMerchant(ctx, m, &DashboardSession{TokenHash: "s"}, NewKey{Hash: "k", Type: ModeTest}); err != nil {
		t.Fatal(err)
	}
	tx := &Transaction{MerchantID: m.ID, Mode: ModeTest, Amount: money.FromCents(1000), Token: "USDC", Network: "base_sepolia",
		TxHash: "0xold", WalletAddress: "0x2222222222222222222222222222222222222222",
		MerchantWalletAddress: "0x1111111111111111111111111111111111111111", Verification: VerificationVerified}
	if err := st.RecordTransaction(ctx, tx); err != nil {
		t.Fatal(err)
	}
	// Back to the schema of 20261123_0002.
	mig := st.db.Migrator()
	if err := mig.DropTable(&Refund{}); err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"RefundedAmount", "RefundReserved"} {
		if err := mig.DropColumn(&Transaction{}, col); err != nil {
			t.Fatal(err)
		}
	}
	if err := mig.DropColumn(&Merchant{}, "RefundsEnabled"); err != nil {
		t.Fatal(err)
	}
	if err := st.db.Exec("DELETE FROM schema_migrations WHERE id = ?", "20261123_0006_refunds").Error; err != nil {
		t.Fatal(err)
	}
	if mig.HasTable(&Refund{}) || mig.HasColumn(&Transaction{}, "RefundReserved") {
		t.Fatal("the old schema still has refunds")
	}

	if err := st.Migrate(); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if !mig.HasTable(&Refund{}) || !mig.HasIndex(&Refund{}, "idx_refund_merchant_network_hash") ||
		!mig.HasColumn(&Transaction{}, "RefundedAmount") || !mig.HasColumn(&Merchant{}, "RefundsEnabled") {
		t.Fatal("the upgrade did not add the refunds schema")
	}
	got, err := st.Transaction(ctx, Scope{MerchantID: m.ID, Mode: ModeTest}, tx.ID)
	if err != nil || got.RefundReserved != 0 || got.RefundedAmount != 0 || got.Amount != tx.Amount {
		t.Fatalf("old transaction after the upgrade: %+v %v", got, err)
	}
	r, err := st.CreateRefund(ctx, RefundRequest{Scope: Scope{MerchantID: m.ID, Mode: ModeTest}, TransactionID: tx.ID,
		InitiatedBy: InitiatedByAPI, Window: time.Hour})
	if err != nil || r.Amount != tx.Amount {
		t.Fatalf("refund after the upgrade: %+v %v", r, err)
	}
	if err := st.Migrate(); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
}

// TestSettlementHashMigration: a database whose payout hashes were unique
// across merchants (before 20261126_0010) is moved to hashes unique per
// merchant: two merchants may record one hash, one merchant not twice.
func TestSettlementHashMigration(t *testing.T) {
	onFreshStores(t, testSettlementHashUpgrade)
}

func testSettlementHashUpgrade(t *testing.T, st *Store) {
	if err := st.Migrate(); err != nil {
		t.Fatal(err)
	}
	// Back to the schema before 20261126_0010.
	mig := st.db.Migrator()
	if err := mig.DropIndex(&Settlement{}, "idx_settlement_merchant_hash"); err != nil {
		t.Fatal(err)
	}
	if err := st.db.Exec("CREATE UNIQUE INDEX idx_settlement_hash ON settlements (network, tx_hash)").Error; err != nil {
		t.Fatal(err)
	}
	if err := st.db.Exec("DELETE FROM schema_migrations WHERE id = ?", "20261126_0010_settlement_hash_per_merchant").Error; err != nil {
		t.Fatal(err)
	}
	payout := func(merchant string) error {
		return st.db.Create(&Settlement{ID: NewID(), MerchantID: merchant, Mode: ModeLive, Amount: money.FromCents(100), Token: "USDC",
			Network: "base", DestinationWallet: "0x1111111111111111111111111111111111111111", TxHash: "0xpayout", Status: "completed"}).Error
	}
	if err := payout("m1"); err != nil {
		t.Fatal(err)
	}
	if payout("m2") == nil {
		t.Fatal("the old schema took one hash for two merchants")
	}

	if err := st.Migrate(); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if mig.HasIndex(&Settlement{}, "idx_settlement_hash") || !mig.HasIndex(&Settlement{}, "idx_settlement_merchant_hash") {
		t.Fatal("the upgrade did not replace the index")
	}
	if err := payout("m2"); err != nil {
		t.Fatalf("another merchant's payout with the same hash: %v", err)
	}
	if payout("m1") == nil {
		t.Fatal("one merchant recorded one payout hash twice")
	}
}

// TestRefundWatchedUntilMigration: refunds failed TX_NOT_FOUND before
// 20261127_0014 whose message says they are still watched get the week
// from their failure as their watch's end (and stay replaceable and
// adoptable); an ended watch and other failures are not watched.
func TestRefundWatchedUntilMigration(t *testing.T) {
	onFreshStores(t, testRefundWatchedUntilUpgrade)
}

func testRefundWatchedUntilUpgrade(t *testing.T, st *Store) {
	if err := st.Migrate(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := &Merchant{Email: "watch@example.com", PasswordHash: "x", BusinessName: "Watch"}
	if _, err := st.CreateMerchant(ctx, m, &DashboardSession{TokenHash: "s"}, NewKey{Hash: "k", Type: ModeTest}); err != nil {
		t.Fatal(err)
	}
	tx := &Transaction{MerchantID: m.ID, Mode: ModeTest, Amount: money.FromCents(1000), Token: "USDC", Network: "base_sepolia",
		TxHash: "0xpaid", WalletAddress: "0x2222222222222222222222222222222222222222",
		MerchantWalletAddress: "0x1111111111111111111111111111111111111111", Verification: VerificationVerified}
	if err := st.RecordTransaction(ctx, tx); err != nil {
		t.Fatal(err)
	}
	failedAt := time.Now().Add(-24 * time.Hour).UTC().Truncate(time.Second)
	old := map[string]string{
		"watched": "refund transaction not found on base_sepolia within 1h0m0s; it is still watched until " + failedAt.Add(7*24*time.Hour).Format(time.RFC3339),
		"ended":   "refund transaction not found on base_sepolia within 1h0m0s, nor in the 168h0m0s after",
		"other":   "the refund transaction reverted on chain",
	}
	ids := map[string]string{}
	for i, name := range []string{"watched", "ended", "other"} {
		r, err := st.CreateRefund(ctx, RefundRequest{Scope: Scope{MerchantID: m.ID, Mode: ModeTest}, TransactionID: tx.ID,
			Amount: money.FromCents(100), InitiatedBy: InitiatedByAPI, Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		reason := ReasonTxNotFound
		if name == "other" {
			reason = "TX_REVERTED"
		}
		if err := st.db.Model(&Refund{}).Where("id = ?", r.ID).Updates(map[string]any{"status": RefundFailed, "tx_hash": "0xold" + string(rune('a'+i)),
			"failure_reason": reason, "failure_message": old[name], "failed_at": failedAt}).Error; err != nil {
			t.Fatal(err)
		}
		ids[name] = r.ID
	}
	// Back to the schema before 20261127_0014.
	mig := st.db.Migrator()
	if err := mig.DropColumn(&Refund{}, "WatchedUntil"); err != nil {
		t.Fatal(err)
	}
	if err := st.db.Exec("DELETE FROM schema_migrations WHERE id = ?", "20261127_0014_refund_watched_until").Error; err != nil {
		t.Fatal(err)
	}

	if err := st.Migrate(); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	for name, id := range ids {
		var r Refund
		if err := st.db.Where("id = ?", id).Take(&r).Error; err != nil {
			t.Fatal(err)
		}
		switch want := failedAt.Add(7 * 24 * time.Hour); {
		case name == "watched" && (r.WatchedUntil == nil || !r.WatchedUntil.Equal(want)):
			t.Fatalf("%s: watched until %v, want %v", name, r.WatchedUntil, want)
		case name != "watched" && r.WatchedUntil != nil:
			t.Fatalf("%s: watched until %v", name, r.WatchedUntil)
		}
	}
	// The watched one's transfer lands: it succeeds; the ended one's does
	// not change it.
	if fin, err := st.FinishLateRefund(ctx, RefundOutcome{RefundID: ids["watched"], Status: RefundSucceeded, TxHash: "0xolda", At: time.Now()}); err != nil ||
		fin.Status != RefundSucceeded {
		t.Fatalf("late landing of the watched one: %+v %v", fin, err)
	}
	if fin, err := st.FinishLateRefund(ctx, RefundOutcome{RefundID: ids["ended"], Status: RefundSucceeded, TxHash: "0xoldb", At: time.Now()}); err != nil ||
		fin.Status != RefundFailed {
		t.Fatalf("late landing after the watch ended: %+v %v", fin, err)
	}
	if err := st.Migrate(); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
}

// keyedMerchant gives a fresh store a keyring for webhook secrets,
// migrates it and signs up a merchant of email.
func keyedMerchant(t *testing.T, st *Store, email string) *Merchant {
	t.Helper()
	ring, err := keyring.New(keyring.PurposeWebhookSecret, "migration-test-server-secret-migration-test")
	if err != nil {
		t.Fatal(err)
	}
	st.secrets = ring
	if err := st.Migrate(); err != nil {
		t.Fatal(err)
	}
	m := &Merchant{Email: email, PasswordHash: "x", BusinessName: "Shop"}
	if _, err := st.CreateMerchant(context.Background(), m, &DashboardSession{TokenHash: "s"}, NewKey{Hash: "k", Type: ModeTest}); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDeliveryScheduledAttemptsMigration: deliveries from before
// 20261127_0015 count every recorded attempt as a schedule slot, as a
// resumed run did then.
func TestDeliveryScheduledAttemptsMigration(t *testing.T) {
	onFreshStores(t, testDeliveryScheduledAttemptsUpgrade)
}

func testDeliveryScheduledAttemptsUpgrade(t *testing.T, st *Store) {
	m := keyedMerchant(t, st, "slots@example.com")
	ctx := context.Background()
	if err := st.CreateWebhookEndpoint(ctx, &WebhookEndpoint{MerchantID: m.ID, Mode: ModeTest, URL: "https://example.com/hook",
		Events: StringList{"checkout.completed"}, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}); err != nil {
		t.Fatal(err)
	}
	ids, err := st.EmitEvent(ctx, m.ID, ModeTest, EventSpec{Type: "checkout.completed", Key: "k1", Data: map[string]any{"livemode": false}})
	if err != nil || len(ids) != 1 {
		t.Fatalf("emit: %v %v", ids, err)
	}
	// Back to the schema before 20261127_0015, with three attempts made.
	if err := st.db.Migrator().DropColumn(&WebhookDelivery{}, "ScheduledAttempts"); err != nil {
		t.Fatal(err)
	}
	if err := st.db.Exec("UPDATE webhook_deliveries SET attempts = 3 WHERE id = ?", ids[0]).Error; err != nil {
		t.Fatal(err)
	}
	if err := st.db.Exec("DELETE FROM schema_migrations WHERE id = ?", "20261127_0015_delivery_scheduled_attempts").Error; err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	d, err := st.WebhookDelivery(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if d.ScheduledAttempts != 3 {
		t.Fatalf("scheduled attempts %d after the upgrade, want the 3 attempts", d.ScheduledAttempts)
	}
}

// TestWebhookPreviousSecretMigration: a database from before
// 20261127_0017 gets the kept secret's columns, its endpoints keep signing
// with their one secret, and a rotation with overlap works on it.
func TestWebhookPreviousSecretMigration(t *testing.T) {
	onFreshStores(t, testWebhookPreviousSecretUpgrade)
}

func testWebhookPreviousSecretUpgrade(t *testing.T, st *Store) {
	m := keyedMerchant(t, st, "kept@example.com")
	ctx := context.Background()
	const first, second = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2Vjb25kLXNlY3JldC1zZWNvbmQtc2VjcmV0"
	ep := &WebhookEndpoint{MerchantID: m.ID, Mode: ModeTest, URL: "https://example.com/hook", Events: StringList{"checkout.completed"}, Secret: first}
	if err := st.CreateWebhookEndpoint(ctx, ep); err != nil {
		t.Fatal(err)
	}
	ids, err := st.EmitEvent(ctx, m.ID, ModeTest, EventSpec{Type: "checkout.completed", Key: "k1", Data: map[string]any{"livemode": false}})
	if err != nil || len(ids) != 1 {
		t.Fatalf("emit: %v %v", ids, err)
	}
	for _, col := range []string{"PreviousSecretSealed", "PreviousSecretUntil"} {
		if err := st.db.Migrator().DropColumn(&WebhookEndpoint{}, col); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.db.Exec("DELETE FROM schema_migrations WHERE id = ?", "20261127_0017_webhook_previous_secret").Error; err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if tgt, err := st.DeliveryTarget(ctx, ids[0]); err != nil || tgt.Secret != first || tgt.PreviousSecret != "" {
		t.Fatalf("after the upgrade: %q and %q, %v", tgt.Secret, tgt.PreviousSecret, err)
	}
	if _, err := st.RotateWebhookSecret(ctx, m.ID, ep.ID, second, time.Hour); err != nil {
		t.Fatal(err)
	}
	if tgt, err := st.DeliveryTarget(ctx, ids[0]); err != nil || tgt.Secret != second || tgt.PreviousSecret != first {
		t.Fatalf("a rotation with overlap after the upgrade: %q and %q, %v", tgt.Secret, tgt.PreviousSecret, err)
	}
}

// TestIdempotencyClaimMigration: a key left running by a binary from before
// 20261127_0018 (no claim column) is still taken over after the upgrade,
// and the retry's answer is stored.
func TestIdempotencyClaimMigration(t *testing.T) {
	onFreshStores(t, func(t *testing.T, st *Store) {
		if err := st.Migrate(); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		now := time.Now().UTC()
		st.SetClock(func() time.Time { return now })
		if _, _, err := st.BeginIdempotent(ctx, "m1", "test", "k", "h"); err != nil {
			t.Fatal(err)
		}
		if err := st.db.Migrator().DropColumn(&IdempotencyKey{}, "Claim"); err != nil {
			t.Fatal(err)
		}
		if err := st.db.Exec("DELETE FROM schema_migrations WHERE id = ?", "20261127_0018_idempotency_claim").Error; err != nil {
			t.Fatal(err)
		}
		if err := st.Migrate(); err != nil {
			t.Fatalf("upgrade: %v", err)
		}
		now = now.Add(2 * time.Minute)
		state, rec, err := st.BeginIdempotent(ctx, "m1", "test", "k", "h")
		if err != nil || state != IdemNew || rec.Claim == "" {
			t.Fatalf("after the upgrade: %q %+v %v", state, rec, err)
		}
		if err := st.FinishIdempotent(ctx, rec, 201, "{}"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWalletProofNetworkMigration: wallet proofs made before 20261206_0029
// (one per merchant and address, signatures of at most 256 characters)
// hold on every network after it, and the merchant may then prove the
// address as a contract wallet on a network too, with a Safe's longer
// signature.
func TestWalletProofNetworkMigration(t *testing.T) {
	onFreshStores(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		m := keyedMerchant(t, st, "proved@example.com")
		const addr = "0x52908400098527886E0F7030069857D2E4169EE7"
		db := st.db
		if err := db.Migrator().DropIndex(&WalletProof{}, "idx_wallet_proof_scope"); err != nil {
			t.Fatal(err)
		}
		if err := db.Migrator().DropColumn(&WalletProof{}, "Network"); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"CREATE UNIQUE INDEX idx_wallet_proof_merchant_address ON wallet_proofs (merchant_id, address)",
			"ALTER TABLE wallet_proofs ALTER COLUMN signature TYPE varchar(256)"} {
			if strings.Contains(q, "ALTER COLUMN") && st.Dialect() != "postgres" {
				continue
			}
			if err := db.Exec(q).Error; err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Exec("INSERT INTO wallet_proofs (id, merchant_id, family, address, message, signature, proved_at) VALUES (?, ?, 'evm', ?, 'm', 's', ?)",
			NewID(), m.ID, addr, time.Now().UTC()).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Exec("DELETE FROM schema_migrations WHERE id = ?", "20261206_0029_wallet_proof_network").Error; err != nil {
			t.Fatal(err)
		}
		if err := st.Migrate(); err != nil {
			t.Fatalf("upgrade: %v", err)
		}
		provers, err := st.WalletProvers(ctx, []string{addr})
		if err != nil || !provers.On(addr, "")[m.ID] || !provers.On(addr, "base_sepolia")[m.ID] {
			t.Fatalf("the old proof after the upgrade: %+v %v", provers, err)
		}
		p := &WalletProof{MerchantID: m.ID, Family: "evm", Address: addr, Network: "base_sepolia", Message: "m",
			Signature: "0x" + strings.Repeat("ab", 65*5), ProvedAt: time.Now()}
		if created, err := st.RecordWalletProof(ctx, p, 0); err != nil || !created {
			t.Fatalf("a contract wallet's proof on a network after the upgrade: %v %v", created, err)
		}
		// Rolled back: one proof per merchant and address again (the key's).
		for _, mig := range migrations() {
			if mig.ID == "20261206_0029_wallet_proof_network" {
				if err := mig.Rollback(db); err != nil {
					t.Fatalf("rollback: %v", err)
				}
			}
		}
		var n int64
		if err := db.Table("wallet_proofs").Count(&n).Error; err != nil || n != 1 || !db.Migrator().HasIndex(&WalletProof{}, "idx_wallet_proof_merchant_address") ||
			db.Migrator().HasColumn(&WalletProof{}, "Network") {
			t.Fatalf("after the rollback: %d proofs, %v", n, err)
		}
	})
}
