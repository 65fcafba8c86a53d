package models

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"

	"github.com/paygate/paygate/keyring"
)

// allModels lists every table of the store.
func allModels() []any {
	return []any{
		&Merchant{}, &DashboardSession{}, &APIKey{}, &PaymentLink{}, &Transaction{},
		&PaymentException{}, &IdempotencyKey{}, &Product{}, &HostedCheckout{}, &Customer{}, &Subscription{}, &CheckoutSession{},
		&CheckoutSessionEvent{}, &Settlement{}, &WebhookEndpoint{}, &Event{},
		&WebhookDelivery{}, &DeliveryAttempt{}, &KYBApplication{}, &Notification{},
		&Refund{}, &ChainCursor{}, &RelayedTransaction{}, &WalletProof{},
		&PasswordReset{}, &WalletPlace{}, &EmailConfirmation{},
	}
}

// migrations is the schema's history, oldest first. gormigrate records each
// id in the migrations table, so a database is moved forward exactly once.
//
// Rule for later migrations: each one is written against the database as the
// earlier ones left it and is idempotent (check HasColumn/HasIndex before
// adding), because the first migration builds tables from the current
// structs on a new database.
func migrations() []*gormigrate.Migration {
	return []*gormigrate.Migration{
		{
			ID: "20261122_0001_initial",
			Migrate: func(tx *gorm.DB) error {
				if err := tx.AutoMigrate(allModels()...); err != nil {
					return err
				}
				// One live and one test key per merchant: only unrevoked keys
				// count. Partial indexes exist on SQLite and PostgreSQL alike.
				return tx.Exec(`CREATE UNIQUE INDEX IF NOT EXISTS idx_api_keys_active_type
					ON api_keys (merchant_id, key_type) WHERE revoked_at IS NULL`).Error
			},
			Rollback: func(tx *gorm.DB) error {
				models := allModels()
				for i := len(models) - 1; i >= 0; i-- {
					if err := tx.Migrator().DropTable(models[i]); err != nil {
						return err
					}
				}
				return nil
			},
		},
		{
			// Payments bound to sessions: a payment reference per session,
			// hashes unique per merchant instead of globally (the global
			// claim table let anyone burn a hash), record verification and
			// payment exceptions.
			ID: "20261123_0002_payment_binding",
			Migrate: func(tx *gorm.DB) error {
				m := tx.Migrator()
				if !m.HasColumn(&CheckoutSession{}, "PaymentReference") {
					if err := m.AddColumn(&CheckoutSession{}, "PaymentReference"); err != nil {
						return err
					}
				}
				if !m.HasIndex(&CheckoutSession{}, "PaymentReference") {
					if err := m.CreateIndex(&CheckoutSession{}, "PaymentReference"); err != nil {
						return err
					}
				}
				for _, col := range []string{"Verification", "VerificationMessage"} {
					if !m.HasColumn(&Transaction{}, col) {
						if err := m.AddColumn(&Transaction{}, col); err != nil {
							return err
						}
					}
				}
				if m.HasIndex(&Transaction{}, "idx_tx_network_hash") {
					if err := m.DropIndex(&Transaction{}, "idx_tx_network_hash"); err != nil {
						return err
					}
				}
				if !m.HasIndex(&Transaction{}, "idx_tx_merchant_network_hash") {
					if err := m.CreateIndex(&Transaction{}, "idx_tx_merchant_network_hash"); err != nil {
						return err
					}
				}
				if m.HasTable("tx_hash_claims") {
					if err := m.DropTable("tx_hash_claims"); err != nil {
						return err
					}
				}
				return tx.AutoMigrate(&PaymentException{})
			},
		},
		{
			// Idempotency keys, products, hosted checkouts and the
			// metadata sessions carry into checkout.completed; merchants'
			// embed origins for the hosted pages.
			ID: "20261123_0003_checkouts_products_idempotency",
			Migrate: func(tx *gorm.DB) error {
				m := tx.Migrator()
				for _, c := range []struct {
					model any
					field string
				}{
					{&PaymentLink{}, "ProductID"}, {&PaymentLink{}, "CheckoutID"}, {&PaymentLink{}, "ExpiresAt"},
					{&CheckoutSession{}, "CheckoutID"}, {&CheckoutSession{}, "ProductID"}, {&CheckoutSession{}, "ExternalCustomerID"},
					{&CheckoutSession{}, "Metadata"}, {&Merchant{}, "EmbedOrigins"},
				} {
					if !m.HasColumn(c.model, c.field) {
						if err := m.AddColumn(c.model, c.field); err != nil {
							return err
						}
					}
				}
				for _, c := range []struct {
					model any
					field string
				}{{&PaymentLink{}, "ProductID"}, {&PaymentLink{}, "CheckoutID"}, {&CheckoutSession{}, "CheckoutID"},
					// The watcher's scan of recent sessions per network.
					{&CheckoutSession{}, "idx_sessions_network_created"}} {
					if !m.HasIndex(c.model, c.field) {
						if err := m.CreateIndex(c.model, c.field); err != nil {
							return err
						}
					}
				}
				return tx.AutoMigrate(&IdempotencyKey{}, &Product{}, &HostedCheckout{})
			},
		},
		{
			// Subscriptions that run: what their workflow needs on the row
			// (customer, interval count, trial, billing anchor, pause and
			// cancellation, the change sequence, workflow start for repair),
			// and the links between a subscription, the link that prices its
			// renewals and the checkout sessions that pay its invoices.
			ID: "20261123_0004_subscriptions",
			Migrate: func(tx *gorm.DB) error {
				return addMissing(tx, subscriptionColumns())
			},
		},
		{
			// Webhook signing secrets encrypted at rest: each endpoint's
			// secret is sealed (keyring, AES-256-GCM under a key derived from
			// PAYGATE_SECRET_KEY) into secret_sealed and the clear column
			// emptied. Idempotent: only rows still holding a secret in clear
			// are touched, each with a conditional update.
			ID:      "20261123_0005_webhook_secret_encryption",
			Migrate: encryptWebhookSecrets,
		},
		{
			// Refunds: the refunds table (unique hash per merchant and
			// network), what a transaction has refunded and reserved, and
			// the merchant's refunds feature flag.
			ID: "20261123_0006_refunds",
			Migrate: func(tx *gorm.DB) error {
				m := tx.Migrator()
				for _, col := range []string{"RefundedAmount", "RefundReserved"} {
					if !m.HasColumn(&Transaction{}, col) {
						if err := m.AddColumn(&Transaction{}, col); err != nil {
							return err
						}
					}
				}
				if !m.HasColumn(&Merchant{}, "RefundsEnabled") {
					if err := m.AddColumn(&Merchant{}, "RefundsEnabled"); err != nil {
						return err
					}
				}
				// AutoMigrate creates the table and its indexes when missing
				// and leaves an existing one as it is.
				return tx.AutoMigrate(&Refund{})
			},
			Rollback: func(tx *gorm.DB) error {
				m := tx.Migrator()
				if err := m.DropTable(&Refund{}); err != nil {
					return err
				}
				for _, col := range []string{"RefundedAmount", "RefundReserved"} {
					if m.HasColumn(&Transaction{}, col) {
						if err := m.DropColumn(&Transaction{}, col); err != nil {
							return err
						}
					}
				}
				if m.HasColumn(&Merchant{}, "RefundsEnabled") {
					return m.DropColumn(&Merchant{}, "RefundsEnabled")
				}
				return nil
			},
		},
		{
			// The dashboard: deliveries name the checkout session their
			// event is about, so a payment lists the deliveries it caused.
			ID: "20261123_0007_delivery_session",
			Migrate: func(tx *gorm.DB) error {
				m := tx.Migrator()
				if !m.HasColumn(&WebhookDelivery{}, "SessionID") {
					if err := m.AddColumn(&WebhookDelivery{}, "SessionID"); err != nil {
						return err
					}
				}
				if !m.HasIndex(&WebhookDelivery{}, "SessionID") {
					if err := m.CreateIndex(&WebhookDelivery{}, "SessionID"); err != nil {
						return err
					}
				}
				return backfillDeliverySessions(tx)
			},
		},
		{
			// The delivery reconciler pages through pending deliveries by
			// id: a partial index holds only those, so a pass reads the
			// few open ones instead of every delivery ever made (found by
			// TestHotQueriesUseIndexes).
			ID: "20261123_0008_pending_deliveries_index",
			Migrate: func(tx *gorm.DB) error {
				return tx.Exec(`CREATE INDEX IF NOT EXISTS idx_webhook_deliveries_pending
					ON webhook_deliveries (id) WHERE status = 'pending'`).Error
			},
		},
		{
			// The session change feed (SessionChanges): every write of a
			// session or of its history is told by the database itself, so
			// a process may keep what it shows of a session in memory and
			// drop it when any process writes. PostgreSQL notifies at
			// commit; SQLite, which has no notifications, appends to a
			// change table its readers follow.
			ID: "20261123_0009_session_change_feed",
			Migrate: func(tx *gorm.DB) error {
				var stmts []string
				if tx.Dialector.Name() == "postgres" {
					stmts = postgresChangeFeed
				} else {
					stmts = sqliteChangeFeed
				}
				for _, q := range stmts {
					if err := tx.Exec(q).Error; err != nil {
						return err
					}
				}
				return nil
			},
		},
		{
			// A payout's hash is unique per merchant, as a transaction's is
			// since 0002: unique across merchants, a merchant who recorded
			// another's payout hash first kept that merchant from recording
			// its own payout (409), and the 409 told anyone whether a hash
			// had been recorded.
			ID: "20261126_0010_settlement_hash_per_merchant",
			Migrate: func(tx *gorm.DB) error {
				m := tx.Migrator()
				if m.HasIndex(&Settlement{}, "idx_settlement_hash") {
					if err := m.DropIndex(&Settlement{}, "idx_settlement_hash"); err != nil {
						return err
					}
				}
				if !m.HasIndex(&Settlement{}, "idx_settlement_merchant_hash") {
					return m.CreateIndex(&Settlement{}, "idx_settlement_merchant_hash")
				}
				return nil
			},
		},
		{
			// The watcher's scan cursors, kept across restarts.
			ID:       "20261126_0011_chain_cursors",
			Migrate:  func(tx *gorm.DB) error { return tx.AutoMigrate(&ChainCursor{}) },
			Rollback: func(tx *gorm.DB) error { return tx.Migrator().DropTable(&ChainCursor{}) },
		},
		{
			ID:       "20261126_0012_relayed_transactions",
			Migrate:  func(tx *gorm.DB) error { return tx.AutoMigrate(&RelayedTransaction{}) },
			Rollback: func(tx *gorm.DB) error { return tx.Migrator().DropTable(&RelayedTransaction{}) },
		},
		{
			// The invoice a subscription's session pays, so that only one
			// session of an invoice completes.
			ID: "20261126_0013_session_invoice_number",
			Migrate: func(tx *gorm.DB) error {
				if m := tx.Migrator(); !m.HasColumn(&CheckoutSession{}, "InvoiceNumber") {
					return m.AddColumn(&CheckoutSession{}, "InvoiceNumber")
				}
				return nil
			},
		},
		{
			// The end of a failed refund's watch, so that a failure with any
			// reason may still be watched; refunds failed TX_NOT_FOUND whose
			// message says they are watched get the week from their failure.
			ID: "20261127_0014_refund_watched_until",
			Migrate: func(tx *gorm.DB) error {
				if m := tx.Migrator(); !m.HasColumn(&Refund{}, "WatchedUntil") {
					if err := m.AddColumn(&Refund{}, "WatchedUntil"); err != nil {
						return err
					}
				}
				var watched []Refund
				if err := tx.Select("id", "failed_at").Where("status = ? AND failure_reason = ? AND failure_message LIKE ? AND failed_at IS NOT NULL AND watched_until IS NULL",
					RefundFailed, ReasonTxNotFound, "%"+legacyWatchedPhrase+"%").Find(&watched).Error; err != nil {
					return err
				}
				for _, r := range watched {
					if err := tx.Model(&Refund{}).Where("id = ?", r.ID).Update("watched_until", r.FailedAt.Add(legacyLateWatch)).Error; err != nil {
						return err
					}
				}
				return nil
			},
		},
		{
			// The retry-schedule slot a delivery reached, apart from its
			// attempts (which count retries asked by support too): a run
			// resumed after a lost one continued from the attempt count and
			// skipped the schedule's remaining day and more. Rows from before
			// count every attempt as scheduled, as the resume did then.
			ID: "20261127_0015_delivery_scheduled_attempts",
			Migrate: func(tx *gorm.DB) error {
				if m := tx.Migrator(); !m.HasColumn(&WebhookDelivery{}, "ScheduledAttempts") {
					if err := m.AddColumn(&WebhookDelivery{}, "ScheduledAttempts"); err != nil {
						return err
					}
				}
				return tx.Exec("UPDATE webhook_deliveries SET scheduled_attempts = attempts WHERE scheduled_attempts < attempts").Error
			},
		},
		{
			// The deliveries never attempted, apart: the reconciler checks
			// them first in every pass (UnattemptedDeliveries).
			ID: "20261127_0016_unattempted_deliveries_index",
			Migrate: func(tx *gorm.DB) error {
				return tx.Exec(`CREATE INDEX IF NOT EXISTS idx_webhook_deliveries_unattempted
					ON webhook_deliveries (id) WHERE status = 'pending' AND attempts = 0`).Error
			},
		},
		{
			// A rotated secret kept signing beside the new one for an
			// overlap the rotation chose (RotateWebhookSecret).
			ID: "20261127_0017_webhook_previous_secret",
			Migrate: func(tx *gorm.DB) error {
				m := tx.Migrator()
				for _, col := range []string{"PreviousSecretSealed", "PreviousSecretUntil"} {
					if !m.HasColumn(&WebhookEndpoint{}, col) {
						if err := m.AddColumn(&WebhookEndpoint{}, col); err != nil {
							return err
						}
					}
				}
				return nil
			},
		},
		{
			// Idempotency keys name the request that runs them
			// (IdempotencyKey.Claim): keys written before have none, ''.
			ID: "20261127_0018_idempotency_claim",
			Migrate: func(tx *gorm.DB) error {
				if m := tx.Migrator(); !m.HasColumn(&IdempotencyKey{}, "Claim") {
					return m.AddColumn(&IdempotencyKey{}, "Claim")
				}
				return nil
			},
		},
		{
			// A failed refund whose transfer is watched keeps its amount
			// reserved (Refund.AmountHeld): refunds failed before gave it
			// back at once, and hold nothing.
			ID: "20261128_0019_refund_amount_held",
			Migrate: func(tx *gorm.DB) error {
				if m := tx.Migrator(); !m.HasColumn(&Refund{}, "AmountHeld") {
					return m.AddColumn(&Refund{}, "AmountHeld")
				}
				return nil
			},
		},
		{
			// An exception resolved into a subscription's open invoice
			// names it (PaymentException.SubscriptionID, SubscriptionInvoice).
			ID: "20261128_0020_exception_subscription",
			Migrate: func(tx *gorm.DB) error {
				m := tx.Migrator()
				for _, col := range []string{"SubscriptionID", "SubscriptionInvoice"} {
					if !m.HasColumn(&PaymentException{}, col) {
						if err := m.AddColumn(&PaymentException{}, col); err != nil {
							return err
						}
					}
				}
				return nil
			},
		},
		{
			// A customer's payments are found by its transactions
			// (GET /api/payments?customerId=), and 0022 counts its refunds
			// through them.
			ID: "20261129_0021_transactions_customer_index",
			Migrate: func(tx *gorm.DB) error {
				if m := tx.Migrator(); !m.HasIndex(&Transaction{}, "CustomerID") {
					return m.CreateIndex(&Transaction{}, "CustomerID")
				}
				return nil
			},
		},
		{
			// Links and customers count what succeeded refunds gave back
			// (TotalRefunded) beside their gross totals, from the refunds
			// that succeeded before.
			ID: "20261129_0022_totals_refunded",
			Migrate: func(tx *gorm.DB) error {
				m := tx.Migrator()
				for _, model := range []any{&PaymentLink{}, &Customer{}} {
					if !m.HasColumn(model, "TotalRefunded") {
						if err := m.AddColumn(model, "TotalRefunded"); err != nil {
							return err
						}
					}
				}
				for _, backfill := range []string{
					`UPDATE payment_links SET total_refunded = (SELECT COALESCE(SUM(r.amount), 0) FROM refunds r
						JOIN transactions t ON t.id = r.transaction_id WHERE r.status = 'succeeded' AND t.payment_link_id = payment_links.id)`,
					`UPDATE customers SET total_refunded = (SELECT COALESCE(SUM(r.amount), 0) FROM refunds r
						JOIN transactions t ON t.id = r.transaction_id WHERE r.status = 'succeeded' AND t.customer_id = customers.id)`,
				} {
					if err := tx.Exec(backfill).Error; err != nil {
						return err
					}
				}
				return nil
			},
		},
		{
			// The refund watcher's reads: the wallets owing pending refunds
			// without a hash, and the refunds one transfer may pay; a partial
			// index holds those refunds alone (a merchant's finished ones,
			// however many, are not read each pass).
			ID: "20261130_0023_refunds_awaiting_transfer_index",
			Migrate: func(tx *gorm.DB) error {
				return tx.Exec(`CREATE INDEX IF NOT EXISTS idx_refunds_awaiting_transfer ON refunds
					(network, source_wallet, amount, created_at) WHERE status = 'pending' AND tx_hash IS NULL`).Error
			},
		},
		{
			// The refund watcher also reads, for a week after their window,
			// the wallets of refunds that failed REFUND_EXPIRED without a
			// hash (a transfer sent late is recorded): a partial index of
			// those refunds alone. And the watcher asks whether a hash backs
			// a refund of any merchant (the unique index leads with the
			// merchant): an index of the refunds' hashes.
			ID: "20261201_0024_refunds_expired_awaiting_transfer_index",
			Migrate: func(tx *gorm.DB) error {
				for _, q := range []string{
					`CREATE INDEX IF NOT EXISTS idx_refunds_expired_awaiting_transfer ON refunds
					(network, source_wallet, amount, expires_at) WHERE status = 'failed' AND failure_reason = 'REFUND_EXPIRED' AND tx_hash IS NULL`,
					`CREATE INDEX IF NOT EXISTS idx_refunds_tx_hash ON refunds (tx_hash, network) WHERE tx_hash IS NOT NULL`,
				} {
					if err := tx.Exec(q).Error; err != nil {
						return err
					}
				}
				return nil
			},
		},
		{
			// Wallet proofs: a merchant's signed proof that it controls a
			// receiving wallet.
			ID:       "20261202_0025_wallet_proofs",
			Migrate:  func(tx *gorm.DB) error { return tx.AutoMigrate(&WalletProof{}) },
			Rollback: func(tx *gorm.DB) error { return tx.Migrator().DropTable(&WalletProof{}) },
		},
		{
			// Password resets: the links e-mailed to merchants who forgot
			// their password.
			ID:       "20261203_0026_password_resets",
			Migrate:  func(tx *gorm.DB) error { return tx.AutoMigrate(&PasswordReset{}) },
			Rollback: func(tx *gorm.DB) error { return tx.Migrator().DropTable(&PasswordReset{}) },
		},
		{
			// Why a subscription cannot be billed (its workflow holds).
			ID: "20261204_0027_subscription_billing_error",
			Migrate: func(tx *gorm.DB) error {
				if tx.Migrator().HasColumn(&Subscription{}, "BillingError") {
					return nil
				}
				return tx.Migrator().AddColumn(&Subscription{}, "BillingError")
			},
			Rollback: func(tx *gorm.DB) error { return tx.Migrator().DropColumn(&Subscription{}, "BillingError") },
		},
		{
			// Where each dashboard session signed in from (the account's
			// list of sessions).
			ID: "20261205_0028_dashboard_session_origin",
			Migrate: func(tx *gorm.DB) error {
				for _, col := range []string{"UserAgent", "ClientIP"} {
					if !tx.Migrator().HasColumn(&DashboardSession{}, col) {
						if err := tx.Migrator().AddColumn(&DashboardSession{}, col); err != nil {
							return err
						}
					}
				}
				return nil
			},
			Rollback: func(tx *gorm.DB) error {
				return errors.Join(tx.Migrator().DropColumn(&DashboardSession{}, "UserAgent"),
					tx.Migrator().DropColumn(&DashboardSession{}, "ClientIP"))
			},
		},
		{
			// Contract wallets' proofs (EIP-1271) hold on the network they
			// were checked on: a merchant may prove an address once per
			// network, and a Safe's signature outgrows 256 characters.
			ID: "20261206_0029_wallet_proof_network",
			Migrate: func(tx *gorm.DB) error {
				m := tx.Migrator()
				if !m.HasColumn(&WalletProof{}, "Network") {
					if err := m.AddColumn(&WalletProof{}, "Network"); err != nil {
						return err
					}
				}
				if m.HasIndex(&WalletProof{}, "idx_wallet_proof_merchant_address") {
					if err := m.DropIndex(&WalletProof{}, "idx_wallet_proof_merchant_address"); err != nil {
						return err
					}
				}
				if !m.HasIndex(&WalletProof{}, "idx_wallet_proof_scope") {
					if err := m.CreateIndex(&WalletProof{}, "idx_wallet_proof_scope"); err != nil {
						return err
					}
				}
				if tx.Dialector.Name() == "postgres" {
					return tx.Exec("ALTER TABLE wallet_proofs ALTER COLUMN signature TYPE text").Error
				}
				return nil // SQLite keeps any length in a varchar
			},
			Rollback: func(tx *gorm.DB) error {
				// Back to one proof per merchant and address: a contract
				// wallet's proofs on further networks go.
				m := tx.Migrator()
				if err := tx.Exec("DELETE FROM wallet_proofs WHERE network <> '' AND EXISTS (SELECT 1 FROM wallet_proofs o " +
					"WHERE o.merchant_id = wallet_proofs.merchant_id AND o.address = wallet_proofs.address AND o.id <> wallet_proofs.id " +
					"AND (o.network = '' OR o.id < wallet_proofs.id))").Error; err != nil {
					return err
				}
				if err := m.DropIndex(&WalletProof{}, "idx_wallet_proof_scope"); err != nil {
					return err
				}
				if err := m.DropColumn(&WalletProof{}, "Network"); err != nil {
					return err
				}
				return tx.Exec("CREATE UNIQUE INDEX idx_wallet_proof_merchant_address ON wallet_proofs (merchant_id, address)").Error
			},
		},
		{
			// Where the payment watcher's read of each Solana wallet stands,
			// so that a restarted worker reads on from there instead of a
			// day back.
			ID:       "20261207_0030_wallet_places",
			Migrate:  func(tx *gorm.DB) error { return tx.AutoMigrate(&WalletPlace{}) },
			Rollback: func(tx *gorm.DB) error { return tx.Migrator().DropTable(&WalletPlace{}) },
		},
		{
			// A merchant's e-mail address is proven by a link sent there.
			// Accounts an operator approved (KYB) before this count as
			// proven; the others confirm from the dashboard.
			ID: "20261208_0031_email_confirmations",
			Migrate: func(tx *gorm.DB) error {
				m := tx.Migrator()
				if !m.HasColumn(&Merchant{}, "EmailConfirmedAt") {
					if err := m.AddColumn(&Merchant{}, "EmailConfirmedAt"); err != nil {
						return err
					}
				}
				if err := tx.AutoMigrate(&EmailConfirmation{}); err != nil {
					return err
				}
				return tx.Exec(`UPDATE merchants SET email_confirmed_at = updated_at WHERE kyb_status = ? AND email_confirmed_at IS NULL`,
					KYBApproved).Error
			},
			Rollback: func(tx *gorm.DB) error {
				m := tx.Migrator()
				if err := m.DropTable(&EmailConfirmation{}); err != nil {
					return err
				}
				if m.HasColumn(&Merchant{}, "EmailConfirmedAt") {
					return m.DropColumn(&Merchant{}, "EmailConfirmedAt")
				}
				return nil
			},
		},
	}
}

