package soldev

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/paygate/paygate/chain"
)

// outcome renders a verification as chain/verdict_table_test.go does.
func outcome(res chain.VerifyResult, err error) string {
	switch {
	case errors.Is(err, chain.ErrChainIDMismatch):
		return "refused: chain id mismatch"
	case err != nil:
		return "error: " + err.Error()
	case res.Verdict == chain.VerdictPending && !res.Seen:
		return "pending (not seen)"
	case res.Verdict == chain.VerdictPending:
		return fmt.Sprintf("pending (%d/%d conf)", res.Confirmations, res.Required)
	case res.Reason != "":
		return fmt.Sprintf("%s %s (received %s)", res.Verdict, res.Reason, res.ReceivedUnits)
	default:
		return fmt.Sprintf("%s (received %s)", res.Verdict, res.ReceivedUnits)
	}
}

// TestVerdictTable runs the Solana rows of chain/verdict_table_test.go again,
// with real transactions executed by the SPL Token programs in LiteSVM and
// read back by chain.SolanaVerifier through the sidecar's JSON-RPC, and
// prints case / expected / observed. The amount due is 10 USDC.
func TestVerdictTable(t *testing.T) {
	const due = 10_000_000
	c := testChain(t)
	ctx := testCtx(t, 90*time.Second)
	client := c.Client()
	net := devNetwork(c)
	verifier, err := chain.NewSolanaVerifier(net, client)
	if err != nil {
		t.Fatal(err)
	}
	customer := CustomerKey()

	// Setup, all through real transactions: the merchant's USDC account
	// holding 1 USDC, another classic SPL mint the customer holds, and a
	// lookup table with the USDC mint and the merchant's token account.
	merchant := solana.NewWallet().PublicKey()
	merchantATA, _ := associatedTokenAddress(merchant, USDCMint, solana.TokenProgramID)
	if _, err := sendAndFinalize(ctx, client, []solana.Instruction{
		createATAIdempotent(customer.PublicKey(), merchant, USDCMint, solana.TokenProgramID),
		transferChecked(solana.TokenProgramID, solana.MustPublicKeyFromBase58(CustomerUSDCAddress), USDCMint, merchantATA, Customer, 1_000_000, 6),
	}, []solana.PrivateKey{customer}, sendOptions{}); err != nil {
		t.Fatal("merchant account:", err)
	}
	otherMint, err := createMint(ctx, client, customer, 1_000_000_000)
	if err != nil {
		t.Fatal("other mint:", err)
	}
	table, err := createLookupTable(ctx, client, customer, USDCMint, merchantATA)
	if err != nil {
		t.Fatal("lookup table:", err)
	}

	// pay sends a transfer of units from the customer to recipient's
	// associated token account of mint (created in the same transaction
	// when missing), with the given extra instructions and options.
	type payment struct {
		units     uint64
		mint      solana.PublicKey
		recipient solana.PublicKey
		extra     []solana.Instruction
		opts      sendOptions
		noRef     bool // leave out the Solana Pay reference key
	}
	pay := func(p payment) (solana.Signature, error) {
		if p.mint.IsZero() {
			p.mint = USDCMint
		}
		if p.recipient.IsZero() {
			p.recipient = merchant
		}
		refs := []solana.PublicKey{solana.NewWallet().PublicKey()}
		if p.noRef {
			refs = nil
		}
		tr, err := newTransfer(ctx, client, Customer, p.mint, p.recipient, p.units, refs)
		if err != nil {
			return solana.Signature{}, err
		}
		return send(ctx, client, append(tr.instructions(), p.extra...), []solana.PrivateKey{customer}, p.opts)
	}
	verify := func(sig solana.Signature) string {
		return outcome(verifier.Verify(ctx, chain.VerifyRequest{Network: net.Name, TxHash: sig.String(), MerchantAddress: merchant.String(), ExpectedUnits: fmt.Sprint(due)}))
	}

	type row struct {
		name, expected string
		pay            payment
		notFinal       bool // verify once confirmed, before finalized
		// evidence checks the finalized transaction did what the row
		// claims; a complaint is shown as a mismatch.
		evidence func(*rpc.GetTransactionResult) string
	}
	// moved reports whether a token account of owner under program gained
	// units of mint in the transaction.
	moved := func(tx *rpc.GetTransactionResult, owner, mint, program solana.PublicKey, units uint64) bool {
		pre := map[uint16]string{}
		for _, b := range tx.Meta.PreTokenBalances {
			pre[b.AccountIndex] = b.UiTokenAmount.Amount
		}
		for _, b := range tx.Meta.PostTokenBalances {
			if *b.Owner == owner && b.Mint == mint && *b.ProgramId == program {
				before, ok := new(big.Int).SetString(pre[b.AccountIndex], 10)
				if !ok {
					before = new(big.Int)
				}
				after, _ := new(big.Int).SetString(b.UiTokenAmount.Amount, 10)
				return new(big.Int).Sub(after, before).Cmp(new(big.Int).SetUint64(units)) == 0
			}
		}
		return false
	}
	strangerCustomerPays := payment{units: due, recipient: Stranger}
	rows := []row{
		{name: "solana: valid transfer", expected: "complete (received 10000000)", pay: payment{units: due}},
		{name: "solana: overpayment", expected: "complete (received 10000001)", pay: payment{units: due + 1}},
		{name: "solana: underpayment", expected: "failed INVALID_TRANSFER (received 9999999)", pay: payment{units: due - 1}},
		{name: "solana: wrong mint (another SPL Token mint)", expected: "failed INVALID_TRANSFER (received 0)", pay: payment{units: due, mint: otherMint}},
		{name: "solana: Token-2022 look-alike mint", expected: "failed INVALID_TRANSFER (received 0)", pay: payment{units: due, mint: LookalikeMint},
			evidence: func(tx *rpc.GetTransactionResult) string {
				if !moved(tx, merchant, LookalikeMint, solana.Token2022ProgramID, due) {
					return "the merchant did not receive the look-alike tokens"
				}
				return ""
			}},
		{name: "solana: token account owned by someone else", expected: "failed INVALID_TRANSFER (received 0)", pay: strangerCustomerPays,
			evidence: func(tx *rpc.GetTransactionResult) string {
				if !moved(tx, Stranger, USDCMint, solana.TokenProgramID, due) {
					return "the stranger did not receive the USDC"
				}
				return ""
			}},
		{name: "solana: meta.err set (2nd instruction fails)", expected: "failed TX_REVERTED (received 0)", pay: payment{units: due, opts: sendOptions{skipPreflight: true},
			// transferChecked with the wrong decimals: MintDecimalsMismatch.
			extra: []solana.Instruction{transferChecked(solana.TokenProgramID, solana.MustPublicKeyFromBase58(CustomerUSDCAddress), USDCMint, merchantATA, Customer, 1, 7)}},
			evidence: func(tx *rpc.GetTransactionResult) string {
				if got := fmt.Sprint(tx.Meta.Err); got != "map[InstructionError:[1 map[Custom:18]]]" {
					return "meta.err " + got + ", want InstructionError [1, Custom 18]"
				}
				if moved(tx, merchant, USDCMint, solana.TokenProgramID, due) {
					return "the failed transaction moved tokens"
				}
				return ""
			}},
		{name: "solana: v0 tx with address lookup table", expected: "complete (received 10000000)", pay: payment{units: due,
			opts: sendOptions{addressTables: map[solana.PublicKey]solana.PublicKeySlice{table: {USDCMint, merchantATA}}}},
			evidence: func(tx *rpc.GetTransactionResult) string {
				if tx.Version != 0 || len(tx.Meta.LoadedAddresses.Writable) != 1 || tx.Meta.LoadedAddresses.Writable[0] != merchantATA {
					return fmt.Sprintf("version %d, loaded %+v: the merchant's account was not loaded from the table", tx.Version, tx.Meta.LoadedAddresses)
				}
				return ""
			}},
		// The verifier judges the transfer, not how it was found: without the
		// reference the payment is found only by its submitted signature
		// (TestPaySessionAndReferenceLookup).
		{name: "solana: no reference key (submitted signature)", expected: "complete (received 10000000)", pay: payment{units: due, noRef: true}},
		{name: "solana: sent base58-encoded", expected: "complete (received 10000000)", pay: payment{units: due, opts: sendOptions{base58: true}}},
		{name: "solana: confirmed, not finalized", expected: "pending (0/1 conf)", pay: payment{units: due}, notFinal: true},
	}

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\texpected\tobserved\tsend→finalized\t")
	fmt.Fprintln(tw, "----\t--------\t--------\t--------------\t")
	failed := 0
	report := func(name, expected, got, latency string) {
		mark := ""
		if got != expected {
			mark = "  <-- MISMATCH"
			failed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%s\t\n", name, expected, got, mark, latency)
	}
	var total time.Duration
	finalized := 0
	for _, r := range rows {
		start := time.Now()
		sig, err := pay(r.pay)
		if err != nil {
			report(r.name, r.expected, "error: "+err.Error(), "")
			continue
		}
		if r.notFinal {
			if _, err := waitStatus(ctx, client, sig, rpc.ConfirmationStatusConfirmed); err != nil {
				report(r.name, r.expected, "error: "+err.Error(), "")
				continue
			}
			got := verify(sig)
			report(r.name, r.expected, got, "")
			continue
		}
		if _, err := waitStatus(ctx, client, sig, rpc.ConfirmationStatusFinalized); err != nil {
			report(r.name, r.expected, "error: "+err.Error(), "")
			continue
		}
		latency := time.Since(start)
		total += latency
		finalized++
		got := verify(sig)
		if r.evidence != nil {
			tx, err := client.GetTransaction(ctx, sig, &rpc.GetTransactionOpts{Encoding: solana.EncodingBase64, Commitment: rpc.CommitmentFinalized, MaxSupportedTransactionVersion: new(uint64)})
			if err != nil {
				got += "; getTransaction: " + err.Error()
			} else if complaint := r.evidence(tx); complaint != "" {
				got += "; " + complaint
			}
		}
		report(r.name, r.expected, got, latency.Round(time.Millisecond).String())
	}

	// A payment to a merchant without a token account: the account is
	// created in the payment transaction (no pre balance).
	fresh := solana.NewWallet().PublicKey()
	func() {
		tr, err := newTransfer(ctx, client, Customer, USDCMint, fresh, due, nil)
		if err == nil && !tr.createDestination {
			err = errors.New("the fresh merchant already has a token account")
		}
		var sig solana.Signature
		if err == nil {
			sig, err = sendAndFinalize(ctx, client, tr.instructions(), []solana.PrivateKey{customer}, sendOptions{})
		}
		got := "error: " + fmt.Sprint(err)
		if err == nil {
			got = outcome(verifier.Verify(ctx, chain.VerifyRequest{Network: net.Name, TxHash: sig.String(), MerchantAddress: fresh.String(), ExpectedUnits: fmt.Sprint(due)}))
		}
		report("solana: receiving account created in same tx", "complete (received 10000000)", got, "")
	}()

	// A short payment is the declared wallet's own (it signed and paid:
	// the failure ends the session) or, declared another wallet, foreign
	// (the session gives the hash back).
	func() {
		sig, err := pay(payment{units: due - 1})
		if err == nil {
			_, err = waitStatus(ctx, client, sig, rpc.ConfirmationStatusFinalized)
		}
		if err != nil {
			report("solana: short payment, foreign unless the declared wallet's", "own false, another's true", "error: "+err.Error(), "")
			return
		}
		foreign := func(declared string) string {
			res, err := verifier.Verify(ctx, chain.VerifyRequest{Network: net.Name, TxHash: sig.String(), MerchantAddress: merchant.String(),
				ExpectedUnits: fmt.Sprint(due), PayerAddress: declared})
			if err != nil || res.Verdict != chain.VerdictFailed {
				return fmt.Sprintf("%s %v", res.Verdict, err)
			}
			return fmt.Sprint(res.Foreign)
		}
		report("solana: short payment, foreign unless the declared wallet's", "own false, another's true",
			"own "+foreign(Customer.String())+", another's "+foreign(solana.NewWallet().PublicKey().String()), "")
	}()

	var missing solana.Signature
	copy(missing[:], strings.Repeat("n", 64))
	report("solana: not found (null result)", "pending (not seen)", verify(missing), "")

	_ = tw.Flush()
	avg := time.Duration(0)
	if finalized > 0 {
		avg = total / time.Duration(finalized)
	}
	t.Logf("verdict table on the LiteSVM dev chain (amount due 10000000 units = 10 USDC; slots of %s, finalized %d slots after landing; mean send→finalized %s)\n%s",
		testSlot, testFinalizeDepth, avg.Round(time.Millisecond), b.String())
	if failed > 0 {
		t.Fatalf("%d cases differ from the expected verdict", failed)
	}
}

// TestFinalityAtDevDefaults measures, on a chain with the defaults `paygate
// dev` uses (400 ms slots, finalized 8 slots after landing), the time from
// sending a payment to its finalization and to the verifier's complete.
func TestFinalityAtDevDefaults(t *testing.T) {
	c, err := Start(context.Background(), Config{})
	requireSidecar(t, err)
	defer c.Close()
	ctx := testCtx(t, 30*time.Second)
	client := c.Client()
	net := devNetwork(c)
	verifier, err := chain.NewSolanaVerifier(net, client)
	if err != nil {
		t.Fatal(err)
	}
	merchant := solana.NewWallet().PublicKey()
	start := time.Now()
	tr, err := newTransfer(ctx, client, Customer, USDCMint, merchant, 10_000_000, nil)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := send(ctx, client, tr.instructions(), []solana.PrivateKey{CustomerKey()}, sendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Since(start)
	if _, err := waitStatus(ctx, client, sig, rpc.ConfirmationStatusConfirmed); err != nil {
		t.Fatal(err)
	}
	confirmed := time.Since(start)
	// Poll the verifier as the watcher would (every 100 ms here).
	for {
		res, err := verifier.Verify(ctx, chain.VerifyRequest{Network: net.Name, TxHash: sig.String(), MerchantAddress: merchant.String(), ExpectedUnits: "10000000"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verdict == chain.VerdictComplete {
			break
		}
		if res.Verdict != chain.VerdictPending {
			t.Fatalf("verdict %s %s: %s", res.Verdict, res.Reason, res.Message)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("dev defaults (slot %s, finalize depth %d): accepted by the RPC after %s, confirmed after %s, verifier complete (finalized) after %s",
		DefaultSlotInterval, DefaultFinalizeDepth, sent.Round(time.Millisecond), confirmed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
