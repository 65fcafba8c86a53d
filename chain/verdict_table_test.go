package chain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/ethereum/go-ethereum/common"
	"github.com/gagliardetto/solana-go"
)

// outcome renders a verification the way the table shows it.
func outcome(res VerifyResult, err error) string {
	switch {
	case errors.Is(err, ErrChainIDMismatch):
		return "refused: chain id mismatch"
	case err != nil:
		return "error: " + err.Error()
	case res.Verdict == VerdictPending && !res.Seen:
		return "pending (not seen)"
	case res.Verdict == VerdictPending:
		return fmt.Sprintf("pending (%d/%d conf)", res.Confirmations, res.Required)
	case res.Reason != "":
		return fmt.Sprintf("%s %s (received %s)", res.Verdict, res.Reason, res.ReceivedUnits)
	default:
		return fmt.Sprintf("%s (received %s)", res.Verdict, res.ReceivedUnits)
	}
}

// TestVerdictTable runs every payment scenario through the real verifiers
// (EVM on the simulated backend with the compiled contracts, Solana against a
// JSON-RPC server answering realistic getTransaction documents) and prints
// case / expected / observed. The amount due is 10 USDC (10000000 units).
func TestVerdictTable(t *testing.T) {
	const due = 10_000_000
	solRef1, solRef2 := solana.NewWallet().PublicKey(), solana.NewWallet().PublicKey()
	ctx := context.Background()
	evm := newEVMEnv(t, 2)
	sol := newSolanaEnv(t)

	type row struct {
		name, expected string
		observe        func() string
	}
	// evmCase pays, seals `blocks` blocks and verifies.
	evmCase := func(pay func() string, blocks int) func() string {
		return func() string {
			hash := pay()
			evm.commit(blocks)
			return outcome(evm.verifier.Verify(ctx, VerifyRequest{Network: evm.net.Name, TxHash: hash, MerchantAddress: evm.merchant.Hex(), ExpectedUnits: fmt.Sprint(due)}))
		}
	}
	solCase := func(p solanaPayment) func() string {
		return func() string {
			sig := sol.publish(p)
			return outcome(sol.verifier.Verify(ctx, VerifyRequest{Network: sol.net.Name, TxHash: sig, MerchantAddress: sol.merchant.String(), ExpectedUnits: fmt.Sprint(due)}))
		}
	}
	// solRef verifies a Solana payment for a session whose reference is ref
	// and says whether the transfer is bound to it or carries another's.
	solRef := func(p solanaPayment, ref solana.PublicKey) func() string {
		return func() string {
			sig := sol.publish(p)
			res, err := sol.verifier.Verify(ctx, VerifyRequest{Network: sol.net.Name, TxHash: sig, MerchantAddress: sol.merchant.String(),
				ExpectedUnits: fmt.Sprint(due), Reference: ref.String()})
			got := outcome(res, err)
			if err != nil || res.Verdict != VerdictComplete {
				return got
			}
			bound := ", not bound"
			if res.Bound {
				bound = ", bound"
			}
			for _, r := range res.Refs {
				if r == solRef2.String() {
					bound += ", carries it"
				}
			}
			return strings.Replace(got, "complete", "complete"+bound, 1)
		}
	}
	rows := []row{
		{"evm: exact transfer, 1 of 2 confirmations", "pending (1/2 conf)", evmCase(func() string { return evm.payDirect(evm.merchant, due) }, 1)},
		{"evm: exact transfer, 2 of 2 confirmations", "complete (received 10000000)", evmCase(func() string { return evm.payDirect(evm.merchant, due) }, 2)},
		{"evm: overpayment", "complete (received 12000000)", evmCase(func() string { return evm.payDirect(evm.merchant, due+2_000_000) }, 2)},
		{"evm: underpayment", "failed INVALID_TRANSFER (received 9990000)", evmCase(func() string { return evm.payDirect(evm.merchant, due-10_000) }, 2)},
		{"evm: wrong recipient", "failed INVALID_TRANSFER (received 0)", evmCase(func() string { return evm.payDirect(evm.other, due) }, 2)},
		{"evm: reverted transaction", "failed TX_REVERTED (received 0)", evmCase(func() string { return evm.payReverting(due) }, 2)},
		{"evm: look-alike token, same Transfer event", "failed INVALID_TRANSFER (received 0)", evmCase(func() string { return evm.payLookalike(due) }, 2)},
		{"evm: paid through a contract (transferFrom)", "complete (received 10000000)", evmCase(func() string { return evm.payForwarded(due) }, 2)},
		{"evm: two transfers in one tx, summed", "complete (received 10000000)", evmCase(func() string { return evm.paySplit(4_000_000, evm.merchant, 6_000_000) }, 2)},
		{"evm: not mined yet", "pending (not seen)", evmCase(func() string { return evm.payDirect(evm.merchant, due) }, 0)},
		{"evm: stale receipt of an orphaned block", "pending (0/2 conf)", func() string {
			hash := evm.payDirect(evm.merchant, due)
			evm.commit(3)
			r, err := evm.client.TransactionReceipt(ctx, common.HexToHash(hash))
			if err != nil {
				return "error: " + err.Error()
			}
			orphan := *r
			orphan.BlockHash = common.HexToHash("0x" + strings.Repeat("0d", 32)) // not the canonical block at that height
			v, err := NewEVMVerifier(ctx, evm.net, staleReceipts{evm.client, &orphan})
			if err != nil {
				return "error: " + err.Error()
			}
			return outcome(v.Verify(ctx, VerifyRequest{Network: evm.net.Name, TxHash: orphan.TxHash.Hex(), MerchantAddress: evm.merchant.Hex(), ExpectedUnits: fmt.Sprint(due)}))
		}},
		// Runs last among the EVM rows: the reorg drops the customer's
		// transactions, so later customer nonces would leave a gap.
		{"evm: block dropped by a reorg", "pending (not seen)", func() string {
			before, err := evm.client.HeaderByNumber(ctx, nil)
			if err != nil {
				return "error: " + err.Error()
			}
			hash := evm.payDirect(evm.merchant, due)
			evm.commit(3)
			if err := evm.sim.Fork(before.Hash()); err != nil {
				return "error: " + err.Error()
			}
			evm.sim.Rollback()
			evm.commit(5)
			return outcome(evm.verifier.Verify(ctx, VerifyRequest{Network: evm.net.Name, TxHash: hash, MerchantAddress: evm.merchant.Hex(), ExpectedUnits: fmt.Sprint(due)}))
		}},
		{"evm: endpoint on another chain (84532 vs 1337)", "refused: chain id mismatch", func() string {
			wrong := evm.net
			wrong.ChainID = 84532
			_, err := NewEVMVerifier(ctx, wrong, evm.client)
			return outcome(VerifyResult{}, err)
		}},
		{"solana: valid transfer", "complete (received 10000000)", solCase(solanaPayment{units: due, merchantPre: 1_000_000})},
		{"solana: overpayment", "complete (received 10000001)", solCase(solanaPayment{units: due + 1})},
		{"solana: underpayment", "failed INVALID_TRANSFER (received 9999999)", solCase(solanaPayment{units: due - 1})},
		{"solana: wrong mint", "failed INVALID_TRANSFER (received 0)", solCase(solanaPayment{units: due, mint: solana.NewWallet().PublicKey()})},
		{"solana: Token-2022 look-alike of the USDC mint", "failed INVALID_TRANSFER (received 0)", solCase(solanaPayment{units: due, program: solana.Token2022ProgramID})},
		{"solana: token account owned by someone else", "failed INVALID_TRANSFER (received 0)", solCase(solanaPayment{units: due, to: solana.NewWallet().PublicKey()})},
		{"solana: meta.err set", "failed TX_REVERTED (received 0)", solCase(solanaPayment{units: due, failed: true})},
		{"solana: v0 tx with address lookup table", "complete (received 10000000)", solCase(solanaPayment{units: due, versioned: true})},
		{"solana: receiving account created in same tx", "complete (received 10000000)", solCase(solanaPayment{units: due, createAccount: true})},
		{"solana: confirmed, not finalized", "pending (0/1 conf)", solCase(solanaPayment{units: due, notFinal: true})},
		{"solana: transfer carries the session's reference", "complete, bound (received 10000000)", solRef(solanaPayment{units: due, reference: solRef1}, solRef1)},
		{"solana: v0 transaction carrying the reference", "complete, bound (received 10000000)", solRef(solanaPayment{units: due, reference: solRef1, versioned: true}, solRef1)},
		{"solana: transfer without the reference", "complete, not bound (received 10000000)", solRef(solanaPayment{units: due}, solRef1)},
		{"solana: transfer with another session's reference", "complete, not bound, carries it (received 10000000)", solRef(solanaPayment{units: due, reference: solRef2}, solRef1)},
		{"solana: not found (null result)", "pending (not seen)", func() string {
			var sig solana.Signature
			copy(sig[:], strings.Repeat("n", 64))
			return outcome(sol.verifier.Verify(ctx, VerifyRequest{Network: sol.net.Name, TxHash: sig.String(), MerchantAddress: sol.merchant.String(), ExpectedUnits: fmt.Sprint(due)}))
		}},
	}

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\texpected\tobserved\t")
	fmt.Fprintln(tw, "----\t--------\t--------\t")
	failed := 0
	for _, r := range rows {
		got := r.observe()
		mark := ""
		if got != r.expected {
			mark = "  <-- MISMATCH"
			failed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t\n", r.name, r.expected, got, mark)
	}
	_ = tw.Flush()
	t.Log("verdict table (amount due 10000000 units = 10 USDC; EVM needs 2 confirmations)\n" + b.String())
	if failed > 0 {
		t.Fatalf("%d of %d cases differ from the expected verdict", failed, len(rows))
	}
}
