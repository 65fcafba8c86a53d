// Package devchain runs local EVM chains for development: go-ethereum's
// simulated backend (ethclient/simulated) served over JSON-RPC on loopback,
// sealing a block every second, with the project's test USDC (EIP-3009, as
// Circle's FiatToken v2.2) and a Router deployed, and fixed funded accounts
// whose private keys are public: a customer, a relayer, a stranger, an
// exchange hot wallet and a merchant's receiving wallet ([DevAccounts]).
//
// The embedded default profile runs one chain per EVM test network, each with
// its own chain id ([StartNetworks], [DefaultNetworkChains]): base_sepolia is
// chain 1337 on port 8545, eth_sepolia chain 1338 on port 8546, so a payment on
// one can never pay a session on the other. [DevNetworks] points the registry
// at them; [PaySession] does what a customer's wallet does.
//
// State does NOT survive a restart. The simulated backend keeps the chain in
// memory only; every [Start] begins again at block 0. Because the deployer
// key and the deployment order are fixed, the test USDC always has the same
// address ([USDCAddress], the same on every dev chain) and the accounts start
// with the same balances, so configuration stays valid across restarts; but
// transactions from an earlier run are gone, and a session submitted before a
// restart will never see its transaction confirmed.
package devchain

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/node"
	"github.com/ethereum/go-ethereum/params"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/contracts"
)

// Defaults of [Config].
const (
	// DefaultHost is the loopback interface the JSON-RPC server listens on.
	DefaultHost = "127.0.0.1"
	// DefaultPort is the usual Ethereum JSON-RPC port.
	DefaultPort = 8545
	// DefaultBlockInterval seals a block every second.
	DefaultBlockInterval = time.Second
	// DefaultChainID is the chain id of go-ethereum's dev and simulated chains.
	DefaultChainID uint64 = 1337
	// DevConfirmations is the confirmation count [DevNetworks] sets: low, so a
	// dev checkout completes in about two seconds, yet above 1 so the
	// "confirming" state is visible.
	DevConfirmations = 2
)

// Fixed development keys, each keccak256 of a phrase. They are public: never
// use them on a real network.
const (
	// DeployerKeyHex is the private key that deploys the test USDC as its first
	// transaction, which fixes the token's address, and the Router as its
	// second. It owns the token (mints).
	// It is keccak256("paygate devchain deployer"), address
	// 0x5Bd531243E00C9Bb8c9ded0B02f73bdf6aD93D79; the token lands at
	// 0x311ac7C1fD17a484149813050b1084cfa1519dbA, the Router at
	// 0xCf0dd36cAE8b4eE4CBdA4E5A6D000a4B3FE7f507.
	DeployerKeyHex = "ed6cf0fbb614f8a7f0131bb3f890104263e5e04c06c37275f177161c64f1b9f8"
	// CustomerKeyHex is the private key of the funded customer wallet
	// (ETH for gas and test USDC), to import into a browser wallet or to use
	// with [PaySession]. It is keccak256("paygate devchain customer"), address
	// 0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b.
	CustomerKeyHex = "c5e74dbbc8e3d24e26d18f90c2003a28ddc2c1d44be1d2d5fdf49cbafac7a0f6"
	// RelayerKeyHex is the private key of a relayer that broadcasts EIP-3009
	// authorizations for customers and pays their gas: ETH only, no USDC.
	// It is keccak256("paygate devchain relayer"), address
	// 0x2dDf076d86a5667B4626F843C0544beaCEfFB971.
	RelayerKeyHex = "2a541ce58c1e7ae62f449e416d009b9c1a7d01d3b9021e4873b5001a3148123f"
	// StrangerKeyHex is the private key of an attacker: a funded wallet (ETH
	// and test USDC) that is no session's customer.
	// It is keccak256("paygate devchain stranger"), address
	// 0x0a8548D940D290aBb8B32990FbA88a7696257aeb.
	StrangerKeyHex = "e5d0ecda58197018736c1f1b9bd6e2b4f2254319869dcf8419c161105528a58f"
	// ExchangeKeyHex is the private key of an exchange's hot wallet (ETH and
	// test USDC): a withdrawal from an exchange pays from an address the
	// customer does not control.
	// It is keccak256("paygate devchain exchange"), address
	// 0x2AF7e6211706Ad2870618d27471d1AE0f77F3533.
	ExchangeKeyHex = "3ea9bc4524c70d8b4eaab98a1114f794059b268fa2c24faf80e419bdac871abb"
	// MerchantKeyHex is the private key of a merchant's receiving wallet
	// (ETH and test USDC): a merchant that sets its address as its EVM
	// wallet receives payments there and pays refunds from it
	// (`paygate dev refund`, [PayRefund]).
	// It is keccak256("paygate devchain merchant"), address
	// 0xeB01CCe32d2bBDdD0Bd5953B094284D3B0a6B6F9.
	MerchantKeyHex = "62d0bd2c6dc3a4fae6b86c0f02abd639291fb7fde1cb35c0178fffb652221f74"
)

