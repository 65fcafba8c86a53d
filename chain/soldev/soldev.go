// Package soldev runs a local Solana chain for development and tests: LiteSVM
// (the npm package litesvm, which executes the real SBF builds of the SPL
// Token, Token-2022, Associated Token Account, Memo and Address Lookup Table
// programs) behind a small JSON-RPC HTTP server written in Node, the
// "sidecar" in chain/soldev/sidecar. This package starts that server as a
// child process on loopback, waits until it answers, and stops it on
// [Chain.Close] (or when this process dies).
//
// Every boot creates the same accounts at the same addresses, from keypairs
// whose seeds are public (see [CustomerKey]): a test USDC mint (6 decimals,
// classic SPL Token program), a Token-2022 look-alike mint, a customer wallet
// funded with SOL, test USDC and look-alike tokens, and a "stranger" wallet.
// The RPC's genesis hash is [GenesisHash], so a client can tell it from
// devnet ([CheckGenesis]).
//
// Slots advance on a timer (default 400 ms, like Solana). A transaction lands
// in the current slot (processed); it is confirmed one slot later and
// finalized [DefaultFinalizeDepth] slots later, so paygate's verifier (which
// reads at finalized) sees the usual pending, then complete.
//
// State does NOT survive a restart: the chain lives in the sidecar's memory.
//
// Node.js 20 or later and the sidecar's npm packages are needed:
// `npm ci --prefix chain/soldev/sidecar` (the Makefile's npm target does it).
package soldev

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/paygate/paygate/chain"
)

// GenesisHash is the genesis hash the dev chain's RPC answers
// (base58 of sha256("paygate soldev genesis")). Devnet's is
// EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG, mainnet's
// 5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d.
const GenesisHash = "9GAsCVPU57f8gSXFxF33aVXW4hMMVwpJzQxF6GGFQRM7"

// Addresses of the accounts every boot creates. Each wallet and mint is the
// public key of an ed25519 keypair whose seed is sha256("paygate soldev " +
// name); the token accounts are associated token accounts. These keys are
// public: never use them on a real network.
const (
	// USDCMintAddress is the test USDC mint (6 decimals, classic SPL Token
	// program), seed name "usdc mint". Its authority is MintAuthorityAddress.
	USDCMintAddress = "83WCKaonRpoDjjVnmgherWeu5iEQ1xDKeFsRztrqYy2G"
	// LookalikeMintAddress is a Token-2022 mint with 6 decimals, seed name
	// "lookalike mint": the look-alike a cheater would pay with.
	LookalikeMintAddress = "Bhs7Db7oByNDXU3c8rgu9DVXWKSTbzSVTRLMzwcpVspj"
	// MintAuthorityAddress is the mint authority of both mints, seed name
	// "mint authority"; it holds 100 SOL.
	MintAuthorityAddress = "EeyeTGTiAb69axfAwnHapxrgv5NLtu266YgTorjsrKv1"
	// CustomerAddress is the funded customer wallet, seed name "customer":
	// 1,000 SOL, 1,000,000 test USDC and 1,000,000 look-alike tokens.
	CustomerAddress = "8LxfxgNCjge8ihBiUF4AZA8LUUZh2SY2eVEur9QgFMVW"
	// CustomerUSDCAddress is the customer's USDC associated token account.
	CustomerUSDCAddress = "BMG2QC5Jq11XbhnwRRMyf6WmAojqt9k4ZFyGtAD4Cf1V"
	// StrangerAddress is a second wallet, seed name "stranger": 100 SOL and
	// an empty USDC associated token account (StrangerUSDCAddress).
	StrangerAddress = "BEVJRqehQiYa22yk5cCCWZFqgdZ5PDeL1wdPC8mZpZVF"
	// StrangerUSDCAddress is the stranger's USDC associated token account.
	StrangerUSDCAddress = "2tPVv1RatYJsCvq1V4p8QWysWTSwqcyCftUmFsBrTfkM"
	// MerchantAddress is the dev merchant wallet, seed name "merchant":
	// nothing at boot. Set as a merchant's Solana wallet, it receives
	// payments and pays their refunds ([PayRefund]; the mint authority pays
	// its fees while it holds no SOL).
	MerchantAddress = "98rwvhempUhcm4qUnw4ucU6GST6hDTThbs26pnTL12G5"
)

