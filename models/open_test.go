package models_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/paygate/paygate/models"
)

// TestOpenSQLitePathWithURICharacters: a '#' or '?' in the folder (a
// subtest named "sqlite#01" gets such a temporary folder) does not cut the
// database path short: the file is created where asked and migrates.
func TestOpenSQLitePathWithURICharacters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub#01?x=1%20")
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
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "sub")); err == nil {
		t.Fatal("the path was cut at '#'")
	}
}