// postgresChangeFeed is migration 20261123_0009 on PostgreSQL: a trigger
// function notifying the changed session's id (delivered at commit, once
// per id and transaction).
var postgresChangeFeed = []string{
	`CREATE OR REPLACE FUNCTION paygate_session_changed() RETURNS trigger AS $$
	BEGIN
		IF TG_TABLE_NAME = 'checkout_session_events' THEN
			PERFORM pg_notify('` + sessionChangesChannel + `', NEW.session_id);
		ELSIF TG_OP = 'DELETE' THEN
			PERFORM pg_notify('` + sessionChangesChannel + `', OLD.id);
		ELSE
			PERFORM pg_notify('` + sessionChangesChannel + `', NEW.id);
		END IF;
		RETURN NULL;
	END $$ LANGUAGE plpgsql`,
	`DROP TRIGGER IF EXISTS trg_checkout_sessions_changed ON checkout_sessions`,
	`CREATE TRIGGER trg_checkout_sessions_changed AFTER INSERT OR UPDATE OR DELETE ON checkout_sessions
		FOR EACH ROW EXECUTE FUNCTION paygate_session_changed()`,
	`DROP TRIGGER IF EXISTS trg_checkout_session_events_changed ON checkout_session_events`,
	`CREATE TRIGGER trg_checkout_session_events_changed AFTER INSERT ON checkout_session_events
		FOR EACH ROW EXECUTE FUNCTION paygate_session_changed()`,
}

