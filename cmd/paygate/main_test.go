package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/paygate/paygate/models"
)

// TestCommandsRefuseStrayArguments: `migrate` with anything but status,
// and `api` or `worker` with anything but healthcheck, are usage errors
// that touch nothing (a typo or -h used to migrate the schema or start a
// server); `migrate status` reads which migrations are applied and changes
// nothing.
func TestCommandsRefuseStrayArguments(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PAYGATE_DATA_DIR", dir)
	t.Setenv("DATABASE_URL", "")
	ctx := context.Background()
	for _, args := range [][]string{{"migrate", "--help"}, {"migrate", "stauts"}, {"api", "-h"}, {"api", "serve"}, {"worker", "--help"}} {
		var ue usageError
		if err := run(ctx, args); !errors.As(err, &ue) {
			t.Errorf("paygate %v: %v, want a usage error", args, err)
		}
	}
	if err := run(ctx, []string{"migrate", "status"}); err != nil {
		t.Fatal(err)
	}
	st, err := models.Open(models.Options{SQLitePath: filepath.Join(dir, "paygate.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	applied, err := st.AppliedMigrations()
	if err != nil || len(applied) != 0 {
		t.Fatalf("migrate status and the refused commands applied %d migrations (%v)", len(applied), err)
	}
	if err := run(ctx, []string{"migrate"}); err != nil {
		t.Fatal(err)
	}
	if applied, _ := st.AppliedMigrations(); len(applied) != len(models.MigrationIDs()) {
		t.Fatalf("migrate applied %d of %d", len(applied), len(models.MigrationIDs()))
	}
}
