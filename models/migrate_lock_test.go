package models_test

import (
	"testing"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestConcurrentMigrations: four processes migrating one empty PostgreSQL
// schema at once (api, workers and a CLI command starting together) all
// succeed: an advisory lock serialises them (without it all but one
// crashed on a duplicate type).
func TestConcurrentMigrations(t *testing.T) {
	url := storetest.PostgresURL(t)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			st, err := models.Open(models.Options{DatabaseURL: url, Secrets: storetest.Keyring()})
			if err != nil {
				errs <- err
				return
			}
			defer st.Close()
			errs <- st.Migrate()
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("a concurrent migration: %v", err)
		}
	}
}
