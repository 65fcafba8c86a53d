package devrefund

import "testing"

func TestPayable(t *testing.T) {
	s := func(v string) *string { return &v }
	cases := []struct {
		name string
		v    View
		ok   bool
	}{
		{"pending", View{Status: "pending"}, true},
		{"expired", View{Status: "failed", FailureReason: s("REFUND_EXPIRED")}, true},
		{"expired with a hash", View{Status: "failed", FailureReason: s("REFUND_EXPIRED"), TxHash: s("0xab")}, false},
		{"failed otherwise", View{Status: "failed", FailureReason: s("TX_REVERTED")}, false},
		{"submitted", View{Status: "submitted", TxHash: s("0xab")}, false},
		{"succeeded", View{Status: "succeeded", TxHash: s("0xab")}, false},
	}
	for _, c := range cases {
		if err := c.v.Payable(); (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
