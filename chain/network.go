// Package chain holds the network registry, the parsers for on-chain identifiers
// (wallet addresses, transaction hashes) and the verifiers that decide whether a
// submitted transaction paid a merchant in USDC.
//
// Everything that differs between networks (chain id, RPC URL, USDC contract or
// mint, confirmations, poll interval) is data in a [Network], kept in a
// [Registry]; nothing network-specific is buried in the verifiers.
package chain

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Family is the kind of chain a network belongs to; it decides the address and
// hash formats and which verifier handles the network.
type Family string

const (
	// FamilyEVM covers Ethereum and the EVM-compatible chains (Base, Polygon).
	FamilyEVM Family = "evm"
	// FamilySolana covers Solana mainnet and devnet.
	FamilySolana Family = "solana"
)

// Mode says whether a network moves real money (live) or is a sandbox (test).
type Mode string

const (
	// ModeTest is the sandbox: testnets, no real money.
	ModeTest Mode = "test"
	// ModeLive is production: mainnets, real money.
	ModeLive Mode = "live"
)

// Network names as they appear in the API (SPEC.md, "Networks").
const (
	// NetworkBase is Base mainnet (live).
	NetworkBase = "base"
	// NetworkEthereum is Ethereum mainnet (live).
	NetworkEthereum = "ethereum"
	// NetworkPolygon is Polygon PoS mainnet (live).
	NetworkPolygon = "polygon"
	// NetworkSolana is Solana mainnet-beta (live).
	NetworkSolana = "solana"
	// NetworkBaseSepolia is the Base Sepolia testnet (test).
	NetworkBaseSepolia = "base_sepolia"
	// NetworkEthSepolia is the Ethereum Sepolia testnet (test).
	NetworkEthSepolia = "eth_sepolia"
	// NetworkSolanaDevnet is Solana devnet (test).
	NetworkSolanaDevnet = "solana_devnet"
)

// USDCDecimals is the number of decimals of USDC on every supported network.
const USDCDecimals uint8 = 6

// Network is the configuration of one supported network.
type Network struct {
	// Name is the API name of the network, e.g. "base_sepolia".
	Name string
	// Family is the chain family (EVM or Solana).
	Family Family
	// Mode is test for testnets, live for mainnets.
	Mode Mode
	// ChainID is the EIP-155 chain id of an EVM network; 0 for Solana.
	ChainID uint64
	// RPCURL is the JSON-RPC endpoint used to read the chain.
	RPCURL string
	// USDC is the token contract (EVM, EIP-55 form) or the mint (Solana, base58).
	USDC string
	// Decimals is the number of decimals of the USDC token (6).
	Decimals uint8
	// Confirmations is the number of blocks, counting the block holding the
	// transaction, that must exist before an EVM payment is complete. Solana
	// verification relies on the finalized commitment instead and ignores it.
	Confirmations uint64
	// PollInterval is how often a watcher should re-check a pending transaction.
	PollInterval time.Duration
	// ExplorerURL is the prefix of a transaction's page in a block explorer;
	// the transaction hash is appended to it (see [Network.TxURL]).
	ExplorerURL string
	// ExplorerSuffix is appended after the hash, e.g. "?cluster=devnet".
	ExplorerSuffix string
	// TokenName and TokenVersion are the name and version of the USDC
	// contract's EIP-712 domain (EVM): a wallet signs the EIP-3009
	// authorization of a payment under that domain.
	TokenName    string
	TokenVersion string
	// GenesisHash is the Solana cluster's genesis hash; the verifier refuses
	// an RPC endpoint of another cluster as it refuses an EVM endpoint of
	// another chain id. Empty: not checked.
	GenesisHash string
}

// TxURL returns the block-explorer page of a transaction on this network, or ""
// when the network has no explorer configured.
func (n Network) TxURL(txHash string) string {
	if n.ExplorerURL == "" {
		return ""
	}
	return n.ExplorerURL + txHash + n.ExplorerSuffix
}

// staticNetworks fixes the family and mode of every network name; they never
// change with configuration (a test key must never reach a mainnet).
var staticNetworks = map[string]struct {
	family Family
	mode   Mode
}{
	NetworkBase:         {FamilyEVM, ModeLive},
	NetworkEthereum:     {FamilyEVM, ModeLive},
	NetworkPolygon:      {FamilyEVM, ModeLive},
	NetworkSolana:       {FamilySolana, ModeLive},
	NetworkBaseSepolia:  {FamilyEVM, ModeTest},
	NetworkEthSepolia:   {FamilyEVM, ModeTest},
	NetworkSolanaDevnet: {FamilySolana, ModeTest},
}

