// Package devrefund is what the dev chains' refund payers (devchain and
// soldev PayRefund, behind `paygate dev refund`) read of a refund through
// the API, and which refunds they pay.
package devrefund

import "fmt"

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
// now (for a week after the window) is still recorded, found on chain by
// the worker's refund watcher or its hash submitted, and makes it
// succeeded.
func (v View) Late() bool {
	return v.Status == "failed" && v.TxHash == nil && v.FailureReason != nil && *v.FailureReason == "REFUND_EXPIRED"
}

// Payable says whether a dev payer pays the refund: a pending one, or one
// that expired without a transfer (a merchant paying late).
func (v View) Payable() error {
	if v.Status == "pending" || v.Late() {
		return nil
	}
	return fmt.Errorf("refund %s is %s: only a pending refund, or one that expired without a transfer, takes a transfer", v.ID, v.Status)
}
