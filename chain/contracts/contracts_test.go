package contracts

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/crypto"
)

func TestArtifactsLoad(t *testing.T) {
	want := map[string][]string{
		TestUSDC: {"mint", "transfer", "transferFrom", "approve", "balanceOf", "decimals", "name", "version",
			"DOMAIN_SEPARATOR", "authorizationState", "TRANSFER_WITH_AUTHORIZATION_TYPEHASH",
			"RECEIVE_WITH_AUTHORIZATION_TYPEHASH", "CANCEL_AUTHORIZATION_TYPEHASH"},
		LookalikeToken: {"transfer", "decimals"},
		Forwarder:      {"forward"},
		SplitPayer:     {"payTwice"},
		Reverter:       {"payThenRevert"},
		SmartWallet:    {"isValidSignature", "execute", "owner"},
		Router:         {"route", "routeWithAuthorization"},
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

// TestUSDCMatchesFiatTokenV2 checks the EIP-3009 surface against FiatToken
// v2.2's: the same function signatures (both overloads), the same event
// topics and the type hashes Circle's contracts hard-code.
func TestUSDCMatchesFiatTokenV2(t *testing.T) {
	a := MustLoad(TestUSDC)
	for _, sig := range []string{
		"transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)",
		"transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)",
		"receiveWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)",
		"receiveWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)",
		"cancelAuthorization(address,bytes32,uint8,bytes32,bytes32)",
		"cancelAuthorization(address,bytes32,bytes)",
		"authorizationState(address,bytes32)",
		"DOMAIN_SEPARATOR()",
		"version()",
	} {
		if _, err := a.MethodBySig(sig); err != nil {
			t.Error(err)
		}
	}
	if _, err := a.MethodBySig("transferWithAuthorization(address)"); err == nil {
		t.Error("MethodBySig found a method that does not exist")
	}
	if _, err := a.PackSig("cancelAuthorization(address,bytes32,bytes)", "not an address"); err == nil {
		t.Error("PackSig accepted bad arguments")
	}
	events := map[string]string{
		"AuthorizationUsed":     "AuthorizationUsed(address,bytes32)",
		"AuthorizationCanceled": "AuthorizationCanceled(address,bytes32)",
		"Transfer":              "Transfer(address,address,uint256)",
	}
	for name, sig := range events {
		ev, ok := a.ABI.Events[name]
		if !ok || ev.ID != crypto.Keccak256Hash([]byte(sig)) {
			t.Errorf("event %s: %+v", name, ev)
		}
		for i, in := range ev.Inputs {
			if want := name != "Transfer" || i < 2; in.Indexed != want {
				t.Errorf("event %s input %s indexed=%v", name, in.Name, in.Indexed)
			}
		}
	}
	// The constants in Circle's contracts/v2/EIP3009.sol and util/EIP712.sol.
	for text, want := range map[string]string{
		"TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)": "7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267",
		"ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)":  "d099cc98ef71107a616c4f0f941f04c322d8e254fe26b3c6668db87aae413de8",
		"CancelAuthorization(address authorizer,bytes32 nonce)":                                                                 "158b0a9edf7a828aad02f63cd515c68ef2f50ba807396f6d12842833a1597429",
		"EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)":                                    "8b73c3c69bb8fe3d512ecc4cf759cc79239f7b179b0ffacaa9a75d522b39400f",
	} {
		if got := hex.EncodeToString(crypto.Keccak256([]byte(text))); got != want {
			t.Errorf("keccak256(%q) = %s, want %s", text, got, want)
		}
	}
}

//go:embed src/*.sol
var sourceFS embed.FS

// TestArtifactsMatchSources recomputes the digest compile.js stamps on every
// artifact from src/: a source edited without running compile.sh fails here.
// (Recompiling reproduces the artifacts byte for byte: solc is pinned and the
// metadata hash is off.)
func TestArtifactsMatchSources(t *testing.T) {
	names, err := fs.Glob(sourceFS, "src/*.sol")
	if err != nil || len(names) == 0 {
		t.Fatalf("sources: %v %v", names, err)
	}
	sort.Strings(names)
	h := sha256.New()
	sources := map[string]bool{}
	for _, n := range names {
		content, err := sourceFS.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		base := strings.TrimPrefix(n, "src/")
		sources[base] = true
		fmt.Fprintf(h, "%s\n%d\n", base, len(content))
		h.Write(content)
	}
	want := hex.EncodeToString(h.Sum(nil))

	artifacts, err := fs.Glob(artifactFS, "artifacts/*.json")
	if err != nil || len(artifacts) == 0 {
		t.Fatalf("artifacts: %v %v", artifacts, err)
	}
	for _, n := range artifacts {
		raw, err := artifactFS.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			ContractName  string `json:"contractName"`
			SourceName    string `json:"sourceName"`
			SourcesSha256 string `json:"sourcesSha256"`
		}
		if err := json.Unmarshal(raw, &meta); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if meta.SourcesSha256 != want {
			t.Errorf("%s was compiled from other sources (%s, src/ is %s): run chain/contracts/compile.sh", n, meta.SourcesSha256, want)
		}
		if !sources[meta.SourceName] {
			t.Errorf("%s: source %q not in src/", n, meta.SourceName)
		}
		if _, err := Load(meta.ContractName); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}
