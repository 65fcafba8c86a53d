package chain

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestBindToSession(t *testing.T) {
	created := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	req := VerifyRequest{PayerAddress: "0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b", NotBefore: created.Add(-10 * time.Minute)}
	ok := VerifyResult{Verdict: VerdictComplete, Payer: "0x75b69029ba0f70f55bb3f688be7bbeef539c031b", BlockTime: created.Add(time.Minute)}
	cases := []struct {
		name            string
		req             VerifyRequest
		res             VerifyResult
		failed, foreign bool
	}{
		{"own wallet, after creation (case differs)", req, ok, false, false},
		// Another wallet's transfer is not the session's payment: the
		// session gives the hash back (Foreign). One from an unknown
		// payer may be the customer's: its failure stands.
		{"another wallet", req, VerifyResult{Verdict: VerdictComplete, Payer: "0x8617E340B3D01FA5F11F306F4090FD50E238070D", BlockTime: ok.BlockTime}, true, true},
		{"payer unknown", req, VerifyResult{Verdict: VerdictComplete, BlockTime: ok.BlockTime}, true, false},
		{"another wallet's USDC, sent by the declared wallet (a router)", req, VerifyResult{Verdict: VerdictComplete,
			Payer: "0x8617E340B3D01FA5F11F306F4090FD50E238070D", SentByDeclared: true, BlockTime: ok.BlockTime}, true, false},
		{"mined before the session", req, VerifyResult{Verdict: VerdictComplete, Payer: ok.Payer, BlockTime: created.Add(-time.Hour)}, true, true},
		{"mined before the session, no wallet declared", VerifyRequest{NotBefore: req.NotBefore},
			VerifyResult{Verdict: VerdictComplete, Payer: ok.Payer, BlockTime: created.Add(-time.Hour)}, true, false},
		{"pending is left alone", req, VerifyResult{Verdict: VerdictPending, Payer: "someone else"}, false, false},
		// The declared wallet's own old short transfer (its address is
		// public): not this session's payment.
		{"a failure mined before the session", req, VerifyResult{Verdict: VerdictFailed, Reason: ReasonInvalidTransfer, Message: "short",
			Payer: ok.Payer, BlockTime: created.Add(-time.Hour)}, true, true},
		{"a failure of the declared wallet's after creation", req, VerifyResult{Verdict: VerdictFailed, Reason: ReasonInvalidTransfer,
			Message: "short", Payer: ok.Payer, BlockTime: ok.BlockTime}, true, false},
		{"no binding asked", VerifyRequest{}, VerifyResult{Verdict: VerdictComplete, Payer: "x"}, false, false},
		{"solana addresses compare exactly", VerifyRequest{PayerAddress: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"},
			VerifyResult{Verdict: VerdictComplete, Payer: "epjfwdd5aufqssqem2qn1xzybapc8g4wegGkZwyTDt1v"}, true, true},
	}
	for _, c := range cases {
		got := BindToSession(c.req, c.res)
		if (got.Verdict == VerdictFailed) != c.failed || (c.failed && (got.Reason != ReasonInvalidTransfer || got.Message == "")) ||
			got.Foreign != c.foreign {
			t.Errorf("%s: %+v", c.name, got)
		}
	}
}

// TestRPCURLNeverInErrors: an RPC failure does not print the provider URL
// (and its API key) into logs or workflow history, yet stays transient.
func TestRPCURLNeverInErrors(t *testing.T) {
	reg := DefaultRegistry()
	n, _ := reg.Lookup(NetworkBaseSepolia)
	n.RPCURL = "http://127.0.0.1:1/v2/SECRETAPIKEY123?key=ALSOSECRET"
	reg.Set(n)
	m := NewMultiVerifier(reg)
	defer m.Close()
	_, err := m.Verify(context.Background(), VerifyRequest{Network: NetworkBaseSepolia,
		TxHash: "0x" + strings.Repeat("ab", 32), MerchantAddress: "0x52908400098527886E0F7030069857D2E4169EE7", ExpectedUnits: "1"})
	if err == nil {
		t.Fatal("an unreachable RPC must be an error")
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("the RPC URL leaks: %v", err)
	}
	t.Logf("error as shown: %v", err)
	if IsPermanent(err) {
		t.Fatalf("an unreachable RPC is transient: %v", err)
	}
}

// PaysInFull: what lets a mined transfer take the place of a hash the
// chain has not shown.
func TestPaysInFull(t *testing.T) {
	const payer = "0xAbCdEf0000000000000000000000000000000001"
	seen := VerifyResult{Seen: true, Verdict: VerdictPending, ReceivedUnits: "5000000", Payer: strings.ToLower(payer)}
	for _, tc := range []struct {
		name   string
		change func(*VerifyResult)
		payer  string
		want   bool
	}{
		{"mined, from the declared wallet (any case), the amount due", nil, payer, true},
		{"complete", func(r *VerifyResult) { r.Verdict = VerdictComplete }, payer, true},
		{"more than due", func(r *VerifyResult) { r.ReceivedUnits = "5000001" }, payer, true},
		{"bound to the session, from another wallet", func(r *VerifyResult) { r.Payer, r.Bound = "0x9", true }, payer, true},
		{"short", func(r *VerifyResult) { r.ReceivedUnits = "4999999" }, payer, false},
		{"from another wallet", func(r *VerifyResult) { r.Payer = "0x9" }, payer, false},
		{"payer unknown", func(r *VerifyResult) { r.Payer = "" }, payer, false},
		{"not on chain", func(r *VerifyResult) { r.Seen = false }, payer, false},
		{"failed", func(r *VerifyResult) { r.Verdict = VerdictFailed }, payer, false},
		{"followed to another transaction", func(r *VerifyResult) { r.PaidBy = "0x1" }, payer, false},
		{"no amount read", func(r *VerifyResult) { r.ReceivedUnits = "" }, payer, false},
		{"no declared wallet", nil, "", false},
		{"carrying another session's reference", func(r *VerifyResult) { r.Refs = []string{"0x5e"} }, payer, false},
		{"bound, carrying another's reference too", func(r *VerifyResult) { r.Refs, r.Bound = []string{"0x5e"}, true }, payer, true},
	} {
		r := seen
		if tc.change != nil {
			tc.change(&r)
		}
		if got := r.PaysInFull(tc.payer, 5_000_000); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
