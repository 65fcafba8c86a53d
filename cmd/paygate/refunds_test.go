package main

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/chain/soldev"
	"github.com/paygate/paygate/models"
)

// TestRefundsCommand runs `paygate refunds enable|disable` as an operator
// would, on the embedded store.
func TestRefundsCommand(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PAYGATE_DATA_DIR", dir)
	t.Setenv("DATABASE_URL", "")
	st := embeddedStore(t, dir)
	ctx := context.Background()
	m := &models.Merchant{Email: "r@example.com", PasswordHash: "x", BusinessName: "Shop"}
	if _, err := st.CreateMerchant(ctx, m, &models.DashboardSession{TokenHash: "s"}, models.NewKey{Hash: "k", Type: models.ModeTest}); err != nil {
		t.Fatal(err)
	}
	flags := func() (bool, bool) {
		got, err := st.Merchant(ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.RefundsOn(models.ModeTest), got.RefundsOn(models.ModeLive)
	}
	if test, live := flags(); !test || live {
		t.Fatalf("default: test %v live %v", test, live)
	}
	if err := run(ctx, []string{"refunds", "enable", m.ID}); err != nil {
		t.Fatal(err)
	}
	if test, live := flags(); !test || !live {
		t.Fatalf("enabled: test %v live %v", test, live)
	}
	if err := run(ctx, []string{"refunds", "disable", m.ID}); err != nil {
		t.Fatal(err)
	}
	if test, live := flags(); test || live {
		t.Fatalf("disabled: test %v live %v", test, live)
	}
	if err := run(ctx, []string{"refunds", "enable", models.NewID()}); err == nil {
		t.Fatal("unknown merchant accepted")
	}
	var ue usageError
	if err := run(ctx, []string{"refunds", "maybe", m.ID}); !errors.As(err, &ue) {
		t.Fatalf("bad usage: %v", err)
	}
}

func TestParseDevRefund(t *testing.T) {
	env := func(key string) func(string) string {
		return func(n string) string {
			if n == "PAYGATE_API_KEY" {
				return key
			}
			return ""
		}
	}
	addr := func(o devchain.RefundPayOptions) string { return crypto.PubkeyToAddress(o.Key.PublicKey).Hex() }
	o, err := parseDevRefund([]string{"rf_1"}, env("svc_test_sk_env"))
	if err != nil || o.RefundID != "rf_1" || o.APIKey != "svc_test_sk_env" || addr(o) != devchain.MerchantAddress().Hex() ||
		o.AnyWallet || o.Units != nil || o.NoSubmit {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	o, err = parseDevRefund([]string{"--from", "stranger", "rf_1", "--units", "999", "--api-key", "svc_test_sk_flag", "--no-submit"}, env(""))
	if err != nil || o.APIKey != "svc_test_sk_flag" || !o.AnyWallet || o.Units.Int64() != 999 || !o.NoSubmit ||
		addr(o) != crypto.PubkeyToAddress(devchain.StrangerKey().PublicKey).Hex() {
		t.Fatalf("flags: %+v %v", o, err)
	}
	// A Solana refund is paid by the Solana dev wallet of the same name;
	// another key has none.
	for from, want := range map[string]string{"merchant": soldev.MerchantAddress, "stranger": soldev.StrangerAddress,
		"customer": soldev.CustomerAddress, "exchange": "", "0x" + strings.Repeat("1", 64): ""} {
		o, err := parseDevRefund([]string{"rf_1", "--from", from}, env("k"))
		if err != nil {
			t.Fatal(err)
		}
		got := "none"
		if key, ok := solanaDevKey(o); ok {
			got = key.PublicKey().String()
		}
		if want == "" {
			want = "none"
		}
		if got != want {
			t.Errorf("--from %s pays a Solana refund from %s, want %s", from, got, want)
		}
	}
	if _, err := parseDevRefund([]string{"-h"}, env("k")); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("help: %v", err)
	}
	for _, bad := range [][]string{{}, {"rf_1", "rf_2"}, {"rf_1", "--units", "0"}, {"rf_1", "--from", "mallory"}, {"rf_1", "--nope"}} {
		var ue usageError
		if _, err := parseDevRefund(bad, env("k")); !errors.As(err, &ue) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	var ue usageError
	if _, err := parseDevRefund([]string{"rf_1"}, env("")); !errors.As(err, &ue) || !strings.Contains(err.Error(), "PAYGATE_API_KEY") {
		t.Errorf("no key: %v", err)
	}
	for _, f := range []string{"--api-key", "--from", "--units", "--no-submit"} {
		if !strings.Contains(devRefundUsage, f) || !strings.Contains(usage, f) {
			t.Errorf("%s missing from the usage", f)
		}
	}
}