// sqliteChangeFeed is migration 20261123_0009 on SQLite: triggers append
// the changed session's id to session_changes (AUTOINCREMENT: its seq only
// grows, and with one writer at a time it grows in commit order).
var sqliteChangeFeed = []string{
	`CREATE TABLE IF NOT EXISTS session_changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL)`,
	`CREATE TRIGGER IF NOT EXISTS trg_checkout_sessions_inserted AFTER INSERT ON checkout_sessions
		BEGIN INSERT INTO session_changes (session_id) VALUES (NEW.id); END`,
	`CREATE TRIGGER IF NOT EXISTS trg_checkout_sessions_updated AFTER UPDATE ON checkout_sessions
		BEGIN INSERT INTO session_changes (session_id) VALUES (NEW.id); END`,
	`CREATE TRIGGER IF NOT EXISTS trg_checkout_sessions_deleted AFTER DELETE ON checkout_sessions
		BEGIN INSERT INTO session_changes (session_id) VALUES (OLD.id); END`,
	`CREATE TRIGGER IF NOT EXISTS trg_checkout_session_events_inserted AFTER INSERT ON checkout_session_events
		BEGIN INSERT INTO session_changes (session_id) VALUES (NEW.session_id); END`,
}

// subscriptionColumns are the columns migration 20261123_0004 adds.
func subscriptionColumns() []columnSpec {
	return []columnSpec{
		{&Subscription{}, "IntervalCount", false}, {&Subscription{}, "CustomerID", true},
		{&Subscription{}, "MerchantWalletAddress", false}, {&Subscription{}, "TrialEnd", false},
		{&Subscription{}, "BillingAnchor", false}, {&Subscription{}, "PausedAt", false},
		{&Subscription{}, "CanceledAt", false}, {&Subscription{}, "CancelReason", false},
		{&Subscription{}, "LatestSessionID", false}, {&Subscription{}, "ChangeSeq", false},
		{&Subscription{}, "WorkflowStarted", true},
		{&CheckoutSession{}, "SubscriptionID", true},
		{&PaymentLink{}, "SubscriptionID", true},
	}
}

