package main

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/paygate/paygate/chain/devchain"
)

func TestParseDevPay(t *testing.T) {
	addr := func(o devchain.PayOptions) string { return crypto.PubkeyToAddress(o.Key.PublicKey).Hex() }
	customer := crypto.PubkeyToAddress(devchain.CustomerKey().PublicKey).Hex()
	stranger := crypto.PubkeyToAddress(devchain.StrangerKey().PublicKey).Hex()

	o, err := parseDevPay([]string{"cs_1"})
	if err != nil || o.SessionID != "cs_1" || o.Units != nil || addr(o) != customer || o.Plain || o.Relay || o.ViaRouter || o.NoSubmit || o.SubmitTo != "" {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	// Flags before and after the arguments.
	o, err = parseDevPay([]string{"--plain", "cs_1", "--from", "stranger", "999", "--via", "router", "--submit-to", "cs_2"})
	if err != nil || o.SessionID != "cs_1" || o.Units.Int64() != 999 || !o.Plain || !o.ViaRouter || addr(o) != stranger || o.SubmitTo != "cs_2" {
		t.Fatalf("mixed: %+v %v", o, err)
	}
	o, err = parseDevPay([]string{"cs_1", "--relay", "-from=0x" + devchain.ExchangeKeyHex})
	if err != nil || !o.Relay || addr(o) != crypto.PubkeyToAddress(devchain.ExchangeKey().PublicKey).Hex() {
		t.Fatalf("relay from a key: %+v %v", o, err)
	}
	if _, err := parseDevPay([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("help: %v", err)
	}
	for _, bad := range [][]string{
		{}, {"cs_1", "1", "2"}, {"cs_1", "0"}, {"cs_1", "1.5"}, {"cs_1", "--via", "bridge"},
		{"cs_1", "--from", "mallory"}, {"cs_1", "--from", "0xzz"}, {"cs_1", "--nope"}, {"cs_1", "--submit-to"},
	} {
		var ue usageError
		if _, err := parseDevPay(bad); !errors.As(err, &ue) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestDevPayUsageDocumentsEveryFlag(t *testing.T) {
	for _, f := range []string{"--plain", "--from", "--via router", "--relay", "--no-submit", "--submit-to", "--speed-up"} {
		if !strings.Contains(devPayUsage, f) || !strings.Contains(usage, f) {
			t.Errorf("%s missing from the usage", f)
		}
	}
}

// RELAYER_MAX_FEE_GWEI: unset is no bound; a positive whole number of gwei
// is that many wei ×10⁹; anything else is refused at start.
func TestMaxRelayFee(t *testing.T) {
	if v, err := maxRelayFee(""); v != nil || err != nil {
		t.Fatalf("unset: %v %v", v, err)
	}
	if v, err := maxRelayFee("250"); err != nil || v.String() != "250000000000" {
		t.Fatalf("250: %v %v", v, err)
	}
	for _, bad := range []string{"0", "-1", "1.5", "lots", "99999999999"} {
		if _, err := maxRelayFee(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
