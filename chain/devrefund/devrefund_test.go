package devrefund

import (
	"errors"
	"testing"
)

func TestPayable(t *testing.T) {
	s := func(v string) *string { return &v }
	cases := []struct {
		name     string
		v        View
		noSubmit bool
		ok       bool
		expired  bool
	}{
		{"pending", View{Status: "pending"}, false, true, false},
		{"pending, not submitted", View{Status: "pending"}, true, true, false},
		{"expired, not submitted", View{Status: "failed", FailureReason: s("REFUND_EXPIRED")}, true, true, false},
		{"expired, submitted", View{Status: "failed", FailureReason: s("REFUND_EXPIRED")}, false, false, true},
		{"expired with a hash", View{Status: "failed", FailureReason: s("REFUND_EXPIRED"), TxHash: s("0xab")}, true, false, false},
		{"failed otherwise", View{Status: "failed", FailureReason: s("TX_REVERTED")}, true, false, false},
		{"submitted", View{Status: "submitted", TxHash: s("0xab")}, true, false, false},
		{"succeeded", View{Status: "succeeded", TxHash: s("0xab")}, true, false, false},
	}
	for _, c := range cases {
		err := c.v.Payable(c.noSubmit)
		if (err == nil) != c.ok || errors.Is(err, ErrExpiredNeedsNoSubmit) != c.expired {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
