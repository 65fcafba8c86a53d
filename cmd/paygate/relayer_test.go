package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
)

// TestRelayerStatus prints the ledger as an operator reads it: a nonce
// sent twice and pending, one emptied and cancelled, fees in gwei, ages.
func TestRelayerStatus(t *testing.T) {
	st := embeddedStore(t, t.TempDir())
	ctx := context.Background()
	now := time.Now()
	var out bytes.Buffer
	if err := relayerStatus(ctx, &out, st, "", now); err != nil || !strings.Contains(out.String(), "no relayed transactions") {
		t.Fatalf("empty: %q %v", out.String(), err)
	}
	for _, r := range []models.RelayedTransaction{
		{Network: "base", Relayer: "0xaa", Nonce: 7, Payer: "0xcc", Reference: "0x01", ToAddress: "0xdd", Data: "0x12", Gas: 90000,
			Tip: "1125000000", FeeCap: "2250000000", Hashes: models.StringList{"0xh1", "0xh2"}, Status: "pending", SentAt: now.Add(-50 * time.Second)},
		{Network: "base", Relayer: "0xaa", Nonce: 6, Payer: "0xce", Reference: "0x02", ToAddress: "0xaa", Data: "0x", Gas: 21000,
			Tip: "1000000000", FeeCap: "2000000000", Hashes: models.StringList{"0xg1", "0xg2"}, CancelFrom: 1, Status: "cancelled",
			MinedHash: "0xg2", SentAt: now.Add(-10 * time.Minute)},
		{Network: "base", Relayer: "0xaa", Nonce: 5, Payer: "0x0000000000000000000000000000000000000000", Reference: "0x", ToAddress: "0xaa",
			Data: "0x", Gas: 21000, Tip: "1000000000", FeeCap: "2000000000", Hashes: models.StringList{"0xf1"}, Status: "filled",
			MinedHash: "0xf1", SentAt: now.Add(-11 * time.Minute)},
		{Network: "polygon", Relayer: "0xbb", Nonce: 1, Payer: "0xcf", Reference: "0x03", ToAddress: "0xdd", Data: "0x12", Gas: 90000,
			Tip: "1", FeeCap: "2", Hashes: models.StringList{"0xp1"}, Status: "mined", MinedHash: "0xp1", SentAt: now},
	} {
		if err := st.SaveRelayed(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	if err := relayerStatus(ctx, &out, st, "base", now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "status") {
		t.Fatalf("base only, header and three rows:\n%s", out.String())
	}
	for i, want := range [][]string{
		{"base", "7", "pending", "2 ", "0xh2", "1.125 / 2.250", "50s ago", "0xcc"},
		{"6", "cancelled", "2, emptied", "0xg2 (mined)", "10m0s ago"},
		{"5", "filled", "0xf1 (mined)", "a gap's nonce, filled by the relayer"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("row %d lacks %q: %s", i+1, w, lines[i+1])
			}
		}
	}
	if err := runRelayer(ctx, []string{"bump"}); err == nil {
		t.Fatal("an unknown relayer command was accepted")
	}
}

// embeddedStore opens and migrates the embedded store in dir, as the
// operator commands find it (PAYGATE_DATA_DIR), closed with the test.
func embeddedStore(t *testing.T, dir string) *models.Store {
	t.Helper()
	st, err := models.Open(models.Options{SQLitePath: filepath.Join(dir, "paygate.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(); err != nil {
		t.Fatal(err)
	}
	return st
}
