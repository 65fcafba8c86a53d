package soldev

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/paygate/paygate/chain"
)

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// rawCall sends one JSON-RPC request and returns its result or error.
func rawCall(t *testing.T, url, method string, params ...any) (json.RawMessage, *rpcError) {
	t.Helper()
	if params == nil {
		params = []any{}
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	res, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		Result json.RawMessage `json:"result"`
		Error  *rpcError       `json:"error"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Result, out.Error
}

func TestDevKeysMatchConstants(t *testing.T) {
	for name, c := range map[string]struct {
		got  solana.PublicKey
		want string
	}{
		"customer":       {CustomerKey().PublicKey(), CustomerAddress},
		"stranger":       {StrangerKey().PublicKey(), StrangerAddress},
		"merchant":       {MerchantKey().PublicKey(), MerchantAddress},
		"mint authority": {MintAuthorityKey().PublicKey(), MintAuthorityAddress},
		"usdc mint":      {devKey("usdc mint").PublicKey(), USDCMintAddress},
		"lookalike mint": {devKey("lookalike mint").PublicKey(), LookalikeMintAddress},
	} {
		if c.got.String() != c.want {
			t.Errorf("%s: key derives to %s, constant says %s", name, c.got, c.want)
		}
	}
	for _, c := range []struct {
		wallet, mint solana.PublicKey
		want         string
	}{{Customer, USDCMint, CustomerUSDCAddress}, {Stranger, USDCMint, StrangerUSDCAddress}} {
		if got, _ := associatedTokenAddress(c.wallet, c.mint, solana.TokenProgramID); got.String() != c.want {
			t.Errorf("ATA of %s: %s, constant says %s", c.wallet, got, c.want)
		}
	}
	sum := solana.PublicKeyFromBytes(sha256Of("paygate soldev genesis"))
	if sum.String() != GenesisHash {
		t.Errorf("GenesisHash %s, sha256 says %s", GenesisHash, sum)
	}
}

func TestCheckGenesis(t *testing.T) {
	c := testChain(t)
	ctx := testCtx(t, 10*time.Second)
	if err := CheckGenesis(ctx, c.RPCURL()); err != nil {
		t.Fatal(err)
	}
	devnet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"result":"EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG"}`)
	}))
	defer devnet.Close()
	if err := CheckGenesis(ctx, devnet.URL); !errors.Is(err, chain.ErrChainIDMismatch) {
		t.Fatalf("devnet's genesis hash: %v, want ErrChainIDMismatch", err)
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	if err := CheckGenesis(ctx, down.URL); err == nil || errors.Is(err, chain.ErrChainIDMismatch) {
		t.Fatalf("unreachable RPC: %v, want a transport error", err)
	}
}

// fakeAPI serves the two checkout routes a wallet uses.
type fakeAPI struct {
	*httptest.Server
	sessions  map[string]checkoutSession
	submitted chan map[string]string
}