// Initial balances of the funded accounts.
var (
	// CustomerETH is the starting ether of every dev account: 1,000 ETH for gas.
	CustomerETH = new(big.Int).Mul(big.NewInt(1000), big.NewInt(params.Ether))
	// CustomerUSDCUnits is the starting test USDC of the customer, the
	// stranger and the exchange: 1,000,000 USDC in integer units (6 decimals).
	CustomerUSDCUnits = big.NewInt(1_000_000_000_000)
)

// Names of the [DevAccounts].
const (
	AccountCustomer = "customer"
	AccountRelayer  = "relayer"
	AccountStranger = "stranger"
	AccountExchange = "exchange"
	AccountMerchant = "merchant"
)

// DevAccount is a fixed account funded at genesis on every dev chain.
type DevAccount struct {
	// Name is "customer", "relayer", "stranger", "exchange" or "merchant".
	Name string
	// KeyHex is the public private key (hex, no 0x).
	KeyHex string
	// Role says what the account is for.
	Role string
	// ETH is the starting ether in wei.
	ETH *big.Int
	// USDCUnits is the starting test USDC in integer units; nil for none.
	USDCUnits *big.Int
}

// Key returns the account's private key.
func (a DevAccount) Key() *ecdsa.PrivateKey { return mustHexKey(a.KeyHex) }

// Address returns the account's address.
func (a DevAccount) Address() common.Address { return crypto.PubkeyToAddress(a.Key().PublicKey) }

// DevAccounts returns the funded accounts of every dev chain, customer first.
func DevAccounts() []DevAccount {
	return []DevAccount{
		{Name: AccountCustomer, KeyHex: CustomerKeyHex, Role: "pays checkouts (paygate dev pay)", ETH: CustomerETH, USDCUnits: CustomerUSDCUnits},
		{Name: AccountRelayer, KeyHex: RelayerKeyHex, Role: "broadcasts authorizations for customers, pays their gas", ETH: CustomerETH},
		{Name: AccountStranger, KeyHex: StrangerKeyHex, Role: "an attacker, no session's customer", ETH: CustomerETH, USDCUnits: CustomerUSDCUnits},
		{Name: AccountExchange, KeyHex: ExchangeKeyHex, Role: "an exchange hot wallet (withdrawals)", ETH: CustomerETH, USDCUnits: CustomerUSDCUnits},
		{Name: AccountMerchant, KeyHex: MerchantKeyHex, Role: "a merchant's receiving wallet: set it as your EVM wallet, pays refunds (paygate dev refund)",
			ETH: CustomerETH, USDCUnits: CustomerUSDCUnits},
	}
}

// LookupAccount returns the dev account called name.
func LookupAccount(name string) (DevAccount, bool) {
	for _, a := range DevAccounts() {
		if a.Name == name {
			return a, true
		}
	}
	return DevAccount{}, false
}

