package chain

import (
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/params"

	"github.com/paygate/paygate/chain/contracts"
)

// TestVerifyContractWalletProof: a smart contract wallet (EIP-1271) proves
// itself by answering isValidSignature for the message's EIP-191 hash;
// another key's signature, another message, an address without code and a
// contract that is no wallet are refused; an endpoint of another chain is
// no verdict.
func TestVerifyContractWalletProof(t *testing.T) {
	ctx := context.Background()
	deployerKey, owner, stranger := mustKey(t), mustKey(t), mustKey(t)
	eth := new(big.Int).Mul(big.NewInt(10), big.NewInt(params.Ether))
	sim := simulated.NewBackend(types.GenesisAlloc{crypto.PubkeyToAddress(deployerKey.PublicKey): {Balance: eth}})
	t.Cleanup(func() { _ = sim.Close() })
	client := sim.Client()
	deployer, err := contracts.NewTransactor(ctx, client, deployerKey)
	if err != nil {
		t.Fatal(err)
	}
	deploy := func(a *contracts.Artifact, args ...any) common.Address {
		addr, _, err := deployer.Deploy(ctx, a, args...)
		if err != nil {
			t.Fatal(err)
		}
		sim.Commit()
		return addr
	}
	wallet := deploy(contracts.MustLoad(contracts.SmartWallet), crypto.PubkeyToAddress(owner.PublicKey))
	notAWallet := deploy(contracts.MustLoad(contracts.Forwarder))
	id, err := client.ChainID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := Network{Name: "base_sepolia", Family: FamilyEVM, ChainID: id.Uint64()}

	p := WalletProof{Address: wallet.Hex(), MerchantID: "mer_1", Account: "a@example.com", Nonce: "00", Issued: time.Unix(1_800_000_000, 0)}
	msg := p.Message()
	sign := func(key *ecdsa.PrivateKey, message string) string {
		t.Helper()
		sig, err := crypto.Sign(accounts.TextHash([]byte(message)), key)
		if err != nil {
			t.Fatal(err)
		}
		sig[64] += 27
		return "0x" + hex.EncodeToString(sig)
	}
	ownerSig := sign(owner, msg)
	if err := VerifyContractWalletProof(ctx, client, n, wallet.Hex(), msg, ownerSig); err != nil {
		t.Fatalf("the owner's signature for the wallet: %v", err)
	}
	// A contract wallet's signature is no key's: the EOA check refuses it.
	if err := VerifyWalletProof(FamilyEVM, wallet.Hex(), msg, ownerSig); !errors.Is(err, ErrBadWalletProof) {
		t.Fatalf("EOA check of a contract wallet's signature: %v", err)
	}
	for name, c := range map[string]struct{ address, message, sig, want string }{
		"another key":           {wallet.Hex(), msg, sign(stranger, msg), "refuses it"},
		"another message":       {wallet.Hex(), msg, sign(owner, msg+" "), "refuses it"},
		"empty signature":       {wallet.Hex(), msg, "0x", "refuses it"},
		"not hex":               {wallet.Hex(), msg, "0xzz", "must be hex"},
		"no contract there":     {crypto.PubkeyToAddress(owner.PublicKey).Hex(), msg, ownerSig, "is no contract on base_sepolia"},
		"a contract, no wallet": {notAWallet.Hex(), msg, ownerSig, "refuses it"},
	} {
		err := VerifyContractWalletProof(ctx, client, n, c.address, c.message, c.sig)
		if !errors.Is(err, ErrBadWalletProof) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal saying %q", name, err, c.want)
		}
	}
	other := n
	other.ChainID = id.Uint64() + 1
	if err := VerifyContractWalletProof(ctx, client, other, wallet.Hex(), msg, ownerSig); !errors.Is(err, ErrContractCheck) || errors.Is(err, ErrBadWalletProof) {
		t.Fatalf("an endpoint of another chain: %v, want no verdict", err)
	}
}

// TestContractWalletProofEndpointFailure: an endpoint's JSON-RPC error on
// the eth_call (a rate limit) is no verdict, and the endpoint's URL (which
// often carries a provider's key) is not in the error.
func TestContractWalletProofEndpointFailure(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		switch req.Method {
		case "eth_chainId":
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":"0x14a34"}`))
		case "eth_getCode":
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":"0x6001"}`))
		default:
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"error":{"code":-32005,"message":"daily request count exceeded, request rate limited"}}`))
		}
	}))
	defer srv.Close()
	url := srv.URL + "/v3/SECRETKEY"
	c, err := ethclient.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	n := Network{Name: "base_sepolia", Family: FamilyEVM, ChainID: 84532, RPCURL: url}
	err = VerifyContractWalletProof(context.Background(), c, n, "0x52908400098527886E0F7030069857D2E4169EE7", "m", "0x")
	if !errors.Is(err, ErrContractCheck) || errors.Is(err, ErrBadWalletProof) {
		t.Fatalf("a rate-limited eth_call: %v, want no verdict", err)
	}
	srv.Close() // the endpoint gone: the dial error names its URL
	err = VerifyContractWalletProof(context.Background(), c, n, "0x52908400098527886E0F7030069857D2E4169EE7", "m", "0x")
	if !errors.Is(err, ErrContractCheck) || strings.Contains(err.Error(), "SECRETKEY") {
		t.Fatalf("the endpoint gone: %v, want no verdict and no key", err)
	}
}

// echoClient is a chain whose contract at every address answers an eth_call
// with its calldata (runtime 0x366000600037366000f3).
type echoClient struct{}

func (echoClient) ChainID(context.Context) (*big.Int, error) { return big.NewInt(84532), nil }
func (echoClient) CodeAt(context.Context, common.Address, *big.Int) ([]byte, error) {
	return common.FromHex("0x366000600037366000f3"), nil
}
func (echoClient) CallContract(_ context.Context, m ethereum.CallMsg, _ *big.Int) ([]byte, error) {
	return m.Data, nil
}

// TestEchoingContractIsNoWallet: a contract echoing its calldata answers
// isValidSignature's selector followed by the hash, not the ABI-encoded
// magic value: no proof.
func TestEchoingContractIsNoWallet(t *testing.T) {
	n := Network{Name: "base_sepolia", Family: FamilyEVM, ChainID: 84532}
	if err := VerifyContractWalletProof(context.Background(), echoClient{}, n, "0x52908400098527886E0F7030069857D2E4169EE7", "anything", "0x00"); !errors.Is(err, ErrBadWalletProof) {
		t.Fatalf("an echoing contract's answer accepted: %v", err)
	}
}