func newFakeAPI(t *testing.T, sessions ...checkoutSession) *fakeAPI {
	a := &fakeAPI{sessions: map[string]checkoutSession{}, submitted: make(chan map[string]string, 10)}
	for _, s := range sessions {
		a.sessions[s.ID] = s
	}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/checkout/session/"):
			s, ok := a.sessions[strings.TrimPrefix(r.URL.Path, "/api/checkout/session/")]
			if !ok {
				http.NotFound(w, r)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"session": s}})
		case r.Method == http.MethodPost && r.URL.Path == "/api/checkout/submit":
			var body map[string]string
			_ = json.NewDecoder(r.Body).Decode(&body)
			a.submitted <- body
			fmt.Fprint(w, `{"data":{}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.Close)
	return a
}

// TestPaySessionAndReferenceLookup pays sessions with PaySession and finds
// them (or not) with getSignaturesForAddress on the session's reference, as
// the service does for a Solana Pay payment that was never submitted.
func TestPaySessionAndReferenceLookup(t *testing.T) {
	c := testChain(t)
	ctx := testCtx(t, 60*time.Second)
	client := c.Client()
	merchant := solana.NewWallet().PublicKey()
	ref1, ref2 := solana.NewWallet().PublicKey(), solana.NewWallet().PublicKey()
	session := func(id string, ref solana.PublicKey) checkoutSession {
		return checkoutSession{ID: id, Network: chain.NetworkSolanaDevnet, MerchantWalletAddress: merchant.String(),
			TokenAddress: USDCMintAddress, AmountUnits: "2500000", PaymentReference: ref.String()}
	}
	api := newFakeAPI(t, session("cs_ref", ref1), session("cs_noref", ref2),
		checkoutSession{ID: "cs_evm", Network: chain.NetworkBaseSepolia, MerchantWalletAddress: "0x75B69029bA0F70f55bb3f688Be7BbeEf539c031b", TokenAddress: "0x311ac7C1fD17a484149813050b1084cfa1519dbA", AmountUnits: "1"})

	// With the reference, submitted.
	p1, err := PaySession(ctx, api.URL, c.RPCURL(), CustomerKey(), "cs_ref", nil, PayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !p1.Submitted || p1.Reference != ref1.String() || !p1.CreatedTokenAccount || p1.Units.String() != "2500000" {
		t.Fatalf("payment: %+v", p1)
	}
	if got := <-api.submitted; got["sessionId"] != "cs_ref" || got["txHash"] != p1.Signature {
		t.Fatalf("submitted %v, want cs_ref and %s", got, p1.Signature)
	}
	// Without the reference, not submitted: the token account exists now.
	p2, err := PaySession(ctx, api.URL, c.RPCURL(), CustomerKey(), "cs_noref", nil, PayOptions{NoReference: true, NoSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	if p2.Submitted || p2.Reference != "" || p2.CreatedTokenAccount {
		t.Fatalf("payment: %+v", p2)
	}
	select {
	case got := <-api.submitted:
		t.Fatalf("NoSubmit posted %v", got)
	default:
	}
	if _, err := PaySession(ctx, api.URL, c.RPCURL(), CustomerKey(), "cs_evm", nil, PayOptions{}); !errors.Is(err, ErrNotSolanaSession) {
		t.Fatalf("EVM session: %v, want ErrNotSolanaSession", err)
	}

	sig1, sig2 := solana.MustSignatureFromBase58(p1.Signature), solana.MustSignatureFromBase58(p2.Signature)
	for _, s := range []solana.Signature{sig1, sig2} {
		if _, err := waitStatus(ctx, client, s, rpc.ConfirmationStatusFinalized); err != nil {
			t.Fatal(err)
		}
	}
	found := func(ref solana.PublicKey) []string {
		list, err := client.GetSignaturesForAddressWithOpts(ctx, ref, &rpc.GetSignaturesForAddressOpts{Commitment: rpc.CommitmentFinalized})
		if err != nil {
			t.Fatal(err)
		}
		var sigs []string
		for _, s := range list {
			sigs = append(sigs, s.Signature.String())
			if s.Err != nil || s.Slot == 0 || s.BlockTime == nil || s.ConfirmationStatus != rpc.ConfirmationStatusFinalized {
				t.Errorf("entry %+v", s)
			}
		}
		return sigs
	}
	if got := found(ref1); len(got) != 1 || got[0] != p1.Signature {
		t.Errorf("getSignaturesForAddress(reference of the paid session) = %v, want [%s]", got, p1.Signature)
	}
	if got := found(ref2); len(got) != 0 {
		t.Errorf("getSignaturesForAddress(reference left out of the payment) = %v, want none", got)
	}

	// The verifier completes the referenced payment: 2.5 USDC to the merchant.
	v, err := chain.NewSolanaVerifier(devNetwork(c), client)
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Verify(ctx, chain.VerifyRequest{TxHash: p1.Signature, MerchantAddress: merchant.String(), ExpectedUnits: "2500000"})
	if err != nil || res.Verdict != chain.VerdictComplete || res.Payer != CustomerAddress {
		t.Fatalf("verify: %+v %v", res, err)
	}

	// The reference is a read-only non-signer key of the transferChecked.
	tx, err := client.GetParsedTransaction(ctx, sig1, &rpc.GetParsedTransactionOpts{Commitment: rpc.CommitmentFinalized})
	if err != nil {
		t.Fatal(err)
	}
	var transfer *rpc.ParsedInstruction
	for _, ix := range tx.Transaction.Message.Instructions {
		if ix.Program == "spl-token" {
			transfer = ix
		}
	}
	if transfer == nil || transfer.Parsed == nil {
		t.Fatalf("no parsed spl-token instruction in %+v", tx.Transaction.Message.Instructions)
	}
	raw, _ := json.Marshal(transfer.Parsed)
	if !strings.Contains(string(raw), `"type":"transferChecked"`) || !strings.Contains(string(raw), ref1.String()) {
		t.Errorf("parsed transfer %s lacks transferChecked or the reference", raw)
	}
	for _, k := range tx.Transaction.Message.AccountKeys {
		if k.PublicKey == ref1 && (k.Signer || k.Writable) {
			t.Errorf("reference key %+v must be read-only and not a signer", k)
		}
	}
}

// TestSignaturesForAddressPaging checks newest-first order and before,
// until and limit.
func TestSignaturesForAddressPaging(t *testing.T) {
	c := testChain(t)
	ctx := testCtx(t, 30*time.Second)
	client := c.Client()
	ref := solana.NewWallet().PublicKey()
	var sigs []solana.Signature // oldest first
	for i := range 4 {
		tr, err := newTransfer(ctx, client, Customer, USDCMint, Stranger, uint64(1000+i), []solana.PublicKey{ref})
		if err != nil {
			t.Fatal(err)
		}
		sig, err := send(ctx, client, tr.instructions(), []solana.PrivateKey{CustomerKey()}, sendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sigs = append(sigs, sig)
	}
	if _, err := waitStatus(ctx, client, sigs[3], rpc.ConfirmationStatusConfirmed); err != nil {
		t.Fatal(err)
	}
	list := func(o rpc.GetSignaturesForAddressOpts) string {
		o.Commitment = rpc.CommitmentConfirmed
		out, err := client.GetSignaturesForAddressWithOpts(ctx, ref, &o)
		if err != nil {
			t.Fatal(err)
		}
		var idx []string
		for _, s := range out {
			for i, want := range sigs {
				if s.Signature == want {
					idx = append(idx, fmt.Sprint(i))
				}
			}
		}
		return strings.Join(idx, ",")
	}
	limit := 2
	for name, c := range map[string]struct {
		o    rpc.GetSignaturesForAddressOpts
		want string
	}{
		"all":          {rpc.GetSignaturesForAddressOpts{}, "3,2,1,0"},
		"limit":        {rpc.GetSignaturesForAddressOpts{Limit: &limit}, "3,2"},
		"before":       {rpc.GetSignaturesForAddressOpts{Before: sigs[2]}, "1,0"},
		"until":        {rpc.GetSignaturesForAddressOpts{Until: sigs[1]}, "3,2"},
		"before+until": {rpc.GetSignaturesForAddressOpts{Before: sigs[3], Until: sigs[0]}, "2,1"},
	} {
		if got := list(c.o); got != c.want {
			t.Errorf("%s: %s, want %s", name, got, c.want)
		}
	}
	if _, e := rawCall(t, c.RPCURL(), "getSignaturesForAddress", ref.String(), map[string]any{"commitment": "processed"}); e == nil {
		t.Error("processed commitment accepted by getSignaturesForAddress")
	}
}

// TestRPCShapes checks the answers a verifier or wallet parses: encodings of
// getTransaction for legacy and v0 transactions, commitments, statuses,
// accounts and the errors of sendTransaction.
func TestRPCShapes(t *testing.T) {
	c := testChain(t)
	ctx := testCtx(t, 60*time.Second)
	client := c.Client()
	url := c.RPCURL()
	customer := CustomerKey()
	merchant := solana.NewWallet().PublicKey()

	// Fixed answers.
	for method, want := range map[string]string{"getHealth": `"ok"`, "getGenesisHash": `"` + GenesisHash + `"`} {
		if got, e := rawCall(t, url, method); e != nil || string(got) != want {
			t.Errorf("%s = %s %v, want %s", method, got, e, want)
		}
	}
	if v, err := client.GetVersion(ctx); err != nil || !strings.HasPrefix(v.SolanaCore, "litesvm-") {
		t.Errorf("getVersion: %+v %v", v, err)
	}
	if rent, err := client.GetMinimumBalanceForRentExemption(ctx, 165, ""); err != nil || rent != 2039280 {
		t.Errorf("rent for 165 bytes: %d %v", rent, err)
	}
	if _, e := rawCall(t, url, "noSuchMethod"); e == nil || e.Code != -32601 {
		t.Errorf("unknown method: %+v", e)
	}

	// Slots advance; finalized trails confirmed trails processed.
	slot := func(c rpc.CommitmentType) uint64 {
		s, err := client.GetSlot(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	p0 := slot(rpc.CommitmentProcessed)
	time.Sleep(3 * testSlot)
	f, cf, p := slot(rpc.CommitmentFinalized), slot(rpc.CommitmentConfirmed), slot(rpc.CommitmentProcessed)
	if p <= p0 || cf >= p || f >= cf || p-f > testFinalizeDepth+2 {
		t.Errorf("slots: processed %d then %d, confirmed %d, finalized %d", p0, p, cf, f)
	}

	// Accounts.
	bal, err := client.GetTokenAccountBalance(ctx, solana.MustPublicKeyFromBase58(CustomerUSDCAddress), rpc.CommitmentConfirmed)
	if err != nil || bal.Value.Decimals != 6 || bal.Value.Amount == "" {
		t.Errorf("customer USDC: %+v %v", bal, err)
	}
	if lamports, err := client.GetBalance(ctx, Stranger, rpc.CommitmentConfirmed); err != nil || lamports.Value == 0 {
		t.Errorf("stranger SOL: %+v %v", lamports, err)
	}
	mint, err := client.GetAccountInfoWithOpts(ctx, USDCMint, &rpc.GetAccountInfoOpts{Encoding: solana.EncodingJSONParsed})
	if err != nil || mint.Value.Owner != solana.TokenProgramID || !strings.Contains(string(mint.Value.Data.GetRawJSON()), `"decimals":6`) {
		t.Errorf("USDC mint jsonParsed: %+v %v", mint, err)
	}
	if _, err := client.GetAccountInfo(ctx, solana.NewWallet().PublicKey()); !errors.Is(err, rpc.ErrNotFound) {
		t.Errorf("missing account: %v, want ErrNotFound", err)
	}
	if _, e := rawCall(t, url, "getTokenAccountBalance", CustomerAddress); e == nil || !strings.Contains(e.Message, "not a Token account") {
		t.Errorf("getTokenAccountBalance of a wallet: %+v", e)
	}

	// A v0 payment through a lookup table, followed from processed to finalized.
	merchantATA, _ := associatedTokenAddress(merchant, USDCMint, solana.TokenProgramID)
	table, err := createLookupTable(ctx, client, customer, USDCMint, merchantATA)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := newTransfer(ctx, client, Customer, USDCMint, merchant, 1_234_567, nil)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := send(ctx, client, tr.instructions(), []solana.PrivateKey{customer}, sendOptions{addressTables: map[solana.PublicKey]solana.PublicKeySlice{table: {USDCMint, merchantATA}}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[rpc.ConfirmationStatusType]bool{}
	for !seen[rpc.ConfirmationStatusFinalized] {
		st, err := client.GetSignatureStatuses(ctx, false, sig)
		if err != nil || st.Value[0] == nil {
			t.Fatalf("status: %+v %v", st, err)
		}
		seen[st.Value[0].ConfirmationStatus] = true
		if (st.Value[0].ConfirmationStatus == rpc.ConfirmationStatusFinalized) != (st.Value[0].Confirmations == nil) {
			t.Errorf("confirmations %v at %s", st.Value[0].Confirmations, st.Value[0].ConfirmationStatus)
		}
		if !seen[rpc.ConfirmationStatusFinalized] {
			_, err := client.GetTransaction(ctx, sig, &rpc.GetTransactionOpts{Commitment: rpc.CommitmentFinalized, MaxSupportedTransactionVersion: new(uint64)})
			if !errors.Is(err, rpc.ErrNotFound) {
				// Found at finalized: the slot may have advanced between the
				// two calls; only a status that is still not finalized after
				// it is a fault.
				after, serr := client.GetSignatureStatuses(ctx, false, sig)
				if serr != nil || after.Value[0] == nil || after.Value[0].ConfirmationStatus != rpc.ConfirmationStatusFinalized {
					t.Errorf("finalized getTransaction before finalization: %v", err)
				}
			}
		}
		time.Sleep(testSlot / 4)
	}
	if !seen[rpc.ConfirmationStatusConfirmed] {
		t.Errorf("statuses seen: %v, want confirmed before finalized", seen)
	}
	if _, e := rawCall(t, url, "getTransaction", sig.String(), map[string]any{"encoding": "json"}); e == nil || e.Code != -32015 {
		t.Errorf("v0 without maxSupportedTransactionVersion: %+v, want -32015", e)
	}
	if _, e := rawCall(t, url, "getTransaction", sig.String(), map[string]any{"commitment": "processed", "maxSupportedTransactionVersion": 0}); e == nil {
		t.Error("getTransaction accepted commitment processed")
	}
	// solana-go reads base64 (as the verifier does) and base58; json below.
	for _, enc := range []solana.EncodingType{solana.EncodingBase64, solana.EncodingBase58} {
		tx, err := client.GetTransaction(ctx, sig, &rpc.GetTransactionOpts{Encoding: enc, MaxSupportedTransactionVersion: new(uint64)})
		if err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		decoded, err := tx.Transaction.GetTransaction()
		if err != nil || decoded.Signatures[0] != sig || !decoded.Message.IsVersioned() || len(decoded.Message.AddressTableLookups) != 1 {
			t.Errorf("%s: decoded %v %v", enc, decoded, err)
		}
		if tx.Version != 0 || len(tx.Meta.LoadedAddresses.Writable) != 1 || tx.Meta.LoadedAddresses.Writable[0] != merchantATA ||
			len(tx.Meta.LoadedAddresses.ReadOnly) != 1 || tx.Meta.LoadedAddresses.ReadOnly[0] != USDCMint {
			t.Errorf("%s: version %v loaded %+v", enc, tx.Version, tx.Meta.LoadedAddresses)
		}
		if tx.Meta.Err != nil || tx.BlockTime == nil || tx.Meta.Fee != 5000 || len(tx.Meta.LogMessages) == 0 || len(tx.Meta.InnerInstructions) == 0 {
			t.Errorf("%s: meta %+v", enc, tx.Meta)
		}
		// The merchant's account was created in this transaction: a post
		// balance without a pre balance.
		var pre, post int
		for _, b := range tx.Meta.PreTokenBalances {
			if b.Owner != nil && *b.Owner == merchant {
				pre++
			}
		}
		for _, b := range tx.Meta.PostTokenBalances {
			if b.Owner != nil && *b.Owner == merchant && b.UiTokenAmount.Amount == "1234567" && *b.ProgramId == solana.TokenProgramID && b.Mint == USDCMint {
				post++
			}
		}
		if pre != 0 || post != 1 {
			t.Errorf("%s: merchant token balances pre %d post %d, want 0 and 1", enc, pre, post)
		}
	}
	raw, e := rawCall(t, url, "getTransaction", sig.String(), map[string]any{"encoding": "json", "maxSupportedTransactionVersion": 0})
	var asJSON struct {
		Version     int `json:"version"`
		Transaction struct {
			Signatures []string `json:"signatures"`
			Message    struct {
				AccountKeys         []string `json:"accountKeys"`
				Header              struct{ NumRequiredSignatures int }
				RecentBlockhash     string `json:"recentBlockhash"`
				Instructions        []struct{ ProgramIDIndex int }
				AddressTableLookups []struct {
					AccountKey      string `json:"accountKey"`
					WritableIndexes []int  `json:"writableIndexes"`
					ReadonlyIndexes []int  `json:"readonlyIndexes"`
				} `json:"addressTableLookups"`
			} `json:"message"`
		} `json:"transaction"`
	}
	if err := json.Unmarshal(raw, &asJSON); e != nil || err != nil {
		t.Fatalf("json: %+v %v", e, err)
	}
	m := asJSON.Transaction.Message
	if asJSON.Transaction.Signatures[0] != sig.String() || m.Header.NumRequiredSignatures != 1 || len(m.Instructions) != 2 ||
		len(m.AddressTableLookups) != 1 || m.AddressTableLookups[0].AccountKey != table.String() ||
		fmt.Sprint(m.AddressTableLookups[0].WritableIndexes, m.AddressTableLookups[0].ReadonlyIndexes) != "[1] [0]" {
		t.Errorf("json: %s", raw)
	}
	parsed, err := client.GetParsedTransaction(ctx, sig, &rpc.GetParsedTransactionOpts{MaxSupportedTransactionVersion: new(uint64)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(parsed.Transaction.Message.AccountKeys); n < 7 || parsed.Transaction.Message.AccountKeys[n-1].PublicKey != USDCMint {
		t.Errorf("jsonParsed account keys %+v: the loaded ones come last", parsed.Transaction.Message.AccountKeys)
	}
	programs := ""
	for _, ix := range parsed.Transaction.Message.Instructions {
		programs += ix.Program + " "
	}
	if programs != "spl-associated-token-account spl-token " {
		t.Errorf("jsonParsed programs %q", programs)
	}

	// sendTransaction errors: a failing preflight, an unknown blockhash.
	failing := []solana.Instruction{transferChecked(solana.TokenProgramID, solana.MustPublicKeyFromBase58(CustomerUSDCAddress), USDCMint, merchantATA, Customer, 1, 9)}
	if _, err := send(ctx, client, failing, []solana.PrivateKey{customer}, sendOptions{}); err == nil || !strings.Contains(err.Error(), "custom program error: 0x12") {
		t.Errorf("failing preflight: %v", err)
	}
	// With skipPreflight it lands: meta.err set, the fee charged, nothing else.
	landed, err := send(ctx, client, failing, []solana.PrivateKey{customer}, sendOptions{skipPreflight: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waitStatus(ctx, client, landed, rpc.ConfirmationStatusConfirmed); err != nil {
		t.Fatal(err)
	}
	ftx, err := client.GetTransaction(ctx, landed, &rpc.GetTransactionOpts{Encoding: solana.EncodingBase64, Commitment: rpc.CommitmentConfirmed})
	if err != nil {
		t.Fatal(err)
	}
	if ftx.Meta.Err == nil || ftx.Meta.PreBalances[0]-ftx.Meta.PostBalances[0] != ftx.Meta.Fee || ftx.Meta.Fee != 5000 ||
		jsonOf(ftx.Meta.PreTokenBalances) != jsonOf(ftx.Meta.PostTokenBalances) {
		t.Errorf("failed transaction: err %v fee %d lamports %v -> %v", ftx.Meta.Err, ftx.Meta.Fee, ftx.Meta.PreBalances, ftx.Meta.PostBalances)
	}
	stale, err := solana.NewTransaction(failing, solana.Hash{1}, solana.TransactionPayer(Customer))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Sign(func(solana.PublicKey) *solana.PrivateKey { return &customer }); err != nil {
		t.Fatal(err)
	}
	if _, err := client.SendTransaction(ctx, stale); err == nil || !strings.Contains(err.Error(), "Blockhash not found") {
		t.Errorf("unknown blockhash: %v", err)
	}
	wire, _ := stale.MarshalBinary()
	sim, e := rawCall(t, url, "simulateTransaction", solana.Base58(wire).String(), map[string]any{"replaceRecentBlockhash": true})
	if e != nil || !strings.Contains(string(sim), `"Custom":18`) || !strings.Contains(string(sim), "replacementBlockhash") {
		t.Errorf("simulateTransaction: %s %+v", sim, e)
	}
}

// TestStartErrors: missing node or packages say what to do; nothing runs.
func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sidecar.js"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(context.Background(), Config{Dir: dir, Node: "/bin/true"}); !errors.Is(err, ErrPackagesMissing) || !strings.Contains(err.Error(), "npm ci --prefix chain/soldev/sidecar") {
		t.Errorf("no node_modules: %v", err)
	}
	t.Setenv("PATH", "")
	_, err := StartDev(context.Background(), Config{Dir: dir})
	if !errors.Is(err, ErrNodeMissing) || !strings.Contains(err.Error(), "solana dev chain not started") {
		t.Errorf("no node: %v", err)
	}
}

// TestCloseStopsSidecar: Close ends the node process and frees the port.
func TestCloseStopsSidecar(t *testing.T) {
	c, err := Start(context.Background(), Config{})
	requireSidecar(t, err)
	pid := c.cmd.Process.Pid
	host := strings.TrimPrefix(c.RPCURL(), "http://")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("sidecar %d still exists after Close (%v)", pid, err)
	}
	if conn, err := net.DialTimeout("tcp", host, time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after Close", host)
	}
}

// TestSidecarExitsWithParent: the sidecar exits when its stdin closes,
// which is what happens when the Go process dies.
func TestSidecarExitsWithParent(t *testing.T) {
	c, err := Start(context.Background(), Config{})
	requireSidecar(t, err)
	defer c.Close()
	_ = c.stdin.Close() // as if this process had died
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("sidecar still running 10 s after its stdin closed")
	}
}

// TestContextEndStopsChain: the chain stops when Start's context ends.
func TestContextEndStopsChain(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c, err := Start(ctx, Config{})
	requireSidecar(t, err)
	cancel()
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("sidecar still running 10 s after the context ended")
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func sha256Of(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

// TestPortInUse: a taken port is reported with the sidecar's own words.
func TestPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Start(context.Background(), Config{Port: l.Addr().(*net.TCPAddr).Port})
	if errors.Is(err, ErrNodeMissing) || errors.Is(err, ErrPackagesMissing) {
		requireSidecar(t, err)
	}
	if err == nil || !strings.Contains(err.Error(), "EADDRINUSE") {
		t.Fatalf("port in use: %v", err)
	}
}

// The verifier checks the cluster it talks to: solana_devnet pointed at the
// dev chain with the public devnet's genesis hash is refused as an EVM
// endpoint of another chain id is; with the dev chain's it verifies.
func TestVerifierChecksGenesis(t *testing.T) {
	c := testChain(t)
	ctx := testCtx(t, 30*time.Second)
	wrong, _ := chain.DefaultRegistry().Lookup(chain.NetworkSolanaDevnet)
	wrong.RPCURL = c.RPCURL()
	mv := chain.NewMultiVerifier(chain.NewRegistry(wrong))
	defer mv.Close()
	sig := solana.Signature{1}
	_, err := mv.Verify(ctx, chain.VerifyRequest{Network: wrong.Name, TxHash: sig.String(), MerchantAddress: CustomerAddress, ExpectedUnits: "1"})
	if !errors.Is(err, chain.ErrChainIDMismatch) {
		t.Fatalf("public devnet's genesis on the dev chain: %v", err)
	}
	mv2 := chain.NewMultiVerifier(chain.NewRegistry(devNetwork(c)))
	defer mv2.Close()
	res, err := mv2.Verify(ctx, chain.VerifyRequest{Network: wrong.Name, TxHash: sig.String(), MerchantAddress: CustomerAddress, ExpectedUnits: "1"})
	if err != nil || res.Verdict != chain.VerdictPending {
		t.Fatalf("dev chain's genesis: %+v %v", res, err)
	}
}