// DeployerKey returns the fixed deployer key.
func DeployerKey() *ecdsa.PrivateKey { return mustHexKey(DeployerKeyHex) }

// CustomerKey returns the fixed customer key.
func CustomerKey() *ecdsa.PrivateKey { return mustHexKey(CustomerKeyHex) }

// RelayerKey returns the fixed relayer key.
func RelayerKey() *ecdsa.PrivateKey { return mustHexKey(RelayerKeyHex) }

// StrangerKey returns the fixed stranger (attacker) key.
func StrangerKey() *ecdsa.PrivateKey { return mustHexKey(StrangerKeyHex) }

// ExchangeKey returns the fixed exchange hot-wallet key.
func ExchangeKey() *ecdsa.PrivateKey { return mustHexKey(ExchangeKeyHex) }

// MerchantKey returns the fixed merchant wallet key (pays refunds).
func MerchantKey() *ecdsa.PrivateKey { return mustHexKey(MerchantKeyHex) }

// MerchantAddress is the dev merchant wallet's address.
func MerchantAddress() common.Address { return crypto.PubkeyToAddress(MerchantKey().PublicKey) }

// USDCAddress is the address of the test USDC on every dev chain: the first
// contract created by the deployer.
var USDCAddress = crypto.CreateAddress(crypto.PubkeyToAddress(DeployerKey().PublicKey), 0)

// RouterAddress is the address of the Router (contracts.Router) on every dev
// chain: the deployer's second contract.
var RouterAddress = crypto.CreateAddress(crypto.PubkeyToAddress(DeployerKey().PublicKey), 1)

func mustHexKey(h string) *ecdsa.PrivateKey {
	k, err := crypto.HexToECDSA(h)
	if err != nil {
		panic(err)
	}
	return k
}

// Config configures a dev chain. Zero fields take the defaults.
type Config struct {
	// Host is the interface the JSON-RPC server listens on (default 127.0.0.1).
	Host string
	// Port is the JSON-RPC port (default 8545); AnyPort picks a free one.
	Port int
	// BlockInterval is how often a block is sealed, transactions or not
	// (default 1s). A block's timestamp is at least its parent's plus one
	// second, so a shorter interval runs the chain's clock ahead of the wall
	// clock (which moves EIP-3009 validBefore deadlines closer).
	BlockInterval time.Duration
	// ChainID is the EIP-155 chain id (default 1337).
	ChainID uint64
	// Network names the test network the chain stands in for, e.g.
	// "base_sepolia"; it is informational ([Chain.Network]).
	Network string
}

// AnyPort as Config.Port makes [Start] listen on a free port of the host
// ([Chain.RPCURL] names it): one found free is tried, and another when
// something else binds it first.
const AnyPort = -1