// CustomerUSDCUnits is the customer's test USDC at boot: 1,000,000 USDC in
// integer units (6 decimals). The look-alike balance is the same.
const CustomerUSDCUnits uint64 = 1_000_000_000_000

// Public keys of the boot accounts.
var (
	// USDCMint is [USDCMintAddress].
	USDCMint = solana.MustPublicKeyFromBase58(USDCMintAddress)
	// LookalikeMint is [LookalikeMintAddress].
	LookalikeMint = solana.MustPublicKeyFromBase58(LookalikeMintAddress)
	// Customer is [CustomerAddress].
	Customer = solana.MustPublicKeyFromBase58(CustomerAddress)
	// Stranger is [StrangerAddress].
	Stranger = solana.MustPublicKeyFromBase58(StrangerAddress)
	// Merchant is [MerchantAddress].
	Merchant = solana.MustPublicKeyFromBase58(MerchantAddress)
)

// devKey derives a dev keypair from its public seed name.
func devKey(name string) solana.PrivateKey {
	seed := sha256.Sum256([]byte("paygate soldev " + name))
	return solana.PrivateKey(ed25519.NewKeyFromSeed(seed[:]))
}

// CustomerKey returns the private key of [CustomerAddress], to pay with
// ([PaySession]) or to import into a wallet. It is public.
func CustomerKey() solana.PrivateKey { return devKey("customer") }

// StrangerKey returns the private key of [StrangerAddress]. It is public.
func StrangerKey() solana.PrivateKey { return devKey("stranger") }

// MerchantKey returns the private key of [MerchantAddress]. It is public.
func MerchantKey() solana.PrivateKey { return devKey("merchant") }

// MintAuthorityKey returns the private key of [MintAuthorityAddress], which
// may mint more test USDC. It is public.
func MintAuthorityKey() solana.PrivateKey { return devKey("mint authority") }

// Defaults of [Config].
const (
	// DefaultHost is the loopback interface the RPC listens on.
	DefaultHost = "127.0.0.1"
	// DefaultPort is the usual Solana JSON-RPC port; [StartDev] uses it.
	DefaultPort = 8899
	// DefaultSlotInterval is Solana's target slot time.
	DefaultSlotInterval = 400 * time.Millisecond
	// DefaultConfirmDepth: a transaction is confirmed one slot after it lands.
	DefaultConfirmDepth = 1
	// DefaultFinalizeDepth: a transaction is finalized 8 slots (3.2 s at the
	// default interval) after it lands; mainnet takes about 32.
	DefaultFinalizeDepth = 8
	// SidecarDir is where the sidecar lives, relative to the repository root.
	SidecarDir = "chain/soldev/sidecar"
)

// Errors of [Start] that mean "not installed" rather than "broken".
var (
	// ErrNodeMissing: no node executable was found.
	ErrNodeMissing = errors.New("soldev: Node.js (node) not found on PATH; the Solana dev chain needs Node.js 20 or later")
	// ErrPackagesMissing: the sidecar's npm packages are not installed.
	ErrPackagesMissing = errors.New("soldev: the Solana dev chain's npm packages are not installed: run `npm ci --prefix " + SidecarDir + "`")
)

