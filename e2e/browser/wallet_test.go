package browser_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/e2e/browser"
)

// unusedRPC is never dialled: these tests make no read request.
const unusedRPC = "http://127.0.0.1:1"

func newTestWallet(cfg browser.WalletConfig) *browser.Wallet {
	if cfg.Key == nil {
		cfg.Key = devchain.CustomerKey()
	}
	if cfg.RPC == nil {
		cfg.RPC = map[uint64]string{1: unusedRPC}
	}
	return browser.NewWallet(cfg)
}

// code is the EIP-1193 code of a wallet error (0 for none).
func code(err error) int {
	var pe *browser.ProviderError
	if errors.As(err, &pe) {
		return pe.Code
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestWalletChains(t *testing.T) {
	ctx := context.Background()
	w := newTestWallet(browser.WalletConfig{RPC: map[uint64]string{1: unusedRPC, 5: unusedRPC}})
	if w.ChainID() != 1 {
		t.Fatalf("starts on chain %d, want the smallest, 1", w.ChainID())
	}
	res, err := w.Request(ctx, "eth_chainId", nil)
	if err != nil || string(res) != `"0x1"` {
		t.Fatalf("eth_chainId %s, %v", res, err)
	}
	if _, err := w.Request(ctx, "wallet_switchEthereumChain", []any{map[string]string{"chainId": "0x5"}}); err != nil || w.ChainID() != 5 {
		t.Fatalf("switch to a known chain: %v, on %d", err, w.ChainID())
	}
	if _, err := w.Request(ctx, "wallet_switchEthereumChain", []any{map[string]string{"chainId": "0x14a34"}}); code(err) != browser.CodeUnrecognizedChain {
		t.Fatalf("switch to an unknown chain: %v, want 4902", err)
	}
	if _, err := w.Request(ctx, "wallet_switchEthereumChain", []any{map[string]string{"chainId": "84532"}}); code(err) != browser.CodeInvalidParams {
		t.Fatalf("switch with a decimal chain id: %v, want -32602", err)
	}
	if _, err := w.Request(ctx, "wallet_addEthereumChain", []any{map[string]any{"chainId": "0x14a34", "chainName": "Base Sepolia"}}); code(err) != browser.CodeInvalidParams {
		t.Fatalf("add without rpcUrls: %v, want -32602", err)
	}
	w.Reject("wallet_addEthereumChain")
	if _, err := w.Request(ctx, "wallet_addEthereumChain", []any{map[string]any{"chainId": "0x14a34", "rpcUrls": []string{unusedRPC}}}); code(err) != browser.CodeUserRejected {
		t.Fatalf("rejected add: %v, want 4001", err)
	}
	w.Accept("wallet_addEthereumChain")
	if _, err := w.Request(ctx, "wallet_addEthereumChain", []any{map[string]any{"chainId": "0x14a34", "rpcUrls": []string{unusedRPC}}}); err != nil || w.ChainID() != 84532 {
		t.Fatalf("add: %v, on %d, want 84532", err, w.ChainID())
	}
	if err := w.SwitchChain(1); err != nil || w.ChainID() != 1 {
		t.Fatalf("user switch: %v", err)
	}
	if err := w.SwitchChain(7); err == nil {
		t.Fatal("user switch to an unknown chain succeeded")
	}
	if res, err := w.Request(ctx, "net_version", nil); err != nil || string(res) != `"1"` {
		t.Fatalf("net_version %s, %v", res, err)
	}
	if _, err := w.Request(ctx, "eth_subscribe", []any{"newHeads"}); code(err) != browser.CodeUnsupportedMethod {
		t.Fatalf("unsupported method: %v, want 4200", err)
	}
	got := strings.Join(w.Methods(), ",")
	want := "eth_chainId,wallet_switchEthereumChain,wallet_switchEthereumChain,wallet_switchEthereumChain,wallet_addEthereumChain,wallet_addEthereumChain,wallet_addEthereumChain,net_version,eth_subscribe"
	if got != want {
		t.Errorf("recorded %s\nwant %s", got, want)
	}
	if reqs := w.Requests(); !reqs[0].Done || string(reqs[0].Result) != `"0x1"` || reqs[2].Err == nil || reqs[2].ChainID != 5 {
		t.Errorf("records: %+v", reqs[:3])
	}
}

func TestWalletAccounts(t *testing.T) {
	ctx := context.Background()
	w := newTestWallet(browser.WalletConfig{Reject: []string{"eth_requestAccounts"}})
	if res, err := w.Request(ctx, "eth_accounts", nil); err != nil || string(res) != `[]` {
		t.Fatalf("eth_accounts before connecting: %s, %v", res, err)
	}
	if _, err := w.Request(ctx, "eth_requestAccounts", nil); code(err) != browser.CodeUserRejected || w.Connected() {
		t.Fatalf("refused connection: %v, want 4001", err)
	}
	if _, err := w.Request(ctx, "personal_sign", []string{"0x68690a", w.Address().Hex()}); code(err) != browser.CodeUnauthorized {
		t.Fatalf("personal_sign before connecting: %v, want 4100", err)
	}
	w.Accept("eth_requestAccounts")
	res, err := w.Request(ctx, "eth_requestAccounts", nil)
	want := `["` + strings.ToLower(w.Address().Hex()) + `"]`
	if err != nil || string(res) != want {
		t.Fatalf("eth_requestAccounts: %s, %v, want %s", res, err, want)
	}
	if res, _ := w.Request(ctx, "eth_accounts", nil); string(res) != want {
		t.Fatalf("eth_accounts %s", res)
	}

	// personal_sign: EIP-191 over the message bytes, v 27/28.
	res, err = w.Request(ctx, "personal_sign", []string{"0x68690a", w.Address().Hex()})
	if err != nil {
		t.Fatal(err)
	}
	var sigHex string
	_ = json.Unmarshal(res, &sigHex)
	sig := hexutil.MustDecode(sigHex)
	sig[64] -= 27
	pub, err := crypto.SigToPub(accounts.TextHash([]byte("hi\n")), sig)
	if err != nil || crypto.PubkeyToAddress(*pub) != w.Address() {
		t.Fatalf("personal_sign recovers to %v, %v", pub, err)
	}
	other := common.HexToAddress("0x0000000000000000000000000000000000000001")
	if _, err := w.Request(ctx, "personal_sign", []string{"0x00", other.Hex()}); code(err) != browser.CodeUnauthorized {
		t.Fatalf("personal_sign for another account: %v, want 4100", err)
	}

	w.Disconnect()
	if res, _ := w.Request(ctx, "eth_accounts", nil); string(res) != `[]` {
		t.Fatalf("eth_accounts after disconnecting: %s", res)
	}
	if w := newTestWallet(browser.WalletConfig{Connected: true}); !w.Connected() {
		t.Fatal("Connected: true starts disconnected")
	}
}

func TestWalletSignTypedData(t *testing.T) {
	ctx := context.Background()
	w := newTestWallet(browser.WalletConfig{RPC: map[uint64]string{84532: unusedRPC}, Connected: true})
	domain := devchain.TokenDomain{Name: "USDC", Version: "2", ChainID: 84532, VerifyingContract: devchain.USDCAddress}
	auth := devchain.Authorization{From: w.Address(), To: common.HexToAddress("0xb0b"), Value: big.NewInt(5), ValidBefore: big.NewInt(1 << 40), Nonce: [32]byte{7}}
	doc, _ := json.Marshal(devchain.AuthorizationTypedData(domain, auth))

	// The typed data must be a JSON string.
	if _, err := w.Request(ctx, "eth_signTypedData_v4", []any{w.Address().Hex(), json.RawMessage(doc)}); code(err) != browser.CodeInvalidParams {
		t.Fatalf("typed data as an object: %v, want -32602", err)
	}
	res, err := w.Request(ctx, "eth_signTypedData_v4", []any{w.Address().Hex(), string(doc)})
	if err != nil {
		t.Fatal(err)
	}
	want, err := devchain.SignAuthorization(devchain.CustomerKey(), domain, auth)
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != `"`+hexutil.Encode(want)+`"` {
		t.Fatalf("signature %s, want %s", res, hexutil.Encode(want))
	}
	td, err := w.RequestsFor("eth_signTypedData_v4")[1].TypedData()
	if err != nil || td.Message["nonce"] != hexutil.Encode(auth.Nonce[:]) {
		t.Fatalf("recorded typed data: %v, %v", td.Message, err)
	}

	w.Reject("eth_signTypedData_v4")
	if _, err := w.Request(ctx, "eth_signTypedData_v4", []any{w.Address().Hex(), string(doc)}); code(err) != browser.CodeUserRejected {
		t.Fatalf("rejected signature: %v, want 4001", err)
	}
	// A domain of another chain than the active one is refused before the
	// user is asked.
	domain.ChainID = 1
	doc, _ = json.Marshal(devchain.AuthorizationTypedData(domain, auth))
	if _, err := w.Request(ctx, "eth_signTypedData_v4", []any{w.Address().Hex(), string(doc)}); code(err) != browser.CodeInvalidParams || !strings.Contains(err.Error(), "active chainId") {
		t.Fatalf("domain of another chain: %v, want -32602", err)
	}
}

func TestWalletConfigMistakes(t *testing.T) {
	for name, f := range map[string]func(){
		"no key":            func() { browser.NewWallet(browser.WalletConfig{RPC: map[uint64]string{1: unusedRPC}}) },
		"chain without rpc": func() { newTestWallet(browser.WalletConfig{ChainID: 2}) },
		"reject a read":     func() { newTestWallet(browser.WalletConfig{}).Reject("eth_chainId") },
		"reject a typo":     func() { newTestWallet(browser.WalletConfig{Reject: []string{"eth_signTypedData"}}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		})
	}
}
