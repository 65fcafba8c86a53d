package devchain

import (
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/paygate/paygate/chain/contracts"
)

// fakeAPI answers the three checkout routes `paygate dev pay` uses, with one
// session whose JSON the test sets, and records what it was sent.
type fakeAPI struct {
	mu       sync.Mutex
	session  map[string]any
	submits  []map[string]string
	relays   []map[string]string
	srv      *httptest.Server
	relayRes string
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{relayRes: `{"status":"success","data":{"txHash":"0xrelayed","status":"txn_broadcast"}}`}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var body map[string]string
		_ = json.NewDecoder(r.Body).Decode(&body)
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/checkout/session/cs_1":
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"session": f.session}})
		case r.Method == http.MethodPost && r.URL.Path == "/api/checkout/submit":
			f.submits = append(f.submits, body)
			_, _ = w.Write([]byte(`{"status":"success","data":{"status":"txn_broadcast"}}`))
		case r.Method == http.MethodPost && r.URL.Path == "/api/checkout/session/cs_1/authorization":
			f.relays = append(f.relays, body)
			_, _ = w.Write([]byte(f.relayRes))
		default:
			http.Error(w, `{"status":"error"}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// setSession serves a session of the dev chain c with a fresh
// paymentReference; withTypedData adds the `authorization` typed data.
func (f *fakeAPI) setSession(c *Chain, merchant common.Address, units int64, withTypedData bool) (ref [32]byte, expires time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ref = common.Hash(crypto.Keccak256Hash([]byte(time.Now().String())))
	expires = time.Now().Add(30 * time.Minute).Truncate(time.Millisecond)
	f.session = map[string]any{
		"id": "cs_1", "network": "base_sepolia", "merchantWalletAddress": merchant.Hex(), "tokenAddress": c.USDC().Hex(),
		"amountUnits": big.NewInt(units).String(), "expiresAt": expires.UTC().Format("2006-01-02T15:04:05.000Z"),
		"paymentReference": hexutil.Encode(ref[:]),
	}
	if withTypedData {
		f.session["authorization"] = map[string]any{
			"domain": map[string]string{"name": "USD Coin (paygate dev)", "version": "2", "chainId": "1337",
				"verifyingContract": c.USDC().Hex()},
			"primaryType": "TransferWithAuthorization",
			"types":       AuthorizationTypes(),
			"message": map[string]string{"from": c.Customer().Hex(), "to": merchant.Hex(), "value": big.NewInt(units).String(),
				"validAfter": "0", "validBefore": big.NewInt(expires.Unix()).String(), "nonce": hexutil.Encode(ref[:])},
		}
	}
	return ref, expires
}

func (f *fakeAPI) edit(fn func(s map[string]any)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.session)
}

// waitReceipt waits for the dev chain (sealing on its own) to mine hash.
func waitReceipt(t *testing.T, c *Chain, hash string) *types.Receipt {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := c.Client().TransactionReceipt(context.Background(), common.HexToHash(hash)); err == nil {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s not mined", hash)
	return nil
}

// logsOf renders a receipt's token logs: "used <authorizer> <nonce>" and
// "transfer <from> <to> <value>".
func logsOf(r *types.Receipt) []string {
	usdc := contracts.MustLoad(contracts.TestUSDC)
	var out []string
	for _, l := range r.Logs {
		switch {
		case l.Address != USDCAddress:
			out = append(out, "foreign log")
		case l.Topics[0] == usdc.ABI.Events["AuthorizationUsed"].ID:
			out = append(out, "used "+common.BytesToAddress(l.Topics[1][:]).Hex()+" "+l.Topics[2].Hex())
		case l.Topics[0] == usdc.ABI.Events["Transfer"].ID:
			out = append(out, "transfer "+common.BytesToAddress(l.Topics[1][:]).Hex()+" "+common.BytesToAddress(l.Topics[2][:]).Hex()+" "+new(big.Int).SetBytes(l.Data).String())
		case l.Topics[0] == usdc.ABI.Events["Approval"].ID:
			out = append(out, "approval")
		}
	}
	return out
}

// TestPaySession drives Pay against a fake API and a real dev chain in
// every mode `paygate dev pay` offers.
func TestPaySession(t *testing.T) {
	c := startChain(t, 50*time.Millisecond)
	api := newFakeAPI(t)
	ctx := context.Background()
	merchant := crypto.PubkeyToAddress(mustKey(t).PublicKey)
	customer, stranger := c.Customer().Hex(), crypto.PubkeyToAddress(StrangerKey().PublicKey).Hex()
	opts := func(o PayOptions) PayOptions {
		o.APIBase, o.RPCURL, o.SessionID = api.srv.URL, c.RPCURL(), "cs_1"
		return o
	}
	transfer := func(from, to string, units int64) string {
		return "transfer " + from + " " + to + " " + big.NewInt(units).String()
	}
	check := func(p SessionPayment, want ...string) {
		t.Helper()
		r := waitReceipt(t, c, p.TxHash)
		if r.Status != types.ReceiptStatusSuccessful {
			t.Fatalf("%s reverted", p.TxHash)
		}
		if got := logsOf(r); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("logs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	lastSubmit := func() map[string]string {
		api.mu.Lock()
		defer api.mu.Unlock()
		if len(api.submits) == 0 {
			return nil
		}
		return api.submits[len(api.submits)-1]
	}

	t.Run("bound, from the served typed data", func(t *testing.T) {
		ref, _ := api.setSession(c, merchant, 12_500_000, true)
		p, err := PaySession(ctx, api.srv.URL, c.RPCURL(), CustomerKey(), "cs_1", nil)
		if err != nil {
			t.Fatal(err)
		}
		check(p, "used "+customer+" "+common.Hash(ref).Hex(), transfer(customer, merchant.Hex(), 12_500_000))
		if s := lastSubmit(); s["sessionId"] != "cs_1" || s["txHash"] != p.TxHash || p.SubmittedTo != "cs_1" || p.Method != "authorization" {
			t.Fatalf("submitted %v, payment %+v", s, p)
		}
	})
	t.Run("bound, built from the session's fields, short amount", func(t *testing.T) {
		ref, expires := api.setSession(c, merchant, 12_500_000, false)
		p, err := Pay(ctx, opts(PayOptions{Units: big.NewInt(7)}))
		if err != nil {
			t.Fatal(err)
		}
		if p.Authorization.ValidBefore.Int64() != expires.Unix() || p.Authorization.ValidAfter.Sign() != 0 || p.Units.Int64() != 7 {
			t.Fatalf("authorization %+v", p.Authorization)
		}
		check(p, "used "+customer+" "+common.Hash(ref).Hex(), transfer(customer, merchant.Hex(), 7))
	})
	t.Run("nothing to bind to", func(t *testing.T) {
		api.setSession(c, merchant, 1, false)
		api.edit(func(s map[string]any) { delete(s, "paymentReference") })
		if _, err := Pay(ctx, opts(PayOptions{})); err == nil || !strings.Contains(err.Error(), "--plain") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("plain", func(t *testing.T) {
		api.setSession(c, merchant, 3_000_000, false)
		api.edit(func(s map[string]any) { delete(s, "paymentReference") })
		p, err := Pay(ctx, opts(PayOptions{Plain: true}))
		if err != nil {
			t.Fatal(err)
		}
		check(p, transfer(customer, merchant.Hex(), 3_000_000))
		if p.Authorization != nil || p.Method != "plain" || lastSubmit()["txHash"] != p.TxHash {
			t.Fatalf("payment %+v", p)
		}
	})
	t.Run("stranger, not submitted", func(t *testing.T) {
		ref, _ := api.setSession(c, merchant, 2_000_000, true)
		before := lastSubmit()
		p, err := Pay(ctx, opts(PayOptions{Key: StrangerKey(), NoSubmit: true}))
		if err != nil {
			t.Fatal(err)
		}
		check(p, "used "+stranger+" "+common.Hash(ref).Hex(), transfer(stranger, merchant.Hex(), 2_000_000))
		if lastSubmit()["txHash"] != before["txHash"] || p.SubmittedTo != "" {
			t.Fatal("submitted despite NoSubmit")
		}
	})
	t.Run("submitted to another session", func(t *testing.T) {
		api.setSession(c, merchant, 1_000_000, true)
		p, err := Pay(ctx, opts(PayOptions{SubmitTo: "cs_victim"}))
		if err != nil {
			t.Fatal(err)
		}
		if s := lastSubmit(); s["sessionId"] != "cs_victim" || s["txHash"] != p.TxHash {
			t.Fatalf("submitted %v", s)
		}
	})
	t.Run("relay", func(t *testing.T) {
		_, expires := api.setSession(c, merchant, 4_000_000, true)
		p, err := Pay(ctx, opts(PayOptions{Relay: true}))
		if err != nil {
			t.Fatal(err)
		}
		api.mu.Lock()
		body := api.relays[len(api.relays)-1]
		api.mu.Unlock()
		if body["from"] != customer || body["validAfter"] != "0" || body["validBefore"] != big.NewInt(expires.Unix()).String() || p.TxHash != "0xrelayed" {
			t.Fatalf("relayed %v, payment %+v", body, p)
		}
		// The relayer can broadcast exactly what was posted.
		sig, err := hexutil.Decode(body["signature"])
		if err != nil {
			t.Fatal(err)
		}
		if err := SimulateAuthorization(ctx, c.Client(), c.USDC(), *p.Authorization, sig); err != nil {
			t.Fatalf("relayed signature: %v", err)
		}
		if _, err := Pay(ctx, opts(PayOptions{Relay: true, Plain: true})); err == nil {
			t.Fatal("relay with plain accepted")
		}
	})
	t.Run("via router, bound", func(t *testing.T) {
		ref, _ := api.setSession(c, merchant, 5_000_000, true)
		p, err := Pay(ctx, opts(PayOptions{ViaRouter: true}))
		if err != nil {
			t.Fatal(err)
		}
		check(p, "used "+customer+" "+common.Hash(ref).Hex(), transfer(customer, RouterAddress.Hex(), 5_000_000),
			transfer(RouterAddress.Hex(), merchant.Hex(), 5_000_000))
	})
	t.Run("via router, plain", func(t *testing.T) {
		api.setSession(c, merchant, 6_000_000, true)
		p, err := Pay(ctx, opts(PayOptions{ViaRouter: true, Plain: true}))
		if err != nil {
			t.Fatal(err)
		}
		check(p, transfer(customer, RouterAddress.Hex(), 6_000_000), transfer(RouterAddress.Hex(), merchant.Hex(), 6_000_000))
	})
	t.Run("served typed data that does not match", func(t *testing.T) {
		for name, edit := range map[string]func(a map[string]any){
			"chain id": func(a map[string]any) { a["domain"].(map[string]string)["chainId"] = "1338" },
			"nonce":    func(a map[string]any) { a["message"].(map[string]string)["nonce"] = "0x" + strings.Repeat("ab", 32) },
			"payee":    func(a map[string]any) { a["message"].(map[string]string)["to"] = customer },
			"token":    func(a map[string]any) { a["domain"].(map[string]string)["verifyingContract"] = RouterAddress.Hex() },
			"types": func(a map[string]any) {
				ty := AuthorizationTypes()
				ty[TransferWithAuthorizationType] = ty[TransferWithAuthorizationType][:5]
				a["types"] = ty
			},
		} {
			api.setSession(c, merchant, 1, true)
			api.edit(func(s map[string]any) { edit(s["authorization"].(map[string]any)) })
			if _, err := Pay(ctx, opts(PayOptions{})); err == nil {
				t.Errorf("%s: paid", name)
			} else {
				t.Logf("%s: %v", name, err)
			}
		}
	})
	t.Run("refused by the token", func(t *testing.T) {
		api.setSession(c, merchant, 1, true)
		api.edit(func(s map[string]any) {
			s["authorization"].(map[string]any)["message"].(map[string]string)["validBefore"] = "1"
		})
		_, err := Pay(ctx, opts(PayOptions{}))
		if err == nil || !strings.Contains(err.Error(), "AuthorizationExpired") {
			t.Fatalf("err %v", err)
		}
	})
}