// ModeOf returns the mode of a known network name: base_sepolia, eth_sepolia and
// solana_devnet are test; base, ethereum, polygon and solana are live.
func ModeOf(network string) (Mode, bool) {
	s, ok := staticNetworks[network]
	return s.mode, ok
}

// FamilyOf returns the chain family of a known network name.
func FamilyOf(network string) (Family, bool) {
	s, ok := staticNetworks[network]
	return s.family, ok
}

// defaultNetworks are the seven networks of SPEC.md. Confirmations follow each
// chain's practical finality: Ethereum 12 blocks (~2.5 min, past the usual
// reorg depth; full finality is 2 epochs), Base 10 L2 blocks (~20 s; the
// sequencer does not reorg unsafe blocks in practice), Polygon PoS 64 blocks
// (~2 min; Polygon had deep reorgs before its fast-finality upgrade), testnets
// fewer. Solana uses the finalized commitment, so its count is informational.
func defaultNetworks() []Network {
	return []Network{
		{
			Name: NetworkEthereum, Family: FamilyEVM, Mode: ModeLive, ChainID: 1,
			RPCURL:   "https://ethereum-rpc.publicnode.com",
			USDC:     "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48",
			Decimals: USDCDecimals, Confirmations: 12, PollInterval: 12 * time.Second,
			ExplorerURL: "https://etherscan.io/tx/", TokenName: "USD Coin", TokenVersion: "2",
		},
		{
			Name: NetworkBase, Family: FamilyEVM, Mode: ModeLive, ChainID: 8453,
			RPCURL:   "https://mainnet.base.org",
			USDC:     "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
			Decimals: USDCDecimals, Confirmations: 10, PollInterval: 2 * time.Second,
			ExplorerURL: "https://basescan.org/tx/", TokenName: "USD Coin", TokenVersion: "2",
		},
		{
			Name: NetworkPolygon, Family: FamilyEVM, Mode: ModeLive, ChainID: 137,
			RPCURL:   "https://polygon-rpc.com",
			USDC:     "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359",
			Decimals: USDCDecimals, Confirmations: 64, PollInterval: 2 * time.Second,
			ExplorerURL: "https://polygonscan.com/tx/", TokenName: "USD Coin", TokenVersion: "2",
		},
		{
			Name: NetworkSolana, Family: FamilySolana, Mode: ModeLive,
			RPCURL:      "https://api.mainnet-beta.solana.com",
			GenesisHash: "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d",
			USDC:        "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
			Decimals:    USDCDecimals, Confirmations: 1, PollInterval: 2 * time.Second,
			ExplorerURL: "https://explorer.solana.com/tx/",
		},
		{
			Name: NetworkBaseSepolia, Family: FamilyEVM, Mode: ModeTest, ChainID: 84532,
			RPCURL:   "https://sepolia.base.org",
			USDC:     "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
			Decimals: USDCDecimals, Confirmations: 3, PollInterval: 2 * time.Second,
			ExplorerURL: "https://sepolia.basescan.org/tx/", TokenName: "USDC", TokenVersion: "2",
		},
		{
			Name: NetworkEthSepolia, Family: FamilyEVM, Mode: ModeTest, ChainID: 11155111,
			RPCURL:   "https://ethereum-sepolia-rpc.publicnode.com",
			USDC:     "0x1c7D4B196Cb0C7B01d743Fbc6116a902379C7238",
			Decimals: USDCDecimals, Confirmations: 3, PollInterval: 12 * time.Second,
			ExplorerURL: "https://sepolia.etherscan.io/tx/", TokenName: "USDC", TokenVersion: "2",
		},
		{
			Name: NetworkSolanaDevnet, Family: FamilySolana, Mode: ModeTest,
			RPCURL:      "https://api.devnet.solana.com",
			GenesisHash: "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG",
			USDC:        "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU",
			Decimals:    USDCDecimals, Confirmations: 1, PollInterval: 2 * time.Second,
			ExplorerURL: "https://explorer.solana.com/tx/", ExplorerSuffix: "?cluster=devnet",
		},
	}
}

// Registry holds the configuration of every supported network. It is safe for
// concurrent use: the dev profile may [Registry.Set] networks while other
// goroutines look them up.
type Registry struct {
	mu       sync.RWMutex
	networks map[string]Network
}

