package devchain

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/contracts"
)

func startChain(t *testing.T, interval time.Duration) *Chain {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c, err := Start(ctx, Config{Port: AnyPort, BlockInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestPayAndVerifyOverJSONRPC starts the embedded profile's two dev chains,
// pays on eth_sepolia's with PayUSDC through its HTTP JSON-RPC endpoint and
// polls the EVM verifier, dialled through the same endpoint by the
// MultiVerifier, until the payment completes. base_sepolia is another chain:
// the transaction does not exist there.
func TestPayAndVerifyOverJSONRPC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := StartNetworks(ctx, NetworksConfig{BlockInterval: 100 * time.Millisecond,
		Ports: map[string]int{chain.NetworkBaseSepolia: AnyPort, chain.NetworkEthSepolia: AnyPort}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	base, ok1 := cs.Chain(chain.NetworkBaseSepolia)
	c, ok2 := cs.Chain(chain.NetworkEthSepolia)
	if !ok1 || !ok2 || len(cs.All()) != 2 {
		t.Fatalf("chains %v", cs.All())
	}
	if !strings.HasPrefix(c.RPCURL(), "http://127.0.0.1:") || c.RPCURL() == base.RPCURL() || base.ChainID() != 1337 || c.ChainID() != 1338 ||
		c.USDC() != USDCAddress || base.USDC() != USDCAddress || c.Router() != RouterAddress {
		t.Fatalf("chains: %s %d, %s %d", base.RPCURL(), base.ChainID(), c.RPCURL(), c.ChainID())
	}

	reg := chain.DefaultRegistry()
	DevNetworks(cs, reg)
	for _, dc := range cs.All() {
		n, _ := reg.Lookup(dc.Network())
		if n.RPCURL != dc.RPCURL() || n.ChainID != dc.ChainID() || n.USDC != USDCAddress.Hex() || n.Confirmations != DevConfirmations || n.Mode != chain.ModeTest {
			t.Fatalf("%s not pointed at its dev chain: %+v", dc.Network(), n)
		}
	}

	merchant := crypto.PubkeyToAddress(mustKey(t).PublicKey)
	units := big.NewInt(32_610_000)
	hash, err := PayUSDC(ctx, c.RPCURL(), c.CustomerKey(), c.USDC(), merchant, units)
	if err != nil {
		t.Fatal(err)
	}

	mv := chain.NewMultiVerifier(reg)
	defer mv.Close()
	req := chain.VerifyRequest{Network: chain.NetworkEthSepolia, TxHash: hash, MerchantAddress: merchant.Hex(), ExpectedUnits: units.String()}
	var (
		res      chain.VerifyResult
		verdicts []string
	)
	for {
		res, err = mv.Verify(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(verdicts) == 0 || verdicts[len(verdicts)-1] != string(res.Verdict)+"/"+res.Message {
			verdicts = append(verdicts, string(res.Verdict)+"/"+res.Message)
		}
		if res.Verdict != chain.VerdictPending {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no verdict before timeout; last %+v", res)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Logf("verdicts seen: %s", strings.Join(verdicts, " -> "))
	if res.Verdict != chain.VerdictComplete || res.ReceivedUnits != "32610000" || res.Payer != c.Customer().Hex() || res.Confirmations < DevConfirmations {
		t.Fatalf("final: %+v", res)
	}

	// On the other network's chain the transaction does not exist.
	other := req
	other.Network = chain.NetworkBaseSepolia
	if res, err := mv.Verify(ctx, other); err != nil || res.Verdict != chain.VerdictPending || res.Seen {
		t.Fatalf("base_sepolia sees eth_sepolia's payment: %+v %v", res, err)
	}

	// The merchant's balance agrees, read through the same endpoint.
	client, err := ethclient.DialContext(ctx, c.RPCURL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	out, err := contracts.Call(ctx, client, contracts.MustLoad(contracts.TestUSDC), c.USDC(), "balanceOf", merchant)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].(*big.Int).Cmp(units) != 0 {
		t.Fatalf("merchant balance %v", out[0])
	}
	// Blocks keep coming without transactions.
	h1, _ := client.BlockNumber(ctx)
	time.Sleep(350 * time.Millisecond)
	if h2, _ := client.BlockNumber(ctx); h2 <= h1 {
		t.Fatalf("head stuck at %d", h1)
	}
}

func TestDeterministicSetup(t *testing.T) {
	if got := crypto.PubkeyToAddress(DeployerKey().PublicKey); got != common.HexToAddress("0x5Bd531243E00C9Bb8c9ded0B02f73bdf6aD93D79") {
		t.Errorf("deployer %s", got)
	}
	if USDCAddress != common.HexToAddress("0x311ac7C1fD17a484149813050b1084cfa1519dbA") {
		t.Errorf("USDC %s", USDCAddress)
	}
	if got := crypto.PubkeyToAddress(CustomerKey().PublicKey); got != common.HexToAddress("0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b") {
		t.Errorf("customer %s", got)
	}
	c := startChain(t, time.Second)
	ctx := context.Background()
	client, err := ethclient.DialContext(ctx, c.RPCURL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	out, err := contracts.Call(ctx, client, contracts.MustLoad(contracts.TestUSDC), USDCAddress, "balanceOf", c.Customer())
	if err != nil {
		t.Fatal(err)
	}
	if out[0].(*big.Int).Cmp(CustomerUSDCUnits) != 0 {
		t.Errorf("customer USDC %v", out[0])
	}
	if bal, err := client.BalanceAt(ctx, c.Customer(), nil); err != nil || bal.Cmp(CustomerETH) != 0 {
		t.Errorf("customer ETH %v %v", bal, err)
	}
	id, err := client.ChainID(ctx)
	if err != nil || id.Uint64() != DefaultChainID {
		t.Errorf("chain id %v %v", id, err)
	}

	wantAccounts := map[string]string{
		AccountCustomer: "0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b",
		AccountRelayer:  "0x2dDf076d86a5667B4626F843C0544beaCEfFB971",
		AccountStranger: "0x0a8548D940D290aBb8B32990FbA88a7696257aeb",
		AccountExchange: "0x2AF7e6211706Ad2870618d27471d1AE0f77F3533",
		AccountMerchant: "0xeB01CCe32d2bBDdD0Bd5953B094284D3B0a6B6F9",
	}
	for _, a := range DevAccounts() {
		phrase := crypto.Keccak256([]byte("paygate devchain " + a.Name))
		if common.Bytes2Hex(phrase) != a.KeyHex || a.Address().Hex() != wantAccounts[a.Name] {
			t.Errorf("%s: key %s address %s", a.Name, a.KeyHex, a.Address())
		}
		if got, ok := LookupAccount(a.Name); !ok || got.KeyHex != a.KeyHex {
			t.Errorf("LookupAccount(%s)", a.Name)
		}
		out, err := contracts.Call(ctx, client, contracts.MustLoad(contracts.TestUSDC), USDCAddress, "balanceOf", a.Address())
		if err != nil {
			t.Fatal(err)
		}
		want := a.USDCUnits
		if want == nil {
			want = new(big.Int)
		}
		bal, err := client.BalanceAt(ctx, a.Address(), nil)
		if err != nil || out[0].(*big.Int).Cmp(want) != 0 || bal.Cmp(a.ETH) != 0 {
			t.Errorf("%s: %v USDC units, %v wei (%v)", a.Name, out[0], bal, err)
		}
	}
	if _, ok := LookupAccount("deployer"); ok {
		t.Error("the deployer is not a dev account")
	}
	for k, want := range map[string]string{RelayerKeyHex: wantAccounts[AccountRelayer], StrangerKeyHex: wantAccounts[AccountStranger],
		ExchangeKeyHex: wantAccounts[AccountExchange], MerchantKeyHex: wantAccounts[AccountMerchant]} {
		if got := crypto.PubkeyToAddress(mustHexKey(k).PublicKey).Hex(); got != want {
			t.Errorf("key %s: %s", k, got)
		}
	}
	if crypto.PubkeyToAddress(RelayerKey().PublicKey).Hex() != wantAccounts[AccountRelayer] ||
		crypto.PubkeyToAddress(StrangerKey().PublicKey).Hex() != wantAccounts[AccountStranger] ||
		crypto.PubkeyToAddress(ExchangeKey().PublicKey).Hex() != wantAccounts[AccountExchange] ||
		crypto.PubkeyToAddress(MerchantKey().PublicKey).Hex() != wantAccounts[AccountMerchant] {
		t.Error("key functions")
	}
	if RouterAddress != common.HexToAddress("0xCf0dd36cAE8b4eE4CBdA4E5A6D000a4B3FE7f507") {
		t.Errorf("Router %s", RouterAddress)
	}
	if code, err := client.CodeAt(ctx, RouterAddress, nil); err != nil || len(code) == 0 {
		t.Errorf("no Router code: %v", err)
	}

	wallet := crypto.PubkeyToAddress(mustKey(t).PublicKey)
	if err := c.Fund(ctx, wallet, big.NewInt(1e18), big.NewInt(5_000_000)); err != nil {
		t.Fatal(err)
	}
	out, _ = contracts.Call(ctx, client, contracts.MustLoad(contracts.TestUSDC), USDCAddress, "balanceOf", wallet)
	if bal, _ := client.BalanceAt(ctx, wallet, nil); bal.Cmp(big.NewInt(1e18)) != 0 || out[0].(*big.Int).Int64() != 5_000_000 {
		t.Errorf("funded wallet: %v wei, %v units", bal, out[0])
	}
}

func TestStartErrors(t *testing.T) {
	c := startChain(t, time.Second)
	port := c.cfg.Port
	_, err := Start(context.Background(), Config{Port: port})
	if err == nil {
		t.Fatal("second chain on a busy port started")
	}
	t.Logf("busy port: %v", err)
	if _, err := Start(context.Background(), Config{Port: 70000}); err == nil {
		t.Fatal("port 70000 accepted")
	}
	if err := c.Close(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestPortsFromEnv(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, tc := range []struct {
		env     map[string]string
		base    int
		eth     int
		wantErr string
	}{
		{env: nil, base: 8545, eth: 8546},
		{env: map[string]string{"DEVCHAIN_PORT": "9000"}, base: 9000, eth: 9001},
		{env: map[string]string{"DEVCHAIN_PORT": "9000", "DEVCHAIN_PORT_ETH_SEPOLIA": "7000"}, base: 9000, eth: 7000},
		{env: map[string]string{"DEVCHAIN_PORT_ETH_SEPOLIA": "7000"}, base: 8545, eth: 7000},
		{env: map[string]string{"DEVCHAIN_PORT": "x"}, wantErr: "DEVCHAIN_PORT:"},
		{env: map[string]string{"DEVCHAIN_PORT_ETH_SEPOLIA": "70000"}, wantErr: "DEVCHAIN_PORT_ETH_SEPOLIA:"},
	} {
		ports, err := PortsFromEnv(env(tc.env))
		if tc.wantErr != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("%v: %v", tc.env, err)
			}
			continue
		}
		if err != nil || ports[chain.NetworkBaseSepolia] != tc.base || ports[chain.NetworkEthSepolia] != tc.eth {
			t.Errorf("%v: %v %v", tc.env, ports, err)
		}
	}
	if u, err := RPCURLFromEnv(chain.NetworkEthSepolia, env(map[string]string{"DEVCHAIN_PORT": "9000"})); err != nil || u != "http://127.0.0.1:9001" {
		t.Errorf("eth_sepolia URL %s %v", u, err)
	}
	if u, err := RPCURLFromEnv(chain.NetworkEthSepolia, env(map[string]string{"DEVCHAIN_RPC_URL": "http://h:1"})); err != nil || u != "http://h:1" {
		t.Errorf("override %s %v", u, err)
	}
	if _, err := RPCURLFromEnv(chain.NetworkBase, env(nil)); err == nil {
		t.Error("a dev chain for base mainnet")
	}
	if n, ok := LookupNetworkChain(chain.NetworkEthSepolia); !ok || n.ChainID != 1338 || n.Port != 8546 {
		t.Errorf("eth_sepolia %+v", n)
	}
}

func TestPayUSDCErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := PayUSDC(ctx, "http://127.0.0.1:1", CustomerKey(), USDCAddress, common.Address{1}, big.NewInt(1)); err == nil {
		t.Fatal("paid through a closed port")
	}
	if _, err := PayUSDC(ctx, "http://127.0.0.1:1", CustomerKey(), USDCAddress, common.Address{1}, big.NewInt(0)); err == nil {
		t.Fatal("zero amount accepted")
	}
}

func mustKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