// columnSpec names a column a migration adds (by its field) and whether
// the field's index comes with it.
type columnSpec struct {
	model   any
	field   string
	indexed bool
}

// addMissing adds each column and its index unless it exists already (a
// new database has them from the first migration's structs).
func addMissing(tx *gorm.DB, cols []columnSpec) error {
	m := tx.Migrator()
	for _, c := range cols {
		if !m.HasColumn(c.model, c.field) {
			if err := m.AddColumn(c.model, c.field); err != nil {
				return fmt.Errorf("add %T.%s: %w", c.model, c.field, err)
			}
		}
		if c.indexed && !m.HasIndex(c.model, c.field) {
			if err := m.CreateIndex(c.model, c.field); err != nil {
				return fmt.Errorf("index %T.%s: %w", c.model, c.field, err)
			}
		}
	}
	return nil
}

type keyringKey struct{}

// withKeyring hands the store's keyring to the migrations through the
// database handle's context (gormigrate passes migrations only a *gorm.DB).
func withKeyring(ctx context.Context, r *keyring.Ring) context.Context {
	return context.WithValue(ctx, keyringKey{}, r)
}

func keyringOf(tx *gorm.DB) *keyring.Ring {
	if tx.Statement == nil || tx.Statement.Context == nil {
		return nil
	}
	r, _ := tx.Statement.Context.Value(keyringKey{}).(*keyring.Ring)
	return r
}

