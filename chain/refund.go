package chain

import (
	"context"
	"fmt"
	"math/big"
	"time"
)

// RefundTransfer is the transfer that pays a refund. Refunds are
// non-custodial: the merchant's wallet that received the payment (From)
// sends at least Units of the network's canonical USDC to the refund's
// destination (To), in a transaction mined after NotBefore.
type RefundTransfer struct {
	Network string
	TxHash  string
	// From is the merchant wallet that received the original payment.
	From string
	// To is the refund's destination wallet (by default the payer's).
	To string
	// Units is the refund in integer token units (decimal string).
	Units string
	// NotBefore is the earliest block time accepted (the refund's creation,
	// less the caller's clock slack): an older transfer cannot pay it.
	NotBefore time.Time
}

// Request is the verification of the transfer as a payment: the
// destination is the receiving address, the merchant's wallet the payer
// (so [BindToSession] refuses a transfer from any other wallet).
func (t RefundTransfer) Request() VerifyRequest {
	return VerifyRequest{Network: t.Network, TxHash: t.TxHash, MerchantAddress: t.To, ExpectedUnits: t.Units,
		PayerAddress: t.From, NotBefore: t.NotBefore}
}

// What is wrong with a refund transfer that failed verification
// ([ExplainRefund]).
const (
	RefundFaultReverted    = "reverted"     // the transaction failed on chain
	RefundFaultNoTransfer  = "no_transfer"  // no canonical USDC reached the destination
	RefundFaultShort       = "short"        // less than the refund reached it
	RefundFaultWrongSender = "wrong_sender" // it did not come from the merchant's wallet
	RefundFaultTooEarly    = "too_early"    // mined before the refund existed
)

// VerifyRefund verifies a refund's transfer with v (the chain verifier:
// canonical token only, confirmations counted and the block re-checked, so
// a reorg turns the result back to pending) and binds it to the refund: a
// transfer from another wallet than the merchant's, or mined before
// NotBefore, fails. A failed verdict's message says what was wrong in a
// refund's terms; the reason stays the chain's code (INVALID_TRANSFER,
// TX_REVERTED). Errors are the verifier's: never a verdict.
func VerifyRefund(ctx context.Context, v Verifier, t RefundTransfer) (VerifyResult, error) {
	req := t.Request()
	res, err := v.Verify(ctx, req)
	if err != nil {
		return res, err
	}
	res = BindToSession(req, res)
	if res.Verdict == VerdictFailed {
		_, res.Message = ExplainRefund(t, res)
	}
	return res, nil
}

// ExplainRefund says why a failed verification does not pay the refund: a
// fault (RefundFault…) and a message for the merchant. It answers "" for a
// verdict that is not failed.
func ExplainRefund(t RefundTransfer, res VerifyResult) (fault, message string) {
	if res.Verdict != VerdictFailed {
		return "", ""
	}
	received, ok := new(big.Int).SetString(res.ReceivedUnits, 10)
	if !ok {
		received = new(big.Int)
	}
	expected, ok := new(big.Int).SetString(t.Units, 10)
	if !ok {
		expected = new(big.Int)
	}
	switch {
	case res.Reason == ReasonTxReverted:
		return RefundFaultReverted, "the refund transaction reverted on chain"
	case received.Sign() <= 0:
		return RefundFaultNoTransfer, fmt.Sprintf("no USDC reached the refund's destination wallet %s in this transaction", t.To)
	case received.Cmp(expected) < 0:
		return RefundFaultShort, fmt.Sprintf("the destination wallet received %s USDC units, the refund is %s", received, expected)
	case t.From != "" && !SameAddress(t.From, res.Payer):
		payer := res.Payer
		if payer == "" {
			payer = "an unknown wallet"
		}
		return RefundFaultWrongSender, fmt.Sprintf("the refund came from %s, not from the merchant wallet %s that received the payment", payer, t.From)
	default:
		when := "before the refund was created"
		if !res.BlockTime.IsZero() {
			when = fmt.Sprintf("at %s, before the refund was created", res.BlockTime.UTC().Format(time.RFC3339))
		}
		return RefundFaultTooEarly, "the transaction was mined " + when
	}
}
