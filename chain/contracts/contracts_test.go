package contracts

import "testing"

func TestArtifactsLoad(t *testing.T) {
	want := map[string][]string{
		TestUSDC:       {"mint", "transfer", "transferFrom", "approve", "balanceOf", "decimals"},
		LookalikeToken: {"transfer", "decimals"},
		Forwarder:      {"forward"},
		SplitPayer:     {"payTwice"},
		Reverter:       {"payThenRevert"},
	}
	for name, methods := range want {
		a, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range methods {
			if _, ok := a.ABI.Methods[m]; !ok {
				t.Errorf("%s: no method %s", name, m)
			}
		}
	}
	if _, err := Load("Nope"); err == nil {
		t.Error("Load(Nope) succeeded")
	}
	// Both tokens emit the same ERC-20 Transfer event: a verifier can only tell
	// them apart by the emitting contract's address.
	if MustLoad(TestUSDC).ABI.Events["Transfer"].ID != MustLoad(LookalikeToken).ABI.Events["Transfer"].ID {
		t.Error("Transfer topics differ")
	}
}
