// Package contracts embeds the compiled Solidity contracts of the dev chain and
// the chain tests: a test USDC (ERC-20, 6 decimals, owner-minted), a look-alike
// token, a forwarding contract, a contract making two transfers in one
// transaction and one that reverts after transferring.
//
// The sources live in src/, the compiled ABI and bytecode in artifacts/
// (produced by compile.sh with solc from the npm registry and committed), so
// building paygate needs neither node nor solc.
package contracts

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common/hexutil"
)

//go:embed artifacts/*.json
var artifactFS embed.FS

// Names of the embedded contracts.
const (
	// TestUSDC is the dev chain's USDC: ERC-20, 6 decimals, mint(to, value) by the owner.
	TestUSDC = "TestUSDC"
	// LookalikeToken names itself USDC and emits Transfer events out of thin air.
	LookalikeToken = "LookalikeToken"
	// Forwarder pays through a contract: forward(token, to, value) uses transferFrom.
	Forwarder = "Forwarder"
	// SplitPayer makes two transfers in one transaction: payTwice(token, to, first, secondTo, second).
	SplitPayer = "SplitPayer"
	// Reverter transfers and then reverts: payThenRevert(token, to, value).
	Reverter = "Reverter"
)

// Artifact is one compiled contract.
type Artifact struct {
	// Name is the contract name, e.g. "TestUSDC".
	Name string
	// ABI is the parsed contract ABI.
	ABI abi.ABI
	// Bytecode is the creation bytecode.
	Bytecode []byte
}

type artifactJSON struct {
	ContractName string          `json:"contractName"`
	ABI          json.RawMessage `json:"abi"`
	Bytecode     string          `json:"bytecode"`
}

var (
	cacheMu sync.Mutex
	cache   = map[string]*Artifact{}
)

// Load returns the embedded artifact of the named contract.
func Load(name string) (*Artifact, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if a, ok := cache[name]; ok {
		return a, nil
	}
	raw, err := artifactFS.ReadFile("artifacts/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("contracts: no artifact %q", name)
	}
	var aj artifactJSON
	if err := json.Unmarshal(raw, &aj); err != nil {
		return nil, fmt.Errorf("contracts: decode %s: %w", name, err)
	}
	parsed, err := abi.JSON(bytes.NewReader(aj.ABI))
	if err != nil {
		return nil, fmt.Errorf("contracts: abi of %s: %w", name, err)
	}
	code, err := hexutil.Decode(aj.Bytecode)
	if err != nil || len(code) == 0 {
		return nil, fmt.Errorf("contracts: bytecode of %s: %v", name, err)
	}
	a := &Artifact{Name: name, ABI: parsed, Bytecode: code}
	cache[name] = a
	return a, nil
}

// MustLoad is [Load] for the embedded names above; it panics on a broken build.
func MustLoad(name string) *Artifact {
	a, err := Load(name)
	if err != nil {
		panic(err)
	}
	return a
}
