package models

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/paygate/paygate/keyring"
)

// RewindSubscriptionsMigration takes the schema back to what migration
// 20261123_0002 left (the columns and indexes of 0004 dropped, the migration
// forgotten), so a test can run 0004 over an older database with data.
func (s *Store) RewindSubscriptionsMigration() error {
	m := s.db.Migrator()
	for _, c := range subscriptionColumns() {
		if c.indexed && m.HasIndex(c.model, c.field) {
			if err := m.DropIndex(c.model, c.field); err != nil {
				return fmt.Errorf("drop index %T.%s: %w", c.model, c.field, err)
			}
		}
		if m.HasColumn(c.model, c.field) {
			if err := m.DropColumn(c.model, c.field); err != nil {
				return fmt.Errorf("drop %T.%s: %w", c.model, c.field, err)
			}
		}
	}
	return s.db.Exec("DELETE FROM schema_migrations WHERE id = ?", "20261123_0004_subscriptions").Error
}

// HasColumnForTest reports whether the table of model has the field's column.
func (s *Store) HasColumnForTest(model any, field string) bool {
	return s.db.Migrator().HasColumn(model, field)
}

// DB exposes the store's handle to the package's own tests (raw column
// checks, rewinding a migration).
func (s *Store) DB() *gorm.DB { return s.db }

// WithSecrets returns the same store with another keyring, as a process
// started with other PAYGATE_SECRET_KEY settings would see it.
func (s *Store) WithSecrets(r *keyring.Ring) *Store {
	return &Store{db: s.db, now: s.now, secrets: r}
}
