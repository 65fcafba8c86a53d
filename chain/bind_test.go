package chain

import (
	"testing"
	"time"
)

func TestBindToSession(t *testing.T) {
	created := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	req := VerifyRequest{PayerAddress: "0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b", NotBefore: created.Add(-10 * time.Minute)}
	ok := VerifyResult{Verdict: VerdictComplete, Payer: "0x75b69029ba0f70f55bb3f688be7bbeef539c031b", BlockTime: created.Add(time.Minute)}
	cases := []struct {
		name   string
		req    VerifyRequest
		res    VerifyResult
		failed bool
	}{
		{"own wallet, after creation (case differs)", req, ok, false},
		{"another wallet", req, VerifyResult{Verdict: VerdictComplete, Payer: "0x8617E340B3D01FA5F11F306F4090FD50E238070D", BlockTime: ok.BlockTime}, true},
		{"payer unknown", req, VerifyResult{Verdict: VerdictComplete, BlockTime: ok.BlockTime}, true},
		{"mined before the session", req, VerifyResult{Verdict: VerdictComplete, Payer: ok.Payer, BlockTime: created.Add(-time.Hour)}, true},
		{"pending is left alone", req, VerifyResult{Verdict: VerdictPending, Payer: "someone else"}, false},
		{"no binding asked", VerifyRequest{}, VerifyResult{Verdict: VerdictComplete, Payer: "x"}, false},
		{"solana addresses compare exactly", VerifyRequest{PayerAddress: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"},
			VerifyResult{Verdict: VerdictComplete, Payer: "epjfwdd5aufqssqem2qn1xzybapc8g4wegGkZwyTDt1v"}, true},
	}
	for _, c := range cases {
		got := BindToSession(c.req, c.res)
		if (got.Verdict == VerdictFailed) != c.failed || (c.failed && (got.Reason != ReasonInvalidTransfer || got.Message == "")) {
			t.Errorf("%s: %+v", c.name, got)
		}
	}
}
