package chain

import (
	"errors"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/gagliardetto/solana-go"
)

func TestParseAddress(t *testing.T) {
	// 0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed is an EIP-55 test vector.
	const checksummed = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
	cases := []struct {
		name   string
		family Family
		in     string
		want   string
		reason string
	}{
		{"evm checksummed", FamilyEVM, checksummed, checksummed, ""},
		{"evm lower", FamilyEVM, strings.ToLower(checksummed), checksummed, ""},
		{"evm upper", FamilyEVM, "0x" + strings.ToUpper(checksummed[2:]), checksummed, ""},
		{"evm usdc base", FamilyEVM, "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", ""},
		{"evm bad checksum", FamilyEVM, "0x5AAeb6053F3E94C9b9A09f33669435E7Ef1BeAed", "", "has an invalid EIP-55 checksum"},
		{"evm no prefix", FamilyEVM, checksummed[2:], "", "must be a 0x-prefixed 20-byte hex address"},
		{"evm upper prefix", FamilyEVM, "0X" + checksummed[2:], "", "must be a 0x-prefixed 20-byte hex address"},
		{"evm short", FamilyEVM, checksummed[:41], "", "must be a 0x-prefixed 20-byte hex address"},
		{"evm long", FamilyEVM, checksummed + "a", "", "must be a 0x-prefixed 20-byte hex address"},
		{"evm non-hex", FamilyEVM, "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeg", "", "must be a 0x-prefixed 20-byte hex address"},
		{"evm spaces", FamilyEVM, " " + checksummed, "", "must be a 0x-prefixed 20-byte hex address"},
		{"evm zero", FamilyEVM, "0x0000000000000000000000000000000000000000", "", "must not be the zero address"},
		{"evm empty", FamilyEVM, "", "", "must be a 0x-prefixed 20-byte hex address"},
		{"solana usdc mint", FamilySolana, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", ""},
		{"solana token program", FamilySolana, "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA", "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA", ""},
		{"solana invalid char 0", FamilySolana, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt10", "", "must be a base58 Solana address of 32 bytes"},
		{"solana too short", FamilySolana, "EPjFWdd5AufqSSqeM2qN1xzyb", "", "must be a base58 Solana address of 32 bytes"},
		{"solana 33 bytes", FamilySolana, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1vz", "", "must be a base58 Solana address of 32 bytes"},
		{"solana zero", FamilySolana, "11111111111111111111111111111111", "", "must not be the zero address"},
		{"solana too long", FamilySolana, strings.Repeat("z", 129), "", "must be a base58 Solana address of 32 bytes"},
		{"solana given evm", FamilySolana, checksummed, "", "must be a base58 Solana address of 32 bytes"},
		{"evm given solana", FamilyEVM, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "", "must be a 0x-prefixed 20-byte hex address"},
		{"unknown family", Family("btc"), checksummed, "", "unsupported chain family"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAddress(tc.family, tc.in)
			if tc.reason != "" {
				if err == nil {
					t.Fatalf("ParseAddress(%q) = %q, want error %q", tc.in, got, tc.reason)
				}
				if err.Error() != tc.reason {
					t.Fatalf("error = %q, want %q", err, tc.reason)
				}
				if !errors.Is(err, ErrInvalidAddress) {
					t.Fatalf("error %v does not wrap ErrInvalidAddress", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAddress(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("ParseAddress(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseTxHash(t *testing.T) {
	const hex64 = "88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b"
	sig := solana.SignatureFromBytes(append(make([]byte, 0, 64), []byte(strings.Repeat("paygate-", 8))...))
	cases := []struct {
		name   string
		family Family
		in     string
		want   string
		reason string
	}{
		{"evm with prefix", FamilyEVM, "0x" + hex64, "0x" + hex64, ""},
		{"evm without prefix", FamilyEVM, hex64, "0x" + hex64, ""},
		{"evm upper", FamilyEVM, "0x" + strings.ToUpper(hex64), "0x" + hex64, ""},
		{"evm short", FamilyEVM, "0x" + hex64[:62], "", "must be 64 hex characters with an optional 0x prefix"},
		{"evm long", FamilyEVM, "0x" + hex64 + "00", "", "must be 64 hex characters with an optional 0x prefix"},
		{"evm non-hex", FamilyEVM, "0x" + hex64[:63] + "g", "", "must be 64 hex characters with an optional 0x prefix"},
		{"evm double prefix", FamilyEVM, "0x0x" + hex64[:62], "", "must be 64 hex characters with an optional 0x prefix"},
		{"evm empty", FamilyEVM, "", "", "must be 64 hex characters with an optional 0x prefix"},
		{"solana signature", FamilySolana, sig.String(), sig.String(), ""},
		{"solana real signature", FamilySolana,
			"5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnbJLgp8uirBgmQpjKhoR4tjF3ZpRzrFmBV6UjKdiSZkQUW",
			"5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnbJLgp8uirBgmQpjKhoR4tjF3ZpRzrFmBV6UjKdiSZkQUW", ""},
		{"solana hex given", FamilySolana, "0x" + hex64, "", "must be a base58 Solana signature of 64 bytes"},
		{"solana 32 bytes", FamilySolana, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "", "must be a base58 Solana signature of 64 bytes"},
		{"solana invalid char", FamilySolana, sig.String()[:40] + "l" + sig.String()[41:], "", "must be a base58 Solana signature of 64 bytes"},
		{"solana zero", FamilySolana, solana.Signature{}.String(), "", "must not be the zero signature"},
		{"solana empty", FamilySolana, "", "", "must be a base58 Solana signature of 64 bytes"},
		{"unknown family", Family("btc"), hex64, "", "unsupported chain family"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTxHash(tc.family, tc.in)
			if tc.reason != "" {
				if err == nil {
					t.Fatalf("ParseTxHash(%q) = %q, want error %q", tc.in, got, tc.reason)
				}
				if err.Error() != tc.reason {
					t.Fatalf("error = %q, want %q", err, tc.reason)
				}
				if !errors.Is(err, ErrInvalidTxHash) {
					t.Fatalf("error %v does not wrap ErrInvalidTxHash", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTxHash(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("ParseTxHash(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzParseAddress checks that ParseAddress never panics, that what it accepts
// fits SPEC.md's bounds, and that its output is a fixed point.
func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{
		"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
		"0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed",
		"EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
		"11111111111111111111111111111111",
		"", "0x", "0x0", "zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, fam := range []Family{FamilyEVM, FamilySolana} {
			got, err := ParseAddress(fam, s)
			if err != nil {
				if !errors.Is(err, ErrInvalidAddress) {
					t.Fatalf("%s %q: error %v does not wrap ErrInvalidAddress", fam, s, err)
				}
				continue
			}
			body := strings.TrimPrefix(got, "0x")
			if len(body) < minAddressChars || len(body) > maxAddressChars || !isAlnum(body) {
				t.Fatalf("%s %q: accepted %q outside SPEC bounds", fam, s, got)
			}
			again, err := ParseAddress(fam, got)
			if err != nil || again != got {
				t.Fatalf("%s %q: canonical form %q does not re-parse to itself (%q, %v)", fam, s, got, again, err)
			}
			if fam == FamilyEVM && !common.IsHexAddress(got) {
				t.Fatalf("%q accepted but go-ethereum disagrees", got)
			}
		}
	})
}

// FuzzParseTxHash checks that ParseTxHash never panics and that its output is a
// fixed point of the right shape.
func FuzzParseTxHash(f *testing.F) {
	for _, s := range []string{
		"0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b",
		"88DF016429689C079F3B2F6AD39FA052532C56795B733DA78A91EBE6A713944B",
		"5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnbJLgp8uirBgmQpjKhoR4tjF3ZpRzrFmBV6UjKdiSZkQUW",
		"", "0x", "1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, fam := range []Family{FamilyEVM, FamilySolana} {
			got, err := ParseTxHash(fam, s)
			if err != nil {
				if !errors.Is(err, ErrInvalidTxHash) {
					t.Fatalf("%s %q: error %v does not wrap ErrInvalidTxHash", fam, s, err)
				}
				continue
			}
			if fam == FamilyEVM && (len(got) != 66 || got != strings.ToLower(got)) {
				t.Fatalf("%q: bad canonical form %q", s, got)
			}
			again, err := ParseTxHash(fam, got)
			if err != nil || again != got {
				t.Fatalf("%s %q: canonical form %q does not re-parse to itself (%q, %v)", fam, s, got, again, err)
			}
		}
	})
}