// encryptWebhookSecrets is migration 20261123_0005.
func encryptWebhookSecrets(tx *gorm.DB) error {
	m := tx.Migrator()
	if !m.HasColumn(&WebhookEndpoint{}, "SecretSealed") {
		if err := m.AddColumn(&WebhookEndpoint{}, "SecretSealed"); err != nil {
			return err
		}
	}
	var rows []struct {
		ID     string
		Secret string
	}
	// Deleted endpoints too: their secrets are secrets all the same.
	if err := tx.Table("webhook_endpoints").Select("id, secret").Where("secret <> ''").Order("id").Find(&rows).Error; err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	ring := keyringOf(tx)
	if ring == nil {
		return fmt.Errorf("%d webhook secrets are stored in clear and no keyring was given to encrypt them (PAYGATE_SECRET_KEY)", len(rows))
	}
	for _, r := range rows {
		sealed, err := ring.Seal(r.Secret, secretAAD(r.ID))
		if err != nil {
			return err
		}
		if err := tx.Table("webhook_endpoints").Where("id = ? AND secret = ?", r.ID, r.Secret).
			Updates(map[string]any{"secret_sealed": sealed, "secret": ""}).Error; err != nil {
			return fmt.Errorf("encrypt the secret of webhook endpoint %s: %w", r.ID, err)
		}
	}
	return nil
}