// Config configures a dev chain. Zero fields take the defaults.
type Config struct {
	// Host is the interface the RPC listens on (default 127.0.0.1).
	Host string
	// Port is the RPC port; 0 lets the kernel pick a free one ([StartDev]
	// uses DefaultPort instead).
	Port int
	// SlotInterval is how often the slot advances (default 400 ms).
	SlotInterval time.Duration
	// ConfirmDepth is how many slots confirmed trails processed (default 1).
	ConfirmDepth int
	// FinalizeDepth is how many slots finalized trails processed (default 8);
	// it must be at least ConfirmDepth.
	FinalizeDepth int
	// Dir is the sidecar folder; by default it is found as SidecarDir below
	// the working directory, the executable's directory or one of their
	// parents, or from $PAYGATE_SOLDEV_DIR.
	Dir string
	// Node is the node executable (default: node on PATH).
	Node string
	// Log receives the sidecar's stderr (default: discarded).
	Log io.Writer
	// StartTimeout bounds the wait for the RPC to answer (default 30 s).
	StartTimeout time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.Host == "" {
		c.Host = DefaultHost
	}
	if c.Port < 0 || c.Port > 65535 {
		return c, fmt.Errorf("soldev: port %d out of range", c.Port)
	}
	if c.SlotInterval == 0 {
		c.SlotInterval = DefaultSlotInterval
	}
	if c.SlotInterval < 10*time.Millisecond {
		return c, fmt.Errorf("soldev: slot interval %s too short", c.SlotInterval)
	}
	if c.ConfirmDepth == 0 {
		c.ConfirmDepth = DefaultConfirmDepth
	}
	if c.FinalizeDepth == 0 {
		c.FinalizeDepth = DefaultFinalizeDepth
	}
	if c.ConfirmDepth < 0 || c.FinalizeDepth < c.ConfirmDepth {
		return c, fmt.Errorf("soldev: need 0 <= confirm depth (%d) <= finalize depth (%d)", c.ConfirmDepth, c.FinalizeDepth)
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
	return c, nil
}

// Chain is a running dev chain.
type Chain struct {
	rpcURL string
	cmd    *exec.Cmd
	stdin  io.Closer
	exited chan struct{} // closed when the sidecar process has exited
	once   sync.Once
}

// bootInfo is the line the sidecar prints once it listens.
type bootInfo struct {
	Listening     string `json:"listening"`
	GenesisHash   string `json:"genesisHash"`
	LiteSVM       string `json:"litesvm"`
	USDCMint      string `json:"usdcMint"`
	LookalikeMint string `json:"lookalikeMint"`
	Customer      string `json:"customer"`
	CustomerUSDC  string `json:"customerUSDC"`
	Stranger      string `json:"stranger"`
	StrangerUSDC  string `json:"strangerUSDC"`
	MintAuthority string `json:"mintAuthority"`
}

// Start launches the sidecar and returns once its RPC answers with the
// expected genesis hash and boot accounts. If node or the npm packages are
// missing, the error wraps [ErrNodeMissing] or [ErrPackagesMissing] and says
// what to run. The chain stops on [Chain.Close] or when ctx ends.
func Start(ctx context.Context, cfg Config) (*Chain, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	node := cfg.Node
	if node == "" {
		if node, err = exec.LookPath("node"); err != nil {
			return nil, ErrNodeMissing
		}
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = findSidecar(); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "litesvm", "package.json")); err != nil {
		return nil, fmt.Errorf("%w (looked in %s)", ErrPackagesMissing, dir)
	}

	cmd := exec.Command(node, "sidecar.js", "--watch-stdin",
		"--host", cfg.Host, "--port", strconv.Itoa(cfg.Port),
		"--slot-ms", strconv.FormatInt(cfg.SlotInterval.Milliseconds(), 10),
		"--confirm-depth", strconv.Itoa(cfg.ConfirmDepth),
		"--finalize-depth", strconv.Itoa(cfg.FinalizeDepth))
	cmd.Dir = dir
	cmd.SysProcAttr = childAttr()
	stderr := &tail{w: cfg.Log}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// The sidecar exits when this pipe closes: on Close, and when this
	// process dies however it dies.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("soldev: start %s: %w", node, err)
	}
	c := &Chain{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.exited)
	}()

	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() { // keep draining so the sidecar never blocks on stdout
		}
	}()
	fail := func(err error) (*Chain, error) {
		_ = c.Close()
		if t := stderr.String(); t != "" {
			err = fmt.Errorf("%w\nsidecar stderr:\n%s", err, t)
		}
		return nil, err
	}
	timer := time.NewTimer(cfg.StartTimeout)
	defer timer.Stop()
	var line string
	select {
	case l, ok := <-lines:
		if !ok {
			<-c.exited
			return fail(fmt.Errorf("soldev: the sidecar exited before listening (%v)", cmd.ProcessState))
		}
		line = l
	case <-timer.C:
		return fail(fmt.Errorf("soldev: the sidecar did not listen within %s", cfg.StartTimeout))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	var info bootInfo
	if err := json.Unmarshal([]byte(line), &info); err != nil || info.Listening == "" {
		return fail(fmt.Errorf("soldev: unexpected first line from the sidecar: %q", line))
	}
	want := bootInfo{Listening: info.Listening, GenesisHash: GenesisHash, LiteSVM: info.LiteSVM, USDCMint: USDCMintAddress,
		LookalikeMint: LookalikeMintAddress, Customer: CustomerAddress, CustomerUSDC: CustomerUSDCAddress,
		Stranger: StrangerAddress, StrangerUSDC: StrangerUSDCAddress, MintAuthority: MintAuthorityAddress}
	if info != want {
		return fail(fmt.Errorf("soldev: the sidecar's boot accounts differ from this package's constants:\n got  %+v\n want %+v", info, want))
	}
	c.rpcURL = info.Listening
	checkCtx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	if err := CheckGenesis(checkCtx, c.rpcURL); err != nil {
		return fail(err)
	}
	go func() {
		select {
		case <-ctx.Done():
			_ = c.Close()
		case <-c.exited:
		}
	}()
	return c, nil
}

