package chain

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefaultRegistry(t *testing.T) {
	r := DefaultRegistry()
	if got, want := r.Names(ModeLive), []string{"base", "ethereum", "polygon", "solana"}; !reflect.DeepEqual(got, want) {
		t.Errorf("live names = %v, want %v", got, want)
	}
	if got, want := r.Names(ModeTest), []string{"base_sepolia", "eth_sepolia", "solana_devnet"}; !reflect.DeepEqual(got, want) {
		t.Errorf("test names = %v, want %v", got, want)
	}
	for _, mode := range []Mode{ModeLive, ModeTest} {
		for _, name := range r.Names(mode) {
			n, ok := r.Lookup(name)
			if !ok {
				t.Fatalf("Lookup(%q) missing", name)
			}
			if fam, _ := FamilyOf(name); fam != n.Family {
				t.Errorf("%s: family %s, FamilyOf says %s", name, n.Family, fam)
			}
			if m, _ := ModeOf(name); m != n.Mode {
				t.Errorf("%s: mode %s, ModeOf says %s", name, n.Mode, m)
			}
			if canon, err := ParseAddress(n.Family, n.USDC); err != nil || canon != n.USDC {
				t.Errorf("%s: USDC %q not canonical: %q %v", name, n.USDC, canon, err)
			}
			if n.Decimals != 6 || n.Confirmations == 0 || n.PollInterval <= 0 || n.RPCURL == "" || n.ExplorerURL == "" {
				t.Errorf("%s: incomplete config %+v", name, n)
			}
			if (n.Family == FamilyEVM) != (n.ChainID != 0) {
				t.Errorf("%s: chain id %d for family %s", name, n.ChainID, n.Family)
			}
		}
	}
	eth, _ := r.Lookup("ethereum")
	if eth.ChainID != 1 || eth.Confirmations != 12 || eth.USDC != "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48" {
		t.Errorf("ethereum = %+v", eth)
	}
	if _, ok := r.Lookup("bitcoin"); ok {
		t.Error("Lookup(bitcoin) found")
	}
	dev, _ := r.Lookup("solana_devnet")
	if got := dev.TxURL("abc"); got != "https://explorer.solana.com/tx/abc?cluster=devnet" {
		t.Errorf("TxURL = %q", got)
	}
}

func TestModeAndFamilyOf(t *testing.T) {
	cases := []struct {
		name   string
		mode   Mode
		family Family
		ok     bool
	}{
		{"base", ModeLive, FamilyEVM, true},
		{"ethereum", ModeLive, FamilyEVM, true},
		{"polygon", ModeLive, FamilyEVM, true},
		{"solana", ModeLive, FamilySolana, true},
		{"base_sepolia", ModeTest, FamilyEVM, true},
		{"eth_sepolia", ModeTest, FamilyEVM, true},
		{"solana_devnet", ModeTest, FamilySolana, true},
		{"BASE", "", "", false},
		{"", "", "", false},
		{"arbitrum", "", "", false},
	}
	for _, tc := range cases {
		m, ok := ModeOf(tc.name)
		f, ok2 := FamilyOf(tc.name)
		if m != tc.mode || f != tc.family || ok != tc.ok || ok2 != tc.ok {
			t.Errorf("%q: mode %q/%v family %q/%v, want %q %q %v", tc.name, m, ok, f, ok2, tc.mode, tc.family, tc.ok)
		}
	}
}

func TestRegistryFromEnv(t *testing.T) {
	env := map[string]string{
		"RPC_URL_BASE_SEPOLIA":       "http://127.0.0.1:8545",
		"USDC_BASE_SEPOLIA":          "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed",
		"CONFIRMATIONS_BASE_SEPOLIA": "2",
		"CHAIN_ID_BASE_SEPOLIA":      "1337",
		"POLL_INTERVAL_BASE_SEPOLIA": "1s",
		"POLL_INTERVAL_SOLANA":       "5",
		"RPC_URL_SOLANA":             "https://solana.example/rpc",
	}
	r, err := RegistryFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	n, _ := r.Lookup("base_sepolia")
	want := Network{
		Name: "base_sepolia", Family: FamilyEVM, Mode: ModeTest, ChainID: 1337,
		RPCURL: "http://127.0.0.1:8545", USDC: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
		Decimals: 6, Confirmations: 2, PollInterval: time.Second, ExplorerURL: "https://sepolia.basescan.org/tx/",
		TokenName: "USDC", TokenVersion: "2",
	}
	if n != want {
		t.Errorf("base_sepolia = %+v\nwant %+v", n, want)
	}
	s, _ := r.Lookup("solana")
	if s.PollInterval != 5*time.Second || s.RPCURL != "https://solana.example/rpc" {
		t.Errorf("solana = %+v", s)
	}
	// Untouched networks keep their defaults.
	def := DefaultRegistry()
	for _, name := range []string{"ethereum", "polygon", "base", "eth_sepolia", "solana_devnet"} {
		a, _ := r.Lookup(name)
		b, _ := def.Lookup(name)
		if a != b {
			t.Errorf("%s changed without overrides: %+v", name, a)
		}
	}
}

func TestRegistryFromEnvErrors(t *testing.T) {
	cases := []struct{ key, value string }{
		{"RPC_URL_ETHEREUM", "localhost:8545"},
		{"USDC_BASE", "0x5AAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"},
		{"USDC_SOLANA", "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed"},
		{"CONFIRMATIONS_POLYGON", "ten"},
		{"CONFIRMATIONS_POLYGON", "0"},
		{"CONFIRMATIONS_POLYGON", "-1"},
		{"CHAIN_ID_ETH_SEPOLIA", "0x1"},
		{"CHAIN_ID_SOLANA_DEVNET", "1"},
		{"POLL_INTERVAL_BASE", "soon"},
		{"POLL_INTERVAL_BASE", "1ns"},
	}
	for _, tc := range cases {
		_, err := RegistryFromEnv(func(k string) string {
			if k == tc.key {
				return tc.value
			}
			return ""
		})
		if err == nil {
			t.Errorf("%s=%q accepted", tc.key, tc.value)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.key+": ") {
			t.Errorf("%s=%q: error %q does not name the variable", tc.key, tc.value, err)
		}
	}
}

func TestRegistrySet(t *testing.T) {
	r := DefaultRegistry()
	n, _ := r.Lookup("eth_sepolia")
	n.RPCURL = "http://127.0.0.1:9999"
	n.ChainID = 1337
	r.Set(n)
	got, _ := r.Lookup("eth_sepolia")
	if got.RPCURL != n.RPCURL || got.ChainID != 1337 {
		t.Errorf("Set not visible: %+v", got)
	}
	var empty Registry
	empty.Set(n)
	if _, ok := empty.Lookup("eth_sepolia"); !ok {
		t.Error("Set on zero Registry lost the network")
	}
}