// Migrate moves the schema to the newest version.
func Migrate(db *gorm.DB) error {
	if db.Dialector.Name() != "postgres" {
		return migrate(db) // one process owns a SQLite file
	}
	// Replicas starting together (api, workers, a CLI command) would race
	// on an empty or older database and all but one crash; an advisory
	// lock held on one connection serialises them, and the later ones
	// find the schema up to date.
	return db.Connection(func(conn *gorm.DB) error {
		if err := conn.Exec("SELECT pg_advisory_lock(?)", migrationLockKey).Error; err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		defer conn.Exec("SELECT pg_advisory_unlock(?)", migrationLockKey)
		return migrate(conn)
	})
}

// migrationLockKey is the advisory lock of the schema's migrations.
const migrationLockKey int64 = 0x70617967617465 // "paygate"

func migrate(db *gorm.DB) error {
	m := gormigrate.New(db, &gormigrate.Options{
		TableName:                 "schema_migrations",
		IDColumnName:              "id",
		IDColumnSize:              64,
		UseTransaction:            db.Dialector.Name() == "postgres",
		ValidateUnknownMigrations: true,
	}, migrations())
	if err := m.Migrate(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// AppliedMigrations reads which migrations the database has applied (none
// when it has no migrations table yet).
func (s *Store) AppliedMigrations() (map[string]bool, error) {
	applied := map[string]bool{}
	if !s.db.Migrator().HasTable("schema_migrations") {
		return applied, nil
	}
	var ids []string
	if err := s.db.Table("schema_migrations").Pluck("id", &ids).Error; err != nil {
		return nil, err
	}
	for _, id := range ids {
		applied[id] = true
	}
	return applied, nil
}

// MigrationIDs lists the known migrations, oldest first (for `paygate migrate`).
func MigrationIDs() []string {
	var ids []string
	for _, m := range migrations() {
		ids = append(ids, m.ID)
	}
	return ids
}

// backfillDeliverySessions sets the session of existing deliveries from
// their events' data, a batch at a time.
func backfillDeliverySessions(tx *gorm.DB) error {
	after := ""
	for {
		var events []Event
		if err := tx.Where("id > ?", after).Order("id asc").Limit(500).Find(&events).Error; err != nil {
			return err
		}
		if len(events) == 0 {
			return nil
		}
		for _, e := range events {
			if id := eventSessionID(e.Data); id != nil {
				if err := tx.Model(&WebhookDelivery{}).Where("event_id = ? AND session_id IS NULL", e.ID).
					Update("session_id", *id).Error; err != nil {
					return err
				}
			}
		}
		after = events[len(events)-1].ID
	}
}

// legacyLateWatch is how long refunds failed TX_NOT_FOUND before
// migration 20261127_0014 are watched (the refund workflow's default, a
// week): the migration dates their watch's end from their failure.
const legacyLateWatch = 7 * 24 * time.Hour
