package devchain

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/contracts"
)

// freePort asks the kernel for an unused loopback port.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startChain(t *testing.T, interval time.Duration) *Chain {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c, err := Start(ctx, Config{Port: freePort(t), BlockInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestPayAndVerifyOverJSONRPC pays with PayUSDC through the dev chain's HTTP
// JSON-RPC endpoint and polls the EVM verifier, dialled through the same
// endpoint by the MultiVerifier, until the payment completes.
func TestPayAndVerifyOverJSONRPC(t *testing.T) {
	c := startChain(t, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !strings.HasPrefix(c.RPCURL(), "http://127.0.0.1:") || c.ChainID() != DefaultChainID || c.USDC() != USDCAddress {
		t.Fatalf("chain: %s %d %s", c.RPCURL(), c.ChainID(), c.USDC())
	}

	reg := chain.DefaultRegistry()
	DevNetworks(c, reg)
	for _, name := range []string{chain.NetworkBaseSepolia, chain.NetworkEthSepolia} {
		n, _ := reg.Lookup(name)
		if n.RPCURL != c.RPCURL() || n.ChainID != c.ChainID() || n.USDC != USDCAddress.Hex() || n.Confirmations != DevConfirmations || n.Mode != chain.ModeTest {
			t.Fatalf("%s not pointed at the dev chain: %+v", name, n)
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
	req := chain.VerifyRequest{Network: chain.NetworkBaseSepolia, TxHash: hash, MerchantAddress: merchant.Hex(), ExpectedUnits: units.String()}
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
