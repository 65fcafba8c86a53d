// Package devrefund is what the dev chains' refund payers (devchain and
// soldev PayRefund, behind `paygate dev refund`) read of a refund through
// the API, and which refunds they pay.
package devrefund

import (
	"errors"
	"fmt"
)

// View is what a merchant's wallet reads from GET /api/refunds/{id}.
type View struct {
	ID                string  `json:"id"`
	Network           string  `json:"network"`
	Status            string  `json:"status"`
	SourceWallet      string  `json:"sourceWallet"`
	DestinationWallet string  `json:"destinationWallet"`
	TokenAddress      string  `json:"tokenAddress"`
	AmountUnits       string  `json:"amountUnits"`
	TxHash            *string `json:"txHash"`
	FailureReason     *string `json:"failureReason"`
}

// Late says the refund failed REFUND_EXPIRED without a transfer: one sent
// now is still found on chain by the worker's refund watcher (for a week
// after the window) and makes it succeeded.
func (v View) Late() bool {
	return v.Status == "failed" && v.TxHash == nil && v.FailureReason != nil && *v.FailureReason == "REFUND_EXPIRED"
}

// ErrExpiredNeedsNoSubmit refuses to submit the hash of a refund that
// expired (the API answers 409): it is paid with NoSubmit, and found.
var ErrExpiredNeedsNoSubmit = errors.New("the refund expired: the API takes no hash for it, but the worker finds a transfer sent late on chain (pay it with --no-submit)")

// Payable says whether a dev payer pays the refund: a pending one; one
// that expired without a transfer only without submitting the hash (a
// merchant paying late from a wallet app).
func (v View) Payable(noSubmit bool) error {
	switch {
	case v.Status == "pending":
		return nil
	case v.Late() && noSubmit:
		return nil
	case v.Late():
		return fmt.Errorf("refund %s: %w", v.ID, ErrExpiredNeedsNoSubmit)
	}
	return fmt.Errorf("refund %s is %s: only a pending refund, or one that expired without a transfer, takes a transfer", v.ID, v.Status)
}