func (c Config) withDefaults() (Config, error) {
	if c.Host == "" {
		c.Host = DefaultHost
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if (c.Port < 0 && c.Port != AnyPort) || c.Port > 65535 {
		return c, fmt.Errorf("devchain: port %d out of range", c.Port)
	}
	if c.BlockInterval == 0 {
		c.BlockInterval = DefaultBlockInterval
	}
	if c.BlockInterval < 10*time.Millisecond {
		return c, fmt.Errorf("devchain: block interval %s too short", c.BlockInterval)
	}
	if c.ChainID == 0 {
		c.ChainID = DefaultChainID
	}
	return c, nil
}

// Chain is a running dev chain.
type Chain struct {
	cfg    Config
	sim    *simulated.Backend
	rpcURL string

	commitMu sync.Mutex
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// Start launches a dev chain: the JSON-RPC server on cfg.Host:cfg.Port, the
// test USDC deployed at [USDCAddress] and the Router at [RouterAddress], the
// [DevAccounts] funded, and a block sealed every cfg.BlockInterval until ctx
// ends or [Chain.Close] is called.
func Start(ctx context.Context, cfg Config) (*Chain, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	alloc := types.GenesisAlloc{
		crypto.PubkeyToAddress(DeployerKey().PublicKey): {Balance: new(big.Int).Mul(big.NewInt(1000), big.NewInt(params.Ether))},
	}
	for _, a := range DevAccounts() {
		alloc[a.Address()] = types.Account{Balance: a.ETH}
	}
	sim, cfg, err := listen(alloc, cfg)
	if err != nil {
		return nil, err
	}
	c := &Chain{
		cfg:    cfg,
		sim:    sim,
		rpcURL: "http://" + net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if err := c.deploy(ctx); err != nil {
		_ = sim.Close()
		return nil, err
	}
	go c.seal(ctx)
	return c, nil
}

// listen builds the backend on cfg's port, or for AnyPort on a free one:
// a port found free can be taken before the node binds it, and then
// another is tried (five in all). It answers the config with the port.
func listen(alloc types.GenesisAlloc, cfg Config) (*simulated.Backend, Config, error) {
	if cfg.Port != AnyPort {
		sim, err := newBackend(alloc, cfg)
		return sim, cfg, err
	}
	var err error
	for range 5 {
		var l net.Listener
		if l, err = net.Listen("tcp", net.JoinHostPort(cfg.Host, "0")); err != nil {
			return nil, cfg, fmt.Errorf("devchain: finding a free port: %w", err)
		}
		cfg.Port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		var sim *simulated.Backend
		if sim, err = newBackend(alloc, cfg); err == nil {
			return sim, cfg, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, cfg, err
}

// newBackend builds the simulated backend, turning its start-up panic (for
// example when the port is taken) into an error.
func newBackend(alloc types.GenesisAlloc, cfg Config) (sim *simulated.Backend, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("devchain: start JSON-RPC on %s:%d: %v", cfg.Host, cfg.Port, r)
		}
	}()
	return simulated.NewBackend(alloc, func(nc *node.Config, ec *ethconfig.Config) {
		nc.HTTPHost = cfg.Host
		nc.HTTPPort = cfg.Port
		nc.HTTPModules = []string{"eth", "net", "web3"}
		// A browser wallet on the hosted checkout page calls the node directly.
		nc.HTTPCors = []string{"*"}
		nc.HTTPVirtualHosts = []string{"*"}
		genesis := *ec.Genesis
		chainCfg := *genesis.Config // never mutate params.AllDevChainProtocolChanges
		chainCfg.ChainID = new(big.Int).SetUint64(cfg.ChainID)
		genesis.Config = &chainCfg
		ec.Genesis = &genesis
		ec.NetworkId = cfg.ChainID
	}), nil
}

// deploy creates the test USDC and the Router, and mints the accounts' USDC.
func (c *Chain) deploy(ctx context.Context) error {
	client := c.sim.Client()
	tr, err := contracts.NewTransactor(ctx, client, DeployerKey())
	if err != nil {
		return fmt.Errorf("devchain: %w", err)
	}
	for _, d := range []struct {
		name string
		want common.Address
	}{{contracts.TestUSDC, USDCAddress}, {contracts.Router, RouterAddress}} {
		addr, tx, err := tr.Deploy(ctx, contracts.MustLoad(d.name))
		if err != nil {
			return fmt.Errorf("devchain: deploy %s: %w", d.name, err)
		}
		if addr != d.want {
			return fmt.Errorf("devchain: %s deployed at %s, expected %s (deployer nonce moved?)", d.name, addr, d.want)
		}
		if err := c.commitAndCheck(ctx, tx); err != nil {
			return err
		}
	}
	usdc := contracts.MustLoad(contracts.TestUSDC)
	for _, a := range DevAccounts() {
		if a.USDCUnits == nil || a.USDCUnits.Sign() == 0 {
			continue
		}
		tx, err := tr.Transact(ctx, usdc, USDCAddress, "mint", a.Address(), a.USDCUnits)
		if err != nil {
			return fmt.Errorf("devchain: mint for the %s: %w", a.Name, err)
		}
		if err := c.commitAndCheck(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

func (c *Chain) commitAndCheck(ctx context.Context, tx *types.Transaction) error {
	c.commit()
	r, err := c.sim.Client().TransactionReceipt(ctx, tx.Hash())
	if err != nil {
		return fmt.Errorf("devchain: receipt of %s: %w", tx.Hash(), err)
	}
	if r.Status != types.ReceiptStatusSuccessful {
		return fmt.Errorf("devchain: transaction %s reverted", tx.Hash())
	}
	return nil
}

func (c *Chain) commit() {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	c.sim.Commit()
}

// seal commits a block every interval until stopped.
func (c *Chain) seal(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.cfg.BlockInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.stop:
			return
		case <-t.C:
			c.commit()
		}
	}
}

// RPCURL returns the JSON-RPC endpoint, e.g. "http://127.0.0.1:8545".
func (c *Chain) RPCURL() string { return c.rpcURL }

// USDC returns the address of the test USDC (always [USDCAddress]).
func (c *Chain) USDC() common.Address { return USDCAddress }

// Router returns the address of the Router (always [RouterAddress]).
func (c *Chain) Router() common.Address { return RouterAddress }

// ChainID returns the chain id.
func (c *Chain) ChainID() uint64 { return c.cfg.ChainID }

// Network returns the network name the chain was started for ("" when none).
func (c *Chain) Network() string { return c.cfg.Network }

// Client returns an in-process client of the chain (no JSON-RPC round trip).
func (c *Chain) Client() simulated.Client { return c.sim.Client() }

// CustomerKey returns the funded customer's private key.
func (c *Chain) CustomerKey() *ecdsa.PrivateKey { return CustomerKey() }

// Customer returns the funded customer's address.
func (c *Chain) Customer() common.Address { return crypto.PubkeyToAddress(CustomerKey().PublicKey) }

// DeploySmartWallet deploys an EIP-1271 contract wallet of one owner
// (contracts.SmartWallet: it accepts the owner's signature of a hash) and
// returns its address once sealed: a Safe's stand-in for proving a
// contract wallet.
func (c *Chain) DeploySmartWallet(ctx context.Context, owner common.Address) (common.Address, error) {
	tr, err := contracts.NewTransactor(ctx, c.sim.Client(), DeployerKey())
	if err != nil {
		return common.Address{}, fmt.Errorf("devchain: %w", err)
	}
	addr, tx, err := tr.Deploy(ctx, contracts.MustLoad(contracts.SmartWallet), owner)
	if err != nil {
		return common.Address{}, fmt.Errorf("devchain: deploy the smart wallet: %w", err)
	}
	return addr, c.commitAndCheck(ctx, tx)
}

// Fund sends ether (wei) and mints test USDC (integer units) to an address,
// for trying the checkout from a wallet of one's own. Either amount may be
// nil. It returns once both transactions are sealed.
func (c *Chain) Fund(ctx context.Context, to common.Address, wei, usdcUnits *big.Int) error {
	tr, err := contracts.NewTransactor(ctx, c.sim.Client(), DeployerKey())
	if err != nil {
		return fmt.Errorf("devchain: %w", err)
	}
	if wei != nil && wei.Sign() > 0 {
		tx, err := sendValue(ctx, c, to, wei)
		if err != nil {
			return err
		}
		if err := c.commitAndCheck(ctx, tx); err != nil {
			return err
		}
	}
	if usdcUnits != nil && usdcUnits.Sign() > 0 {
		tx, err := tr.Transact(ctx, contracts.MustLoad(contracts.TestUSDC), USDCAddress, "mint", to, usdcUnits)
		if err != nil {
			return fmt.Errorf("devchain: mint: %w", err)
		}
		return c.commitAndCheck(ctx, tx)
	}
	return nil
}

func sendValue(ctx context.Context, c *Chain, to common.Address, wei *big.Int) (*types.Transaction, error) {
	client := c.sim.Client()
	key := DeployerKey()
	from := crypto.PubkeyToAddress(key.PublicKey)
	nonce, err := client.PendingNonceAt(ctx, from)
	if err != nil {
		return nil, fmt.Errorf("devchain: nonce: %w", err)
	}
	head, err := client.HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("devchain: head: %w", err)
	}
	tip := big.NewInt(params.GWei)
	tx, err := types.SignNewTx(key, types.LatestSignerForChainID(new(big.Int).SetUint64(c.cfg.ChainID)), &types.DynamicFeeTx{
		ChainID: new(big.Int).SetUint64(c.cfg.ChainID), Nonce: nonce, GasTipCap: tip,
		GasFeeCap: new(big.Int).Add(tip, new(big.Int).Mul(head.BaseFee, big.NewInt(2))),
		Gas:       params.TxGas, To: &to, Value: wei,
	})
	if err != nil {
		return nil, fmt.Errorf("devchain: sign: %w", err)
	}
	if err := client.SendTransaction(ctx, tx); err != nil {
		return nil, fmt.Errorf("devchain: send: %w", err)
	}
	return tx, nil
}

// Close stops sealing and shuts the chain down; its state is discarded.
func (c *Chain) Close() error {
	var err error
	c.once.Do(func() {
		close(c.stop)
		<-c.done
		c.commitMu.Lock()
		defer c.commitMu.Unlock()
		err = c.sim.Close()
	})
	return err
}

// PayUSDC signs and broadcasts an ERC-20 transfer of units (integer token
// units) of token to `to` from the wallet of key, through the JSON-RPC
// endpoint at rpcURL, as a customer's wallet would. It returns the transaction
// hash as soon as the node accepts the transaction, before it is mined.
func PayUSDC(ctx context.Context, rpcURL string, key *ecdsa.PrivateKey, token, to common.Address, units *big.Int) (txHash string, err error) {
	if units == nil || units.Sign() <= 0 {
		return "", errors.New("devchain: amount must be positive")
	}
	client, err := ethclient.DialContext(ctx, rpcURL)
	if err != nil {
		return "", fmt.Errorf("devchain: dial %s: %w", rpcURL, err)
	}
	defer client.Close()
	tr, err := contracts.NewTransactor(ctx, client, key)
	if err != nil {
		return "", fmt.Errorf("devchain: %w", err)
	}
	tx, err := tr.Transact(ctx, contracts.MustLoad(contracts.TestUSDC), token, "transfer", to, units)
	if err != nil {
		return "", fmt.Errorf("devchain: pay: %w", err)
	}
	return tx.Hash().Hex(), nil
}

// DevNetwork points the registry's network name at the dev chain c: its RPC
// URL, chain id and test USDC, [DevConfirmations] confirmations, a one-second
// poll interval and no block explorer.
func DevNetwork(c *Chain, name string, reg *chain.Registry) {
	n, ok := reg.Lookup(name)
	if !ok {
		n = chain.Network{Name: name, Family: chain.FamilyEVM, Mode: chain.ModeTest, Decimals: chain.USDCDecimals}
	}
	n.RPCURL = c.RPCURL()
	n.ChainID = c.ChainID()
	n.USDC = c.USDC().Hex()
	n.Confirmations = DevConfirmations
	n.PollInterval = time.Second
	n.ExplorerURL, n.ExplorerSuffix = "", ""
	// The EIP-712 domain a wallet signs the test USDC's authorizations under.
	n.TokenName, n.TokenVersion = TestUSDCName, DomainVersion
	reg.Set(n)
}

// TestUSDCName is the test USDC's name(), the name of its EIP-712 domain.
const TestUSDCName = "USD Coin (paygate dev)"

// DevNetworks points every network of cs at its own dev chain ([DevNetwork]).
func DevNetworks(cs *Chains, reg *chain.Registry) {
	for _, c := range cs.All() {
		DevNetwork(c, c.Network(), reg)
	}
}
