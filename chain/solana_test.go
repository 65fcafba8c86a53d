package chain

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	ata "github.com/gagliardetto/solana-go/programs/associated-token-account"
	"github.com/gagliardetto/solana-go/programs/token"
	"github.com/gagliardetto/solana-go/rpc"
)

// solanaRPC is an httptest JSON-RPC server that answers getTransaction the
// way a Solana node does: null for unknown signatures (and for transactions
// not yet at the requested commitment), and error -32015 when a versioned
// transaction is requested without maxSupportedTransactionVersion.
type solanaRPC struct {
	srv *httptest.Server

	mu       sync.Mutex
	docs     map[string]txDoc
	refs     map[string][]string // reference → signatures carrying it, newest first
	requests []map[string]any
	lists    int // getSignaturesForAddress calls
	fail     bool
}

type txDoc struct {
	doc       map[string]any
	version   any // "legacy" or 0
	finalized bool
}

func newSolanaRPC(t *testing.T) *solanaRPC {
	s := &solanaRPC{docs: map[string]txDoc{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *solanaRPC) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params []any           `json:"params"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	reply := func(result any, rpcErr map[string]any) {
		out := map[string]any{"jsonrpc": "2.0", "id": req.ID}
		if rpcErr != nil {
			out["error"] = rpcErr
		} else {
			out["result"] = result
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
		return
	}
	if req.Method == "getSignaturesForAddress" && len(req.Params) > 0 {
		s.lists++
		key, _ := req.Params[0].(string)
		var opts struct {
			Limit  int    `json:"limit"`
			Before string `json:"before"`
		}
		if raw, err := json.Marshal(req.Params[len(req.Params)-1]); err == nil {
			_ = json.Unmarshal(raw, &opts)
		}
		limit, before := opts.Limit, opts.Before
		if limit <= 0 {
			limit = 1000
		}
		list := []any{}
		for _, sig := range s.refs[key] { // newest first, after before
			if before != "" {
				if sig == before {
					before = ""
				}
				continue
			}
			if len(list) == limit {
				break
			}
			list = append(list, map[string]any{"signature": sig, "slot": 331_234_567, "err": nil, "confirmationStatus": "finalized"})
		}
		reply(list, nil)
		return
	}
	if req.Method != "getTransaction" || len(req.Params) == 0 {
		reply(nil, map[string]any{"code": -32601, "message": "Method not found"})
		return
	}
	cfg, _ := req.Params[len(req.Params)-1].(map[string]any)
	s.requests = append(s.requests, cfg)
	sig, _ := req.Params[0].(string)
	d, ok := s.docs[sig]
	if !ok {
		reply(nil, nil)
		return
	}
	if d.version != "legacy" {
		if v, ok := cfg["maxSupportedTransactionVersion"].(float64); !ok || v < 0 {
			reply(nil, map[string]any{"code": -32015, "message": "Transaction version (0) is not supported by the requesting client. " +
				"Please try the request again with the following configuration parameter: \"maxSupportedTransactionVersion\": 0"})
			return
		}
	}
	if cfg["commitment"] == "finalized" && !d.finalized {
		reply(nil, nil)
		return
	}
	if cfg["encoding"] != "base64" {
		reply(nil, map[string]any{"code": -32602, "message": "test server only speaks base64"})
		return
	}
	reply(d.doc, nil)
}

func (s *solanaRPC) lastRequest() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[len(s.requests)-1]
}

// solanaPayment describes one transaction to publish on the fake node.
type solanaPayment struct {
	mint          solana.PublicKey // mint the transfer moves (default: the network's USDC)
	program       solana.PublicKey // token program of the balances (default: classic SPL Token)
	to            solana.PublicKey // wallet that owns the receiving token account (default: merchant)
	units         uint64
	merchantPre   uint64            // merchant's balance before
	createAccount bool              // receiving token account created in the same transaction (no pre entry)
	versioned     bool              // v0 transaction, receiving account loaded through an address lookup table
	failed        bool              // meta.err set
	notFinal      bool              // only at confirmed commitment
	reference     solana.PublicKey  // Solana Pay reference carried by the transfer (read-only, non-signer)
	from          solana.PrivateKey // payer (default: the customer)
}

type solanaEnv struct {
	t        *testing.T
	rpc      *solanaRPC
	net      Network
	usdc     solana.PublicKey
	merchant solana.PublicKey
	customer solana.PrivateKey
	verifier *SolanaVerifier
}

func newSolanaEnv(t *testing.T) *solanaEnv {
	t.Helper()
	e := &solanaEnv{t: t, rpc: newSolanaRPC(t)}
	e.net, _ = DefaultRegistry().Lookup(NetworkSolanaDevnet)
	e.net.GenesisHash = "" // recorded documents, not a cluster
	e.net.RPCURL = e.rpc.srv.URL
	e.usdc = solana.MustPublicKeyFromBase58(e.net.USDC)
	e.merchant = solana.NewWallet().PublicKey()
	e.customer = solana.NewWallet().PrivateKey
	var err error
	e.verifier, err = NewSolanaVerifier(e.net, rpc.New(e.rpc.srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// publish builds and signs a real transaction for p, stores the
// getTransaction document a node would return for it, and returns its
// signature.
func (e *solanaEnv) publish(p solanaPayment) string {
	e.t.Helper()
	if p.mint.IsZero() {
		p.mint = e.usdc
	}
	if p.program.IsZero() {
		p.program = solana.TokenProgramID
	}
	if p.to.IsZero() {
		p.to = e.merchant
	}
	if p.from == nil {
		p.from = e.customer
	}
	payer := p.from.PublicKey()
	src, _, err := solana.FindAssociatedTokenAddress(payer, p.mint)
	if err != nil {
		e.t.Fatal(err)
	}
	dst, _, err := solana.FindAssociatedTokenAddress(p.to, p.mint)
	if err != nil {
		e.t.Fatal(err)
	}
	var ixs []solana.Instruction
	if p.createAccount {
		ixs = append(ixs, ata.NewCreateInstruction(payer, p.to, p.mint).Build())
	}
	var transfer solana.Instruction = token.NewTransferCheckedInstruction(p.units, USDCDecimals, src, p.mint, dst, payer, nil).Build()
	if !p.reference.IsZero() {
		data, err := transfer.Data()
		if err != nil {
			e.t.Fatal(err)
		}
		transfer = solana.NewInstruction(transfer.ProgramID(), append(transfer.Accounts(), solana.Meta(p.reference)), data)
	}
	ixs = append(ixs, transfer)

	var opts []solana.TransactionOption
	opts = append(opts, solana.TransactionPayer(payer))
	tables := map[solana.PublicKey]solana.PublicKeySlice{}
	if p.versioned {
		table := solana.NewWallet().PublicKey()
		tables[table] = solana.PublicKeySlice{dst, p.mint}
		opts = append(opts, solana.TransactionAddressTables(tables))
	}
	var blockhash solana.Hash
	copy(blockhash[:], solana.NewWallet().PublicKey().Bytes())
	tx, err := solana.NewTransaction(ixs, blockhash, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := tx.Sign(func(k solana.PublicKey) *solana.PrivateKey {
		if k == payer {
			return &p.from
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	raw, err := tx.MarshalBinary()
	if err != nil {
		e.t.Fatal(err)
	}

	// Account indexes as the node numbers them: static keys, then loaded
	// writable, then loaded readonly addresses.
	keys := append(solana.PublicKeySlice{}, tx.Message.AccountKeys...)
	loadedW, loadedR := []string{}, []string{}
	for _, l := range tx.Message.AddressTableLookups {
		for _, i := range l.WritableIndexes {
			loadedW = append(loadedW, tables[l.AccountKey][i].String())
		}
	}
	for _, l := range tx.Message.AddressTableLookups {
		for _, i := range l.ReadonlyIndexes {
			loadedR = append(loadedR, tables[l.AccountKey][i].String())
		}
	}
	for _, k := range append(loadedW, loadedR...) {
		keys = append(keys, solana.MustPublicKeyFromBase58(k))
	}
	index := func(k solana.PublicKey) int {
		for i, x := range keys {
			if x == k {
				return i
			}
		}
		e.t.Fatalf("account %s not in transaction", k)
		return -1
	}
	if p.versioned && len(loadedW) == 0 {
		e.t.Fatal("versioned fixture loads no writable account through its lookup table")
	}

	const customerPre = 250_000_000
	moved := p.units
	if p.failed {
		moved = 0
	}
	bal := func(k, owner solana.PublicKey, units uint64) map[string]any {
		return map[string]any{
			"accountIndex": index(k),
			"mint":         p.mint.String(),
			"owner":        owner.String(),
			"programId":    p.program.String(),
			"uiTokenAmount": map[string]any{
				"amount":         fmt.Sprint(units),
				"decimals":       USDCDecimals,
				"uiAmount":       float64(units) / 1e6,
				"uiAmountString": fmt.Sprintf("%d.%06d", units/1e6, units%1e6),
			},
		}
	}
	pre := []any{bal(src, payer, customerPre)}
	if !p.createAccount {
		pre = append(pre, bal(dst, p.to, p.merchantPre))
	}
	post := []any{bal(src, payer, customerPre-moved), bal(dst, p.to, p.merchantPre+moved)}

	var metaErr, status any = nil, map[string]any{"Ok": nil}
	logs := []string{
		"Program " + p.program.String() + " invoke [1]",
		"Program log: Instruction: TransferChecked",
		"Program " + p.program.String() + " consumed 6200 of 200000 compute units",
		"Program " + p.program.String() + " success",
	}
	if p.failed {
		metaErr = map[string]any{"InstructionError": []any{len(ixs) - 1, map[string]any{"Custom": 1}}}
		status = map[string]any{"Err": metaErr}
		logs = append(logs[:2], "Program log: Error: insufficient funds",
			"Program "+p.program.String()+" failed: custom program error: 0x1")
	}
	balances := make([]uint64, len(keys))
	for i := range balances {
		balances[i] = 2_039_280
	}
	var version any = "legacy"
	if p.versioned {
		version = 0
	}
	sig := tx.Signatures[0].String()
	doc := map[string]any{
		"blockTime": time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC).Unix(),
		"slot":      331_234_567,
		"version":   version,
		"transaction": []any{
			base64.StdEncoding.EncodeToString(raw), "base64",
		},
		"meta": map[string]any{
			"computeUnitsConsumed": 6200,
			"err":                  metaErr,
			"status":               status,
			"fee":                  5000,
			"innerInstructions":    []any{},
			"loadedAddresses":      map[string]any{"writable": loadedW, "readonly": loadedR},
			"logMessages":          logs,
			"preBalances":          balances,
			"postBalances":         balances,
			"preTokenBalances":     pre,
			"postTokenBalances":    post,
			"rewards":              []any{},
		},
	}
	e.rpc.mu.Lock()
	e.rpc.docs[sig] = txDoc{doc: doc, version: version, finalized: !p.notFinal}
	if !p.reference.IsZero() {
		if e.rpc.refs == nil {
			e.rpc.refs = map[string][]string{}
		}
		e.rpc.refs[p.reference.String()] = append([]string{sig}, e.rpc.refs[p.reference.String()]...)
	}
	e.rpc.mu.Unlock()
	return sig
}

func (e *solanaEnv) verify(sig string, expected uint64) VerifyResult {
	e.t.Helper()
	res, err := e.verifier.Verify(context.Background(), VerifyRequest{
		Network: e.net.Name, TxHash: sig, MerchantAddress: e.merchant.String(), ExpectedUnits: fmt.Sprint(expected),
	})
	if err != nil {
		e.t.Fatalf("Verify(%s): %v", sig, err)
	}
	return res
}

func TestSolanaScenarios(t *testing.T) {
	e := newSolanaEnv(t)
	const due = 32_610_000
	otherMint := solana.NewWallet().PublicKey()
	cases := []struct {
		name     string
		pay      solanaPayment
		seen     bool
		verdict  Verdict
		reason   string
		received string
	}{
		{"valid transfer", solanaPayment{units: due, merchantPre: 5_000_000}, true, VerdictComplete, "", "32610000"},
		{"overpayment", solanaPayment{units: due + 1}, true, VerdictComplete, "", "32610001"},
		{"underpayment", solanaPayment{units: due - 1}, true, VerdictFailed, ReasonInvalidTransfer, "32609999"},
		{"wrong mint", solanaPayment{units: due, mint: otherMint}, true, VerdictFailed, ReasonInvalidTransfer, "0"},
		{"Token-2022 look-alike", solanaPayment{units: due, program: solana.Token2022ProgramID}, true, VerdictFailed, ReasonInvalidTransfer, "0"},
		{"owner mismatch", solanaPayment{units: due, to: solana.NewWallet().PublicKey()}, true, VerdictFailed, ReasonInvalidTransfer, "0"},
		{"meta.err set", solanaPayment{units: due, failed: true}, true, VerdictFailed, ReasonTxReverted, "0"},
		{"versioned v0 with lookup table", solanaPayment{units: due, versioned: true}, true, VerdictComplete, "", "32610000"},
		{"account created in same tx", solanaPayment{units: due, createAccount: true}, true, VerdictComplete, "", "32610000"},
		{"v0 and account created", solanaPayment{units: due, createAccount: true, versioned: true}, true, VerdictComplete, "", "32610000"},
		{"confirmed, not finalized", solanaPayment{units: due, notFinal: true}, true, VerdictPending, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sig := e.publish(tc.pay)
			res := e.verify(sig, due)
			if res.Seen != tc.seen || res.Verdict != tc.verdict || res.Reason != tc.reason || res.ReceivedUnits != tc.received {
				t.Fatalf("got seen=%v %s/%q received %q (%s), want seen=%v %s/%q received %q",
					res.Seen, res.Verdict, res.Reason, res.ReceivedUnits, res.Message, tc.seen, tc.verdict, tc.reason, tc.received)
			}
			if res.Verdict == VerdictComplete && (res.Payer != e.customer.PublicKey().String() || res.BlockNumber != 331_234_567) {
				t.Fatalf("complete result: %+v", res)
			}
			cfg := e.rpc.lastRequest()
			if cfg["maxSupportedTransactionVersion"] != float64(0) || cfg["encoding"] != "base64" {
				t.Fatalf("request config %v", cfg)
			}
		})
	}
	if !strings.Contains(e.verify(e.publish(solanaPayment{units: due, program: solana.Token2022ProgramID}), due).Message, solana.Token2022ProgramID.String()) {
		t.Error("Token-2022 rejection does not say why")
	}
}

func TestSolanaNotFoundAndCommitment(t *testing.T) {
	e := newSolanaEnv(t)
	var sig solana.Signature
	copy(sig[:], strings.Repeat("x", 64))
	res := e.verify(sig.String(), 1)
	if res.Seen || res.Verdict != VerdictPending {
		t.Fatalf("unknown signature: %+v", res)
	}
	e.rpc.mu.Lock()
	var commitments []any
	for _, r := range e.rpc.requests {
		commitments = append(commitments, r["commitment"])
	}
	e.rpc.mu.Unlock()
	if fmt.Sprint(commitments) != "[finalized confirmed]" {
		t.Fatalf("commitments asked: %v", commitments)
	}
}

// TestSolanaFollowsTheReference: a submitted signature the chain never
// got (its blockhash expired) is followed to a finalized transfer carrying
// the session's reference from the declared wallet (even short: the
// customer's own short payment fails visibly) or paying in full; a
// stranger's short transfer with the reference is never followed.
func TestSolanaFollowsTheReference(t *testing.T) {
	const due = 5_000_000
	var lost solana.Signature
	lost[0] = 9
	for _, c := range []struct {
		name    string
		pays    []solanaPayment // oldest first
		verdict Verdict
		paidBy  int // index in pays, -1 for none
	}{
		{"nothing carries the reference", nil, VerdictPending, -1},
		{"the customer paid again", []solanaPayment{{units: due}}, VerdictComplete, 0},
		{"a stranger's unit first, then the customer", []solanaPayment{{units: 1, from: solana.NewWallet().PrivateKey}, {units: due}}, VerdictComplete, 1},
		{"a stranger's unit only", []solanaPayment{{units: 1, from: solana.NewWallet().PrivateKey}}, VerdictPending, -1},
		{"a stranger paid in full", []solanaPayment{{units: due, from: solana.NewWallet().PrivateKey}}, VerdictComplete, 0},
		{"the customer paid short", []solanaPayment{{units: due - 1}}, VerdictFailed, 0},
		{"the customer paid short, then someone in full", []solanaPayment{{units: due - 1}, {units: due, from: solana.NewWallet().PrivateKey}}, VerdictComplete, 1},
		{"the customer's, not final yet", []solanaPayment{{units: due, notFinal: true}}, VerdictPending, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newSolanaEnv(t)
			ref := solana.NewWallet().PublicKey()
			var sigs []string
			for _, p := range c.pays {
				p.reference = ref
				sigs = append(sigs, e.publish(p))
			}
			res, err := e.verifier.Verify(context.Background(), VerifyRequest{Network: e.net.Name, TxHash: lost.String(),
				MerchantAddress: e.merchant.String(), ExpectedUnits: fmt.Sprint(due), PayerAddress: e.customer.PublicKey().String(),
				Reference: ref.String()})
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if c.paidBy >= 0 {
				want = sigs[c.paidBy]
			}
			if res.Verdict != c.verdict || res.PaidBy != want || (want == "") == res.Seen {
				t.Fatalf("got %s paidBy %q seen %v (%s), want %s paidBy %q", res.Verdict, res.PaidBy, res.Seen, res.Message, c.verdict, want)
			}
		})
	}
}

// TestSolanaFollowPastAFlood: 1,200 newer transactions carrying the
// reference (a stranger's flood, none of them the session's) do not hide
// the customer's payment: the follow reads the reference's signatures
// page after page.
func TestSolanaFollowPastAFlood(t *testing.T) {
	const due = 5_000_000
	e := newSolanaEnv(t)
	ref := solana.NewWallet().PublicKey()
	paid := e.publish(solanaPayment{units: due, reference: ref})
	e.rpc.mu.Lock()
	for i := range 1200 {
		var junk solana.Signature
		junk[0], junk[1], junk[2] = 0xee, byte(i>>8), byte(i)
		e.rpc.refs[ref.String()] = append([]string{junk.String()}, e.rpc.refs[ref.String()]...)
	}
	e.rpc.mu.Unlock()
	var lost solana.Signature
	lost[0] = 9
	res, err := e.verifier.Verify(context.Background(), VerifyRequest{Network: e.net.Name, TxHash: lost.String(),
		MerchantAddress: e.merchant.String(), ExpectedUnits: fmt.Sprint(due), PayerAddress: e.customer.PublicKey().String(), Reference: ref.String()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != VerdictComplete || res.PaidBy != paid {
		t.Fatalf("got %s paidBy %q (%s), want complete by %s", res.Verdict, res.PaidBy, res.Message, paid)
	}
}

// TestSolanaFollowPace: an unseen signature checked every 5 s; the
// reference's signatures are read at every check for two minutes, then
// once every 30 s (they were read at every check for the not-found
// window's hour); a payment made again after the first two minutes is
// followed at the next search.
func TestSolanaFollowPace(t *testing.T) {
	const due = 5_000_000
	e := newSolanaEnv(t)
	ref := solana.NewWallet().PublicKey()
	start := time.Now()
	var at time.Duration
	e.verifier.Now = func() time.Time { return start.Add(at) }
	var lost solana.Signature
	lost[0] = 7
	check := func() VerifyResult {
		t.Helper()
		res, err := e.verifier.Verify(context.Background(), VerifyRequest{Network: e.net.Name, TxHash: lost.String(),
			MerchantAddress: e.merchant.String(), ExpectedUnits: fmt.Sprint(due), PayerAddress: e.customer.PublicKey().String(), Reference: ref.String()})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	lists := func() int {
		e.rpc.mu.Lock()
		defer e.rpc.mu.Unlock()
		return e.rpc.lists
	}
	for at = 0; at <= 5*time.Minute; at += 5 * time.Second {
		if res := check(); res.PaidBy != "" {
			t.Fatalf("at %s, nothing paid: %+v", at, res)
		}
	}
	if got := lists(); got != 30 {
		t.Fatalf("%d signature lists over 61 checks, want 30", got)
	}
	paid := e.publish(solanaPayment{units: due, reference: ref})
	at = 305 * time.Second
	if res := check(); res.PaidBy != "" {
		t.Fatalf("followed before the next search was due: %+v", res)
	}
	at = 325 * time.Second
	if res := check(); res.Verdict != VerdictComplete || res.PaidBy != paid {
		t.Fatalf("the payment made again, at the next search: %+v", res)
	}
}

func TestSolanaRPCFaultIsTransient(t *testing.T) {
	e := newSolanaEnv(t)
	sig := e.publish(solanaPayment{units: 1})
	e.rpc.mu.Lock()
	e.rpc.fail = true
	e.rpc.mu.Unlock()
	res, err := e.verifier.Verify(context.Background(), VerifyRequest{Network: e.net.Name, TxHash: sig, MerchantAddress: e.merchant.String(), ExpectedUnits: "1"})
	if err == nil || IsPermanent(err) || res.Verdict != "" {
		t.Fatalf("rpc fault: %+v %v", res, err)
	}
	_, err = e.verifier.Verify(context.Background(), VerifyRequest{Network: e.net.Name, TxHash: "0xabc", MerchantAddress: e.merchant.String(), ExpectedUnits: "1"})
	if !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("bad signature: %v", err)
	}
}

func TestMultiVerifierDispatch(t *testing.T) {
	sol := newSolanaEnv(t)
	evm := newEVMEnv(t, 1)
	reg := DefaultRegistry()
	reg.Set(sol.net)
	reg.Set(evm.net)
	dials := 0
	mv := NewMultiVerifier(reg, WithEVMDialer(func(context.Context, Network) (EVMClient, error) {
		dials++
		return noClose{evm.client}, nil
	}))
	defer mv.Close()

	solSig := sol.publish(solanaPayment{units: 7})
	res, err := mv.Verify(context.Background(), VerifyRequest{Network: sol.net.Name, TxHash: solSig, MerchantAddress: sol.merchant.String(), ExpectedUnits: "7"})
	if err != nil || res.Verdict != VerdictComplete {
		t.Fatalf("solana through MultiVerifier: %+v %v", res, err)
	}
	hash := evm.payDirect(evm.merchant, 7)
	evm.commit(1)
	for range 2 {
		res, err = mv.Verify(context.Background(), VerifyRequest{Network: evm.net.Name, TxHash: hash, MerchantAddress: evm.merchant.Hex(), ExpectedUnits: "7"})
		if err != nil || res.Verdict != VerdictComplete {
			t.Fatalf("evm through MultiVerifier: %+v %v", res, err)
		}
	}
	if dials != 1 {
		t.Fatalf("dialled %d times, want 1 (lazy, cached)", dials)
	}
	if _, err := mv.Verify(context.Background(), VerifyRequest{Network: "dogecoin"}); !errors.Is(err, ErrUnknownNetwork) {
		t.Fatalf("unknown network: %v", err)
	}
}

func TestMultiVerifierConcurrent(t *testing.T) {
	sol := newSolanaEnv(t)
	reg := NewRegistry(sol.net)
	mv := NewMultiVerifier(reg)
	defer mv.Close()
	sig := sol.publish(solanaPayment{units: 3})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%4 == 0 { // the dev profile re-pointing a network meanwhile
				n := sol.net
				n.PollInterval = time.Duration(i+1) * time.Second
				reg.Set(n)
			}
			res, err := mv.Verify(context.Background(), VerifyRequest{Network: sol.net.Name, TxHash: sig, MerchantAddress: sol.merchant.String(), ExpectedUnits: "3"})
			if err == nil && res.Verdict != VerdictComplete {
				err = fmt.Errorf("verdict %s: %s", res.Verdict, res.Message)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestSolanaPaidNothingFollows: a submitted signature that pays the
// merchant nothing (final and moving no USDC there, or failed and not the
// declared wallet's: anyone who knows a session's id could submit one) is
// no verdict at once: the session's reference is searched for two minutes
// as on EVM, and the customer's payment found in that time is judged
// instead; with none it fails after them. Before, it failed at once. The
// customer's own failed transaction still fails at once.
func TestSolanaPaidNothingFollows(t *testing.T) {
	const due = 5_000_000
	e := newSolanaEnv(t)
	start := time.Now()
	var at time.Duration
	e.verifier.Now = func() time.Time { return start.Add(at) }
	stranger := solana.NewWallet().PrivateKey
	check := func(submitted string, ref solana.PublicKey) VerifyResult {
		t.Helper()
		res, err := e.verifier.Verify(context.Background(), VerifyRequest{Network: e.net.Name, TxHash: submitted,
			MerchantAddress: e.merchant.String(), ExpectedUnits: fmt.Sprint(due), PayerAddress: e.customer.PublicKey().String(),
			Reference: ref.String()})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, c := range []struct {
		name   string
		junk   solanaPayment
		reason string
	}{
		{"a stranger's failed transaction", solanaPayment{units: due, failed: true, from: stranger}, ReasonTxReverted},
		{"a stranger's transfer elsewhere", solanaPayment{units: due, to: solana.NewWallet().PublicKey(), from: stranger}, ReasonInvalidTransfer},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The customer pays a minute in: that payment is judged.
			at = 0
			ref := solana.NewWallet().PublicKey()
			junk := e.publish(c.junk)
			if res := check(junk, ref); res.Verdict != VerdictPending || !strings.Contains(res.Message, "looking for the session's own payment") {
				t.Fatalf("first check: %s %s (%s)", res.Verdict, res.Reason, res.Message)
			}
			at = time.Minute
			paid := e.publish(solanaPayment{units: due, reference: ref})
			if res := check(junk, ref); res.Verdict != VerdictComplete || res.PaidBy != paid {
				t.Fatalf("after the customer paid: %s paidBy %q (%s)", res.Verdict, res.PaidBy, res.Message)
			}
			// Nothing lands: failed after the two minutes.
			at = 0
			other := solana.NewWallet().PublicKey()
			junk = e.publish(c.junk)
			for at = 0; at < 2*time.Minute; at += 30 * time.Second {
				if res := check(junk, other); res.Verdict != VerdictPending {
					t.Fatalf("at %s: %s %s (%s)", at, res.Verdict, res.Reason, res.Message)
				}
			}
			// Not the customer's: the session gives the hash back.
			if res := check(junk, other); res.Verdict != VerdictFailed || res.Reason != c.reason || !res.Foreign {
				t.Fatalf("after two minutes: %s %s foreign %v (%s)", res.Verdict, res.Reason, res.Foreign, res.Message)
			}
		})
	}
	at = 0
	own := e.publish(solanaPayment{units: due, failed: true})
	// Failed at once (the customer's own), yet foreign: it paid nothing,
	// and the session waits again.
	if res := check(own, solana.NewWallet().PublicKey()); res.Verdict != VerdictFailed || res.Reason != ReasonTxReverted || !res.Foreign {
		t.Fatalf("the customer's own failed transaction: %s %s foreign %v (%s)", res.Verdict, res.Reason, res.Foreign, res.Message)
	}
	// A short payment fails at once: the customer's own ends the session,
	// a stranger's is given back.
	if res := check(e.publish(solanaPayment{units: due - 1}), solana.NewWallet().PublicKey()); res.Verdict != VerdictFailed ||
		res.Reason != ReasonInvalidTransfer || res.Foreign {
		t.Fatalf("the customer's short payment: %s %s foreign %v (%s)", res.Verdict, res.Reason, res.Foreign, res.Message)
	}
	if res := check(e.publish(solanaPayment{units: 1, from: stranger}), solana.NewWallet().PublicKey()); res.Verdict != VerdictFailed ||
		res.Reason != ReasonInvalidTransfer || !res.Foreign {
		t.Fatalf("a stranger's short payment: %s %s foreign %v (%s)", res.Verdict, res.Reason, res.Foreign, res.Message)
	}

	// The customer's payment landing in the burst's last second is still
	// taken at the first check after it (one search whatever the pace).
	at = 0
	ref := solana.NewWallet().PublicKey()
	junk := e.publish(solanaPayment{units: due, failed: true, from: stranger})
	check(junk, ref)
	at = 2*time.Minute - time.Second
	check(junk, ref)
	paid := e.publish(solanaPayment{units: due, reference: ref})
	at = 2 * time.Minute
	if res := check(junk, ref); res.Verdict != VerdictComplete || res.PaidBy != paid {
		t.Fatalf("a payment in the burst's last second: %s paidBy %q (%s)", res.Verdict, res.PaidBy, res.Message)
	}

	// A node that cannot list a reference's signatures: nothing to search
	// with, so the verdict stands (before, it stayed pending for good).
	v, err := NewSolanaVerifier(e.net, getOnly{rpc.New(e.rpc.srv.URL)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Verify(context.Background(), VerifyRequest{Network: e.net.Name, TxHash: e.publish(solanaPayment{units: due, failed: true, from: stranger}),
		MerchantAddress: e.merchant.String(), ExpectedUnits: fmt.Sprint(due), PayerAddress: e.customer.PublicKey().String(),
		Reference: solana.NewWallet().PublicKey().String()})
	if err != nil || res.Verdict != VerdictFailed || res.Reason != ReasonTxReverted || !res.Foreign {
		t.Fatalf("without a signature listing: %+v %v", res, err)
	}
}

// getOnly is a Solana node client that reads transactions and nothing else.
type getOnly struct{ c *rpc.Client }

func (g getOnly) GetTransaction(ctx context.Context, sig solana.Signature, opts *rpc.GetTransactionOpts) (*rpc.GetTransactionResult, error) {
	return g.c.GetTransaction(ctx, sig, opts)
}
