package models

import (
	"fmt"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
)

// allModels lists every table of the store.
func allModels() []any {
	return []any{
		&Merchant{}, &DashboardSession{}, &APIKey{}, &PaymentLink{}, &Transaction{},
		&TxHashClaim{}, &Customer{}, &Subscription{}, &CheckoutSession{},
		&CheckoutSessionEvent{}, &Settlement{}, &WebhookEndpoint{}, &Event{},
		&WebhookDelivery{}, &DeliveryAttempt{}, &KYBApplication{}, &Notification{},
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
	}
}

// Migrate moves the schema to the newest version.
func Migrate(db *gorm.DB) error {
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

// MigrationIDs lists the known migrations, oldest first (for `paygate migrate`).
func MigrationIDs() []string {
	var ids []string
	for _, m := range migrations() {
		ids = append(ids, m.ID)
	}
	return ids
}
