package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
)

// RefundLateWorkflowID is the workflow id of the recording of a transfer
// found late for a refund: refund-late:<refundId>:<txHash> (one per
// transfer offered, so a start again joins or finds the first).
func RefundLateWorkflowID(refundID, txHash string) string {
	return "refund-late:" + refundID + ":" + txHash
}

// RefundLateInput starts RefundLateTransferWorkflow: the refund as its
// own workflow had it, and the transfer found for it.
type RefundLateInput struct {
	Refund RefundInput
	TxHash string
}

// RefundLateResult is RefundLateTransferWorkflow's outcome: whether the
// refund took the transfer (then succeeded), and why not.
type RefundLateResult struct {
	Recorded      bool
	Status        string // the refund's, as stored (succeeded when recorded)
	FullyRefunded bool
	Reason        string `json:",omitempty"` // the chain's verdict, or why the store refused it
	Message       string `json:",omitempty"`
}

// RefundLateTransferWorkflow records a transfer the refund watcher found
// on chain for a refund that failed REFUND_EXPIRED (no transfer submitted
// within its window; its workflow has ended): it verifies the transfer as
// the refund's (chain.VerifyRefund: canonical token, from the refund's
// source wallet to its destination, its amount, mined after its creation,
// confirmed), checking every poll interval until a verdict, and a verified
// one makes the refund succeeded with its effects (the amount refunded,
// payment.refunded delivered), since the money left the merchant's wallet.
// A transfer that fails verification, or stays unseen for the not-found
// window, leaves the refund as it was; so does a hash that backs another
// refund of the merchant meanwhile (another merchant's refund holding it
// does not: each merchant's refunds are judged apart). Its own workflow, not the refund's, so the refund's
// history stays what it was and an operator sees the late find beside it.
func RefundLateTransferWorkflow(ctx workflow.Context, in RefundLateInput) (RefundLateResult, error) {
	ri := in.Refund
	if ri.RefundID == "" || in.TxHash == "" || ri.Units <= 0 || ri.SourceWallet == "" || ri.DestinationWallet == "" {
		return RefundLateResult{}, temporal.NewNonRetryableApplicationError("refund id, hash, wallets and a positive amount are required",
			ErrTypeBadUpdate, nil)
	}
	if ri.PollInterval <= 0 {
		ri.PollInterval = 5 * time.Second
	}
	if ri.NotFoundWindow <= 0 {
		ri.NotFoundWindow = time.Hour
	}
	effects, verify := refundActivityContexts(ctx)
	r := refund{in: ri, state: RefundState{TxHash: in.TxHash}}
	t := r.transfer()
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Late transfer**: refund %s failed REFUND_EXPIRED; checking transfer `%s` on %s every %s "+
		"(unseen for %s, it is left).", ri.RefundID, t.TxHash, ri.Network, ri.PollInterval, ri.NotFoundWindow))
	// Unseen (a reorg took it since the watcher saw it confirmed), the
	// pause doubles up to a minute: the not-found window is a few dozen
	// checks, not one per poll interval.
	since, pause := workflow.Now(ctx), ri.PollInterval
	for checks := 0; checks < maxChecksPerRun; checks++ {
		var res chain.VerifyResult
		if err := workflow.ExecuteActivity(verify, refundActivities.VerifyRefundTransfer, t).Get(ctx, &res); err != nil {
			logVerifyFault(ctx, err, "late refund transfer")
		} else {
			switch res.Verdict {
			case chain.VerdictComplete:
				workflow.SetCurrentDetails(ctx, "Recording the late transfer as the refund's.")
				var fin activities.RefundFinish
				err := workflow.ExecuteActivity(effects, refundActivities.FinishExpiredRefundLate, activities.RefundOutcome{
					RefundID: ri.RefundID, Status: models.RefundSucceeded, TxHash: in.TxHash, Message: res.Message, At: workflow.Now(ctx)}).Get(ctx, &fin)
				var ae *temporal.ApplicationError
				if errors.As(err, &ae) && ae.Type() == activities.ErrTypeRefundTxClaimed {
					return RefundLateResult{Status: models.RefundFailed, Reason: "NOT_RECORDED", Message: ae.Message()}, nil
				}
				if err != nil {
					return RefundLateResult{}, err
				}
				return RefundLateResult{Recorded: true, Status: fin.Status, FullyRefunded: fin.FullyRefunded}, nil
			case chain.VerdictFailed:
				return RefundLateResult{Status: models.RefundFailed, Reason: res.Reason, Message: res.Message}, nil
			}
			if res.Seen {
				since, pause = workflow.Now(ctx), ri.PollInterval
			} else if unseen := workflow.Now(ctx).Sub(since); unseen >= ri.NotFoundWindow {
				return RefundLateResult{Status: models.RefundFailed, Reason: chain.ReasonTxNotFound,
					Message: fmt.Sprintf("transaction not found on %s within %s", ri.Network, ri.NotFoundWindow)}, nil
			} else {
				pause = min(2*pause, time.Minute, ri.NotFoundWindow-unseen)
				pause = max(pause, ri.PollInterval)
			}
		}
		if err := workflow.Sleep(ctx, pause); err != nil {
			return RefundLateResult{}, err
		}
	}
	return RefundLateResult{Status: models.RefundFailed, Reason: chain.ReasonTxNotFound,
		Message: fmt.Sprintf("no verdict on %s within %d checks", ri.Network, maxChecksPerRun)}, nil
}