// StartDev starts the dev chain for `paygate dev`: cfg's zero fields take
// the defaults, and Port 0 means [DefaultPort]. When node or the npm
// packages are missing, the error says what to install or run; the caller
// can carry on without Solana.
func StartDev(ctx context.Context, cfg Config) (*Chain, error) {
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	c, err := Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("solana dev chain not started: %w", err)
	}
	return c, nil
}

// findSidecar looks for SidecarDir below the working directory, the
// executable's directory and their parents.
func findSidecar() (string, error) {
	if d := os.Getenv("PAYGATE_SOLDEV_DIR"); d != "" {
		return d, nil
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, start := range starts {
		for d := start; ; d = filepath.Dir(d) {
			cand := filepath.Join(d, SidecarDir)
			if _, err := os.Stat(filepath.Join(cand, "sidecar.js")); err == nil {
				return cand, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("soldev: %s/sidecar.js not found above the working directory; run from the repository or set PAYGATE_SOLDEV_DIR", SidecarDir)
}

// RPCURL returns the JSON-RPC endpoint, e.g. "http://127.0.0.1:8899".
func (c *Chain) RPCURL() string { return c.rpcURL }

// Client returns a solana-go RPC client of the chain.
func (c *Chain) Client() *rpc.Client { return rpc.New(c.rpcURL) }

// USDCMint returns the test USDC mint ([USDCMintAddress]).
func (c *Chain) USDCMint() solana.PublicKey { return USDCMint }

// Customer returns the funded customer wallet ([CustomerAddress]).
func (c *Chain) Customer() solana.PublicKey { return Customer }

// CustomerKey returns the funded customer's private key ([CustomerKey]).
func (c *Chain) CustomerKey() solana.PrivateKey { return CustomerKey() }

// Close stops the sidecar: its stdin closes (it exits on that), then SIGTERM,
// then SIGKILL of its process group after 5 seconds. The chain's state is
// discarded.
func (c *Chain) Close() error {
	c.once.Do(func() {
		_ = c.stdin.Close()
		signalGroup(c.cmd.Process, syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			signalGroup(c.cmd.Process, syscall.SIGKILL)
			<-c.exited
		}
	})
	return nil
}

// DevNetwork points solana_devnet at the dev chain c: its RPC URL and test
// USDC mint, a one-second poll interval and no block explorer.
func DevNetwork(c *Chain, reg *chain.Registry) {
	n, ok := reg.Lookup(chain.NetworkSolanaDevnet)
	if !ok {
		n = chain.Network{Name: chain.NetworkSolanaDevnet, Family: chain.FamilySolana, Mode: chain.ModeTest, Decimals: chain.USDCDecimals}
	}
	n.RPCURL = c.RPCURL()
	n.GenesisHash = GenesisHash
	n.USDC = USDCMintAddress
	n.Confirmations = 1
	n.PollInterval = time.Second
	n.ExplorerURL, n.ExplorerSuffix = "", ""
	reg.Set(n)
}

// CheckGenesis asks the RPC at rpcURL for its genesis hash and returns an
// error wrapping [chain.ErrChainIDMismatch] unless it is [GenesisHash], so
// that solana_devnet pointed at a wrong endpoint is refused as an EVM
// network with the wrong chain id is. An RPC failure is returned as is.
func CheckGenesis(ctx context.Context, rpcURL string) error {
	got, err := rpc.New(rpcURL).GetGenesisHash(ctx)
	if err != nil {
		return fmt.Errorf("soldev: getGenesisHash: %w", err)
	}
	if got.String() != GenesisHash {
		return fmt.Errorf("%w: the RPC answers genesis hash %s, the Solana dev chain's is %s", chain.ErrChainIDMismatch, got, GenesisHash)
	}
	return nil
}

// tail passes writes on to w and keeps the last 4 KiB for error messages.
type tail struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	_, _ = t.w.Write(p)
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}
