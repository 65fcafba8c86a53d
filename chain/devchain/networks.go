package devchain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/paygate/paygate/chain"
)

// NetworkChain is an EVM test network the embedded profile simulates with a
// dev chain of its own.
type NetworkChain struct {
	// Network is the registry name, e.g. "base_sepolia".
	Network string
	// ChainID is the dev chain's id; distinct per network, so an
	// authorization signed for one chain is worthless on the other.
	ChainID uint64
	// Port is the default JSON-RPC port.
	Port int
	// PortEnv is the environment variable that overrides Port.
	PortEnv string
}

// DefaultNetworkChains returns the dev chains of the embedded profile:
// base_sepolia is chain 1337 on port 8545 (DEVCHAIN_PORT), eth_sepolia chain
// 1338 on port 8546 (DEVCHAIN_PORT_ETH_SEPOLIA, default DEVCHAIN_PORT+1).
func DefaultNetworkChains() []NetworkChain {
	return []NetworkChain{
		{Network: chain.NetworkBaseSepolia, ChainID: DefaultChainID, Port: DefaultPort, PortEnv: "DEVCHAIN_PORT"},
		{Network: chain.NetworkEthSepolia, ChainID: DefaultChainID + 1, Port: DefaultPort + 1, PortEnv: "DEVCHAIN_PORT_ETH_SEPOLIA"},
	}
}

// LookupNetworkChain returns the default dev chain of a network name.
func LookupNetworkChain(network string) (NetworkChain, bool) {
	for _, n := range DefaultNetworkChains() {
		if n.Network == network {
			return n, true
		}
	}
	return NetworkChain{}, false
}

// PortsFromEnv reads the dev chains' JSON-RPC ports from the environment
// through getenv (os.Getenv): DEVCHAIN_PORT is base_sepolia's (default 8545);
// every later network's variable defaults to DEVCHAIN_PORT plus its position
// (eth_sepolia: DEVCHAIN_PORT_ETH_SEPOLIA, default DEVCHAIN_PORT+1). An error
// names the bad variable.
func PortsFromEnv(getenv func(string) string) (map[string]int, error) {
	nets := DefaultNetworkChains()
	ports := make(map[string]int, len(nets))
	base := nets[0].Port
	for i, n := range nets {
		port := base + i
		if v := strings.TrimSpace(getenv(n.PortEnv)); v != "" {
			p, err := strconv.Atoi(v)
			if err != nil || p <= 0 || p > 65535 {
				return nil, fmt.Errorf("%s: %q is not a TCP port", n.PortEnv, v)
			}
			port = p
		}
		if i == 0 {
			base = port
		}
		ports[n.Network] = port
	}
	return ports, nil
}

// RPCURLFromEnv returns the JSON-RPC URL of the dev chain of network for a
// client on this machine: DEVCHAIN_RPC_URL when set (it then serves every
// network), otherwise http://127.0.0.1:<port> with the port [PortsFromEnv]
// gives.
func RPCURLFromEnv(network string, getenv func(string) string) (string, error) {
	if v := strings.TrimSpace(getenv("DEVCHAIN_RPC_URL")); v != "" {
		return v, nil
	}
	ports, err := PortsFromEnv(getenv)
	if err != nil {
		return "", err
	}
	port, ok := ports[network]
	if !ok {
		return "", fmt.Errorf("devchain: no dev chain for network %q (only %s); set DEVCHAIN_RPC_URL", network, strings.Join(networkNames(), ", "))
	}
	return "http://" + net.JoinHostPort(DefaultHost, strconv.Itoa(port)), nil
}

func networkNames() []string {
	var out []string
	for _, n := range DefaultNetworkChains() {
		out = append(out, n.Network)
	}
	return out
}

// NetworksConfig configures [StartNetworks]. Zero fields take the defaults.
type NetworksConfig struct {
	// Host is the interface every JSON-RPC server listens on (default 127.0.0.1).
	Host string
	// Ports maps a network name to its JSON-RPC port ([AnyPort]: a free
	// one); a network not listed takes its [NetworkChain] default (see
	// [PortsFromEnv]).
	Ports map[string]int
	// BlockInterval is how often each chain seals a block (default 1s).
	BlockInterval time.Duration
}

// Chains are the running dev chains, one per network.
type Chains struct {
	list []*Chain
}

// StartNetworks starts one dev chain per [DefaultNetworkChains] entry, each
// with its own chain id and port and the same contracts and accounts (same
// addresses: they are different chains). On an error the chains already
// started are closed.
func StartNetworks(ctx context.Context, cfg NetworksConfig) (*Chains, error) {
	cs := &Chains{}
	for _, n := range DefaultNetworkChains() {
		port := n.Port
		if p, ok := cfg.Ports[n.Network]; ok && p != 0 {
			port = p
		}
		c, err := Start(ctx, Config{Host: cfg.Host, Port: port, BlockInterval: cfg.BlockInterval, ChainID: n.ChainID, Network: n.Network})
		if err != nil {
			_ = cs.Close()
			return nil, fmt.Errorf("%s: %w", n.Network, err)
		}
		cs.list = append(cs.list, c)
	}
	return cs, nil
}

// All returns the chains in [DefaultNetworkChains] order.
func (cs *Chains) All() []*Chain { return append([]*Chain(nil), cs.list...) }

// Chain returns the chain of a network name.
func (cs *Chains) Chain(network string) (*Chain, bool) {
	for _, c := range cs.list {
		if c.Network() == network {
			return c, true
		}
	}
	return nil, false
}

// Close shuts every chain down.
func (cs *Chains) Close() error {
	var errs []error
	for _, c := range cs.list {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