// NewRegistry returns a registry holding exactly the given networks.
func NewRegistry(networks ...Network) *Registry {
	r := &Registry{networks: make(map[string]Network, len(networks))}
	for _, n := range networks {
		r.networks[n.Name] = n
	}
	return r
}

// DefaultRegistry returns the seven networks of SPEC.md with the canonical USDC
// addresses of DESIGN.md and public RPC endpoints.
func DefaultRegistry() *Registry {
	return NewRegistry(defaultNetworks()...)
}

// RegistryFromEnv returns [DefaultRegistry] with per-network overrides read
// through getenv: RPC_URL_<NETWORK>, USDC_<NETWORK>, CONFIRMATIONS_<NETWORK>,
// CHAIN_ID_<NETWORK>, POLL_INTERVAL_<NETWORK>, USDC_NAME_<NETWORK> and
// USDC_VERSION_<NETWORK> (the token's EIP-712 domain), where <NETWORK> is the
// upper-cased network name (e.g. RPC_URL_BASE_SEPOLIA). POLL_INTERVAL takes a
// Go duration ("2s") or whole seconds ("2"). An empty variable keeps the
// default. The error names the first bad variable.
func RegistryFromEnv(getenv func(string) string) (*Registry, error) {
	r := DefaultRegistry()
	for _, name := range r.allNames() {
		n, _ := r.Lookup(name)
		suffix := strings.ToUpper(name)

		if v := getenv("RPC_URL_" + suffix); v != "" {
			if !strings.Contains(v, "://") {
				return nil, fmt.Errorf("RPC_URL_%s: must be an absolute URL (http, https, ws or wss)", suffix)
			}
			n.RPCURL = v
		}
		if v := getenv("USDC_" + suffix); v != "" {
			addr, err := ParseAddress(n.Family, v)
			if err != nil {
				return nil, fmt.Errorf("USDC_%s: %w", suffix, err)
			}
			n.USDC = addr
		}
		if v := getenv("CONFIRMATIONS_" + suffix); v != "" {
			c, err := strconv.ParseUint(v, 10, 64)
			if err != nil || c == 0 {
				return nil, fmt.Errorf("CONFIRMATIONS_%s: must be a positive integer", suffix)
			}
			n.Confirmations = c
		}
		if v := getenv("CHAIN_ID_" + suffix); v != "" {
			if n.Family != FamilyEVM {
				return nil, fmt.Errorf("CHAIN_ID_%s: only EVM networks have a chain id", suffix)
			}
			id, err := strconv.ParseUint(v, 10, 64)
			if err != nil || id == 0 {
				return nil, fmt.Errorf("CHAIN_ID_%s: must be a positive integer", suffix)
			}
			n.ChainID = id
		}
		if v := getenv("GENESIS_HASH_" + suffix); v != "" {
			if n.Family != FamilySolana {
				return nil, fmt.Errorf("GENESIS_HASH_%s: only Solana networks have a genesis hash", suffix)
			}
			n.GenesisHash = v
		}
		if v := getenv("USDC_NAME_" + suffix); v != "" {
			n.TokenName = v
		}
		if v := getenv("USDC_VERSION_" + suffix); v != "" {
			n.TokenVersion = v
		}
		if v := getenv("POLL_INTERVAL_" + suffix); v != "" {
			d, err := parseInterval(v)
			if err != nil {
				return nil, fmt.Errorf("POLL_INTERVAL_%s: %w", suffix, err)
			}
			n.PollInterval = d
		}
		r.Set(n)
	}
	return r, nil
}

func parseInterval(v string) (time.Duration, error) {
	var d time.Duration
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		d = time.Duration(secs) * time.Second
	} else if d, err = time.ParseDuration(v); err != nil {
		return 0, fmt.Errorf("must be a duration such as 2s or 500ms")
	}
	if d < 100*time.Millisecond || d > time.Hour {
		return 0, fmt.Errorf("must be between 100ms and 1h")
	}
	return d, nil
}

// Lookup returns the configuration of a network by its API name.
func (r *Registry) Lookup(name string) (Network, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n, ok := r.networks[name]
	return n, ok
}

// Set adds or replaces the configuration of the network n.Name. The dev profile
// uses it to point the testnets at the local dev chain.
func (r *Registry) Set(n Network) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.networks == nil {
		r.networks = make(map[string]Network)
	}
	r.networks[n.Name] = n
}

// Names returns the sorted names of the registered networks of a mode.
func (r *Registry) Names(mode Mode) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var names []string
	for name, n := range r.networks {
		if n.Mode == mode {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func (r *Registry) allNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.networks))
	for name := range r.networks {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
