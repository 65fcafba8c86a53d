// Package contracts embeds the compiled Solidity contracts of the dev chain and
// the chain tests: a test USDC (ERC-20, 6 decimals, owner-minted, EIP-3009
// transfers with authorization as Circle's FiatToken v2.2), a look-alike
// token, a forwarding contract, a contract making two transfers in one
// transaction, one that reverts after transferring, an EIP-1271 contract
// wallet and a router that pays out of its own balance.
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
	// TestUSDC is the dev chain's USDC: ERC-20, 6 decimals, mint(to, value) by
	// the owner, and EIP-3009 with FiatToken v2.2's EIP-712 domain (name(),
	// version "2", chain id, the token): transferWithAuthorization,
	// receiveWithAuthorization and cancelAuthorization, each with (v, r, s) and
	// with bytes signature, authorizationState, DOMAIN_SEPARATOR, and the
	// events AuthorizationUsed (emitted before its Transfer) and
	// AuthorizationCanceled.
	TestUSDC = "TestUSDC"
	// LookalikeToken names itself USDC and emits Transfer events out of thin air.
	LookalikeToken = "LookalikeToken"
	// Forwarder pays through a contract: forward(token, to, value) uses transferFrom.
	Forwarder = "Forwarder"
	// SplitPayer makes two transfers in one transaction: payTwice(token, to, first, secondTo, second).
	SplitPayer = "SplitPayer"
	// Reverter transfers and then reverts: payThenRevert(token, to, value).
	Reverter = "Reverter"
	// SmartWallet is an EIP-1271 contract wallet of one owner (constructor
	// argument): isValidSignature(hash, sig) accepts the owner's ECDSA
	// signature over hash; execute(to, data) lets the owner move its funds.
	SmartWallet = "SmartWallet"
	// Router stands in for a swap router: route(token, to, value) pulls the
	// caller's tokens into the router with transferFrom, then pays `to` from
	// the router; routeWithAuthorization(token, from, to, value, validAfter,
	// validBefore, nonce, signature) does the same with an EIP-3009
	// authorization made out to the router. Either way the payee's Transfer
	// comes from the router.
	Router = "Router"
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

// MethodBySig returns the method with the given signature, e.g.
// "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)".
// Overloaded methods get numbered names in go-ethereum's ABI
// ("transferWithAuthorization0"), in the order the ABI lists them; the
// signature names one without depending on that order.
func (a *Artifact) MethodBySig(sig string) (abi.Method, error) {
	for _, m := range a.ABI.Methods {
		if m.Sig == sig {
			return m, nil
		}
	}
	return abi.Method{}, fmt.Errorf("contracts: %s has no method %s", a.Name, sig)
}

// PackSig packs a call of the method with the given signature (see
// [Artifact.MethodBySig]) with args.
func (a *Artifact) PackSig(sig string, args ...any) ([]byte, error) {
	m, err := a.MethodBySig(sig)
	if err != nil {
		return nil, err
	}
	in, err := m.Inputs.Pack(args...)
	if err != nil {
		return nil, fmt.Errorf("contracts: pack %s.%s: %w", a.Name, sig, err)
	}
	return append(append([]byte{}, m.ID...), in...), nil
}

// MustLoad is [Load] for the embedded names above; it panics on a broken build.
func MustLoad(name string) *Artifact {
	a, err := Load(name)
	if err != nil {
		panic(err)
	}
	return a
}
