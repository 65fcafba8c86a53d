// Package refund runs refunds: it stores a refund with its reservation on
// the transaction, starts its RefundWorkflow (refund:<id>), hands the
// merchant's transfer hash to the workflow's submit update, and repairs
// refunds left without a workflow. Refunds are non-custodial: the merchant
// pays them from the wallet that received the payment, and the workflow
// verifies that transfer on chain.
package refund

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/money"
	"github.com/paygate/paygate/periodic"
	"github.com/paygate/paygate/workflows"
)

// Defaults of the service.
const (
	// DefaultWindow is how long a merchant has to submit a refund's
	// transfer before the refund fails and frees its amount (REFUND_WINDOW).
	DefaultWindow = 24 * time.Hour
	// DefaultNotFoundWindow is how long a submitted hash may stay unseen.
	DefaultNotFoundWindow = time.Hour
)

// ErrNoTemporal is returned where a workflow is needed and the service has
// no Temporal client (an API built without one; the worker's repairer
// starts the workflows of refunds it stored).
var ErrNoTemporal = errors.New("refund: no Temporal client")

// Service creates refunds and drives their workflows.
type Service struct {
	Store    *models.Store
	Temporal client.Client
	Networks *chain.Registry
	// TaskQueue is the queue RefundWorkflow runs on (the checkout queue).
	TaskQueue string
	// Window is how long the merchant has to submit the transfer (24 h).
	Window time.Duration
	// NotFoundWindow is how long a submitted hash may stay unseen (1 h).
	NotFoundWindow time.Duration
	// UpdateTimeout bounds the wait for the workflow's answer to an
	// update (0: workflows.DefaultUpdateTimeout); past it the caller gets
	// a 503 with Retry-After.
	UpdateTimeout time.Duration
	Log           *slog.Logger
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
	// Chain, when set, lets the watcher (RunWatcher) find the transfers of
	// pending refunds whose hash was never submitted.
	Chain Chain
	// LateOfferDelay is how long after it was read a transfer no pending
	// refund took waits before it is offered to the refunds that failed
	// REFUND_EXPIRED (0: DefaultLateOfferDelay): a merchant who pays first
	// and creates the refund after sees that refund take it, not an
	// expired twin of it.
	LateOfferDelay time.Duration

	watch watcher
	// submitFound submits a transfer the watcher found (tests; nil: the
	// workflow's submit update, FirstOnly); recordFound records one found
	// for an expired refund (tests; nil: RefundLateTransferWorkflow).
	submitFound func(ctx context.Context, sc models.Scope, id, hash string) error
	recordFound func(ctx context.Context, r *models.Refund, hash string) error
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now().UTC()
	}
	return time.Now().UTC()
}

func (s *Service) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func (s *Service) window() time.Duration {
	if s.Window > 0 {
		return s.Window
	}
	return DefaultWindow
}

// CreateRequest asks for a refund (fields checked for shape by the caller).
type CreateRequest struct {
	Scope         models.Scope
	TransactionID string
	// Amount is what to refund; 0 refunds the refundable remainder.
	Amount money.Amount
	Reason string
	// Destination is the wallet to refund, as given; "" is the payer's.
	Destination string
	InitiatedBy string
}

// Create checks the merchant's refunds flag for the scope's mode, stores
// the refund (reserving its amount on the transaction) and starts its
// workflow. A workflow that does not start now is started by the
// repairer; the refund is answered either way.
func (s *Service) Create(ctx context.Context, r CreateRequest) (*models.Refund, error) {
	m, err := s.Store.Merchant(ctx, r.Scope.MerchantID)
	if err != nil {
		return nil, err
	}
	if !m.RefundsOn(r.Scope.Mode) {
		if r.Scope.Mode == models.ModeLive && m.RefundsEnabled == nil {
			return nil, apperr.WithHint(apperr.ErrForbidden, "refunds are not enabled in live mode for this merchant yet",
				"refunds are on in test mode; an operator enables them in live mode (paygate refunds enable MERCHANT_ID)")
		}
		return nil, apperr.WithHint(apperr.ErrForbidden, "refunds are disabled for this merchant",
			"an operator enables them again (paygate refunds enable MERCHANT_ID)")
	}
	t, err := s.Store.Transaction(ctx, r.Scope, r.TransactionID)
	if err != nil {
		return nil, err
	}
	dest := ""
	if r.Destination != "" {
		fam, ok := chain.FamilyOf(t.Network)
		if !ok {
			return nil, fmt.Errorf("refund: transaction %s is on unknown network %q", t.ID, t.Network)
		}
		if dest, err = chain.ParseAddress(fam, r.Destination); err != nil {
			return nil, apperr.Invalid("destinationWallet", fmt.Sprintf("%v (a %s address for %s)", err, fam, t.Network))
		}
	}
	ref, err := s.Store.CreateRefund(ctx, models.RefundRequest{Scope: r.Scope, TransactionID: t.ID, Amount: r.Amount,
		Reason: r.Reason, Destination: dest, InitiatedBy: r.InitiatedBy, Window: s.window()})
	if err != nil {
		return nil, err
	}
	if err := s.StartWorkflow(ctx, ref); err != nil {
		s.log().WarnContext(ctx, "refund workflow not started; the repairer will start it", "refundId", ref.ID, "err", err)
	} else {
		ref.WorkflowStarted = true
	}
	return ref, nil
}

// StartWorkflow starts a refund's workflow, or finds it started already
// (also after it closed: a refund's workflow never runs twice), then marks
// the refund.
func (s *Service) StartWorkflow(ctx context.Context, r *models.Refund) error {
	return s.startWorkflow(ctx, r, enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE, nil)
}

// startWorkflow starts the refund's workflow under the reuse policy: a
// new refund's rejects a duplicate; a refund whose workflow closed
// without ending it (ResumeStoppedRefunds) allows one, and prior is then
// what the closed run last held (nil when it could not be read).
func (s *Service) startWorkflow(ctx context.Context, r *models.Refund, reuse enums.WorkflowIdReusePolicy, prior *workflows.RefundState) error {
	if s.Temporal == nil {
		return ErrNoTemporal
	}
	in := s.workflowInput(r)
	if r.Status == models.RefundSubmitted && r.TxHash != nil {
		// Resumed from the read model: straight to verification.
		at := r.UpdatedAt
		if r.SubmittedAt != nil {
			at = *r.SubmittedAt
		}
		in.Carry = &workflows.RefundCarry{Status: r.Status, TxHash: *r.TxHash, SubmittedAt: at}
		if prior != nil && strings.EqualFold(prior.TxHash, *r.TxHash) {
			// The hashes the current one replaced are still checked (the
			// first may land after all), and the replacements taken still
			// count: the read model keeps the current hash only.
			in.Carry.Replaced, in.Carry.Replacements = prior.Replaced, prior.Replacements
		}
	}
	_, err := s.Temporal.ExecuteWorkflow(ctx, s.startOptions(r, workflows.RefundWorkflowID(r.ID), reuse), workflows.RefundWorkflow, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &already) {
		return err
	}
	return s.Store.MarkRefundWorkflowStarted(ctx, r.ID)
}

// workflowInput is the refund's workflow input (without a carry).
func (s *Service) workflowInput(r *models.Refund) workflows.RefundInput {
	in := workflows.RefundInput{RefundID: r.ID, MerchantID: r.MerchantID, Network: r.Network, SourceWallet: r.SourceWallet,
		DestinationWallet: r.DestinationWallet, Units: r.Amount.Units(), CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
		NotFoundWindow: s.NotFoundWindow}
	if in.NotFoundWindow <= 0 {
		in.NotFoundWindow = DefaultNotFoundWindow
	}
	if s.Networks != nil {
		if n, ok := s.Networks.Lookup(r.Network); ok {
			in.PollInterval = n.PollInterval
		}
	}
	return in
}

// startOptions starts one of the refund's workflows under id: its search
// attributes and memo name the refund's merchant, network and wallets.
func (s *Service) startOptions(r *models.Refund, id string, reuse enums.WorkflowIdReusePolicy) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             s.TaskQueue,
		WorkflowIDReusePolicy: reuse,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.MerchantIDAttr.ValueSet(r.MerchantID),
			workflows.NetworkAttr.ValueSet(r.Network),
		),
		Memo: map[string]any{"amount": r.Amount.String(), "network": r.Network, "transactionId": r.TransactionID,
			"mode": string(r.Mode), "sourceWallet": r.SourceWallet, "destinationWallet": r.DestinationWallet,
			"expiresAt": r.ExpiresAt.Format(time.RFC3339), "refundId": r.ID},
	}
}

// recordLate starts the recording of a transfer found on chain for a
// refund that failed REFUND_EXPIRED (RefundLateTransferWorkflow; or
// recordFound, in tests): one workflow per refund and transfer, started
// again only after the last closed. errSubmitBusy when one is running.
func (s *Service) recordLate(ctx context.Context, r *models.Refund, hash string) error {
	if s.recordFound != nil {
		return s.recordFound(ctx, r, hash)
	}
	if s.Temporal == nil {
		return ErrNoTemporal
	}
	opts := s.startOptions(r, workflows.RefundLateWorkflowID(r.ID, hash), enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE)
	opts.WorkflowExecutionErrorWhenAlreadyStarted = true // one running: busy, asked again
	_, err := s.Temporal.ExecuteWorkflow(ctx, opts, workflows.RefundLateTransferWorkflow,
		workflows.RefundLateInput{Refund: s.workflowInput(r), TxHash: hash})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return errSubmitBusy
	}
	return err
}

// Submit attaches the merchant's transfer to one of the scope's refunds
// through the workflow's submit update, and answers the refund as stored
// after it. The same hash again is answered as the first time.
func (s *Service) Submit(ctx context.Context, sc models.Scope, id, txHash string) (*models.Refund, error) {
	return s.submit(ctx, sc, id, txHash, false)
}

// submit is Submit; firstOnly refuses a hash for a refund that has one
// (no replacement).
func (s *Service) submit(ctx context.Context, sc models.Scope, id, txHash string, firstOnly bool) (*models.Refund, error) {
	r, err := s.Store.RefundOf(ctx, sc, id)
	if err != nil {
		return nil, err
	}
	fam, _ := chain.FamilyOf(r.Network)
	h, perr := chain.ParseTxHash(fam, txHash)
	if perr != nil {
		return nil, apperr.Invalid("txHash", perr.Error())
	}
	if r.TxHash != nil && *r.TxHash == h && r.Status != models.RefundFailed {
		return r, nil
	}
	if firstOnly && r.TxHash != nil {
		return nil, apperr.Conflict("the refund already has a transaction hash (refund is " + r.Status + ")")
	}
	if !firstOnly && r.ExpiredWithoutTransfer() {
		return s.submitLate(ctx, sc, r, h)
	}
	if err := s.precheck(r, h); err != nil {
		return nil, err
	}
	if s.Temporal == nil {
		return nil, ErrNoTemporal
	}
	if !r.WorkflowStarted {
		if err := s.StartWorkflow(ctx, r); err != nil {
			return nil, err
		}
	}
	uctx, cancel := context.WithTimeout(ctx, workflows.UpdateTimeout(s.UpdateTimeout))
	defer cancel()
	// One update per hash (and, for a replacement, per hash replaced): a
	// submit retried after a 503 joins the first, and a hash submitted
	// again after it was itself replaced is a new update, not the first
	// one's cached answer.
	updateID := "submit:" + h
	if r.TxHash != nil {
		updateID += ":replacing:" + *r.TxHash
	}
	send := func() error {
		hd, err := s.Temporal.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{
			WorkflowID: workflows.RefundWorkflowID(r.ID), UpdateName: workflows.RefundSubmitUpdate,
			UpdateID: updateID,
			Args:     []any{workflows.RefundSubmitRequest{TxHash: h, FirstOnly: firstOnly}}, WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err == nil {
			var res workflows.RefundSubmitResult
			err = hd.Get(uctx, &res)
		}
		return err
	}
	err = send()
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		// The workflow closed without ending the refund (an operator
		// terminated it, or it failed): started again from the read
		// model, it takes the hash.
		if ok, rerr := s.restartStopped(ctx, r.ID); rerr == nil && ok {
			err = send()
		}
	}
	if workflows.UpdateUnanswered(ctx, uctx, err) {
		return nil, apperr.Unavailable("the refund service is temporarily unavailable; retry shortly", workflows.UnavailableRetryAfter)
	}
	var appErr *temporal.ApplicationError
	if firstOnly && errors.As(err, &appErr) && appErr.Type() == workflows.ErrTypeSubmitInProgress {
		return nil, errSubmitBusy
	}
	if err := s.mapWorkflowError(ctx, r, err); err != nil {
		return nil, err
	}
	return s.Store.RefundOf(ctx, sc, id)
}

// submitLate takes the hash of a transfer sent for a refund that failed
// REFUND_EXPIRED (the merchant paid it late, and has the hash): it starts
// (or joins) the recording of that transfer, RefundLateTransferWorkflow,
// and waits for its answer up to the update timeout: recorded, the refund
// is answered succeeded; a transfer that does not pay it is a 409 saying
// why; one not confirmed yet a 503 with Retry-After (the same submit again
// joins the same check; so does a check that could not answer). More than
// a week after the window, or a hash that backs another refund of the
// merchant, is a 409 (another merchant's refund holding it is not: see
// models.Store.RefundHashTaken).
func (s *Service) submitLate(ctx context.Context, sc models.Scope, r *models.Refund, hash string) (*models.Refund, error) {
	if !s.now().Before(r.ExpiresAt.Add(models.ExpiredRefundListed)) {
		return nil, apperr.Conflict("refund is failed (REFUND_EXPIRED) more than a week ago: a transfer sent for it is no longer recorded")
	}
	taken, err := s.Store.RefundHashTaken(ctx, r.MerchantID, r.Network, hash)
	if err != nil {
		return nil, err
	}
	if taken {
		return nil, apperr.Conflict("this transaction hash already backs another refund")
	}
	if s.Temporal == nil {
		return nil, ErrNoTemporal
	}
	wctx, cancel := context.WithTimeout(ctx, workflows.UpdateTimeout(s.UpdateTimeout))
	defer cancel()
	run, err := s.Temporal.ExecuteWorkflow(wctx, s.startOptions(r, workflows.RefundLateWorkflowID(r.ID, hash), enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE),
		workflows.RefundLateTransferWorkflow, workflows.RefundLateInput{Refund: s.workflowInput(r), TxHash: hash})
	var res workflows.RefundLateResult
	if err == nil {
		err = run.Get(wctx, &res)
	}
	switch {
	case workflows.UpdateUnanswered(ctx, wctx, err):
		return nil, apperr.Unavailable("the transfer is being checked on chain (not confirmed yet, or the service is busy): the refund succeeds once it is; "+
			"submit the same hash again to see", workflows.UnavailableRetryAfter)
	case err != nil:
		// The check could not answer (its workflow failed or was ended by
		// an operator): the same hash again starts it afresh.
		s.log().WarnContext(ctx, "refund: late transfer not checked", "refundId", r.ID, "txHash", hash, "err", err)
		return nil, apperr.Unavailable("the transfer could not be checked on chain; submit the same hash again shortly", workflows.UnavailableRetryAfter)
	case !res.Recorded:
		return nil, apperr.Conflict(fmt.Sprintf("the transfer does not pay this refund (%s): %s", res.Reason, res.Message))
	}
	return s.Store.RefundOf(ctx, sc, r.ID)
}

// precheck answers from the read model what is already decided. Another
// hash for a submitted refund, or for a failed one still watched, is a
// replacement (a speed-up or re-send): the workflow decides (it refuses it
// once the refund's outcome is being recorded, after two replacements, or
// when the failed refund is no longer watched).
func (s *Service) precheck(r *models.Refund, hash string) error {
	replacement := r.TxHash != nil && *r.TxHash != hash &&
		(r.Status == models.RefundSubmitted || (r.Status == models.RefundFailed && r.WatchedUntil != nil))
	switch {
	case replacement:
		return nil
	case r.TxHash != nil:
		return apperr.Conflict("the refund already has a transaction hash (refund is " + r.Status + ")")
	case r.Status != models.RefundPending:
		return apperr.Conflict("refund is " + r.Status)
	case !s.now().Before(r.ExpiresAt):
		return apperr.Conflict("the refund window has passed; the refund fails and its amount is free for a new refund " +
			"(a transfer sent for it within a week is found on chain and recorded)")
	}
	return nil
}

func (s *Service) mapWorkflowError(ctx context.Context, r *models.Refund, err error) error {
	if err == nil {
		return nil
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		switch appErr.Type() {
		case workflows.ErrTypeRefundExpired, workflows.ErrTypeRefundNotOpen, workflows.ErrTypeSubmitInProgress,
			activities.ErrTypeRefundTxClaimed:
			return apperr.Conflict(appErr.Message())
		case workflows.ErrTypeBadUpdate:
			return apperr.Invalid("txHash", appErr.Message())
		}
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		// The workflow has closed: answer from the read model.
		if cur, lerr := s.Store.RefundByID(ctx, r.ID); lerr == nil {
			return apperr.Conflict("refund is " + cur.Status)
		}
	}
	return err
}

// RepairOnce starts the workflow of every refund older than grace whose
// workflow was never confirmed started (a crash between the database write
// and the start). It returns how many it started.
func (s *Service) RepairOnce(ctx context.Context, grace time.Duration) (int, error) {
	rows, err := s.Store.RefundsWithoutWorkflow(ctx, s.now().Add(-grace), 100)
	if err != nil {
		return 0, err
	}
	return periodic.StartMissing(ctx, s.log(), "refund", "refundId", rows,
		func(r *models.Refund) string { return r.ID }, s.StartWorkflow), nil
}

// ReleaseLapsedHolds gives back the amounts that failed refunds still hold
// more than grace after their watch's end (or with no watch left), when
// their workflow has closed (an operator terminated it, or it failed): the
// workflow would have ended the watch, and the amount would stay
// unrefundable for good. A workflow that has not closed (running: awaiting
// the verdict of a transfer seen at the watch's end; paused) keeps its
// hold. It pages through every such refund and returns how many it
// released.
func (s *Service) ReleaseLapsedHolds(ctx context.Context, grace time.Duration) (int, error) {
	if s.Temporal == nil {
		return 0, ErrNoTemporal
	}
	n, after := 0, ""
	for {
		rows, err := s.Store.LapsedRefundHolds(ctx, s.now().Add(-grace), after, 50)
		if err != nil {
			return n, err
		}
		for i := range rows {
			r := &rows[i]
			after = r.ID
			closed, how := s.workflowClosed(ctx, r.ID)
			if !closed {
				continue
			}
			msg := fmt.Sprintf("the transfer was not seen paying the refund by the end of its watch (its workflow %s without ending it); the amount is refundable again",
				how)
			ok, err := s.Store.ReleaseRefundHold(ctx, r.ID, msg)
			if err != nil {
				s.log().Warn("refund hold: not released", "refundId", r.ID, "err", err)
				continue
			}
			if ok {
				s.log().Warn("refund hold: released the amount of a failed refund whose workflow closed without ending its watch",
					"refundId", r.ID, "workflow", how)
				n++
			}
		}
		if len(rows) < 50 {
			return n, nil
		}
	}
}

// ResumeStoppedRefunds starts again the workflow of every open refund
// overdue by grace (pending past its window, or submitted and not moved
// since) whose workflow closed without ending it: an operator terminated
// it, or it failed. Nothing else would ever end such a refund: its amount
// stayed held, and a submit answered 409 "refund is pending". The new run
// starts from the read model: a pending refund past its window expires
// (its amount refundable again; a transfer sent late is still recorded
// by the watcher), a submitted one goes on to its transfer's verdict. It
// pages through every such refund and returns how many it started.
func (s *Service) ResumeStoppedRefunds(ctx context.Context, grace time.Duration) (int, error) {
	if s.Temporal == nil {
		return 0, ErrNoTemporal
	}
	n, after := 0, ""
	for {
		rows, err := s.Store.RefundsOverdue(ctx, s.now().Add(-grace), after, 50)
		if err != nil {
			return n, err
		}
		for i := range rows {
			after = rows[i].ID
			ok, err := s.restartStopped(ctx, rows[i].ID)
			if err != nil {
				s.log().Warn("refund: workflow not started again", "refundId", rows[i].ID, "err", err)
			}
			if ok {
				n++
			}
		}
		if len(rows) < 50 {
			return n, nil
		}
	}
}

// restartStopped starts the refund's workflow again when it has closed
// and the refund is still open (pending or submitted), read after the
// workflow was seen closed: a workflow that ended the refund and then
// closed is left closed. It reports whether it started one.
func (s *Service) restartStopped(ctx context.Context, id string) (bool, error) {
	closed, how := s.workflowClosed(ctx, id)
	if !closed {
		return false, nil
	}
	r, err := s.Store.RefundByID(ctx, id)
	if err != nil || (r.Status != models.RefundPending && r.Status != models.RefundSubmitted) {
		return false, err
	}
	if err := s.startWorkflow(ctx, r, enums.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, s.closedRunState(ctx, id)); err != nil {
		return false, err
	}
	s.log().Warn("refund: its workflow closed without ending it; started again from the read model",
		"refundId", id, "status", r.Status, "workflow", how)
	return true, nil
}

// closedRunState is what the refund's closed workflow run last held, read
// by its status query (answered by a worker replaying its history), or
// nil when it cannot be read (the run is gone, or does not replay).
func (s *Service) closedRunState(ctx context.Context, refundID string) *workflows.RefundState {
	v, err := s.Temporal.QueryWorkflow(ctx, workflows.RefundWorkflowID(refundID), "", workflows.RefundStatusQuery)
	var st workflows.RefundState
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil {
		s.log().Warn("refund: the closed workflow's state not read; started again from the read model alone (the hashes the current one replaced are not checked)",
			"refundId", refundID, "err", err)
		return nil
	}
	return &st
}

// workflowClosed says whether the refund's workflow has closed for good
// (or is gone), and how.
func (s *Service) workflowClosed(ctx context.Context, refundID string) (bool, string) {
	desc, err := s.Temporal.DescribeWorkflowExecution(ctx, workflows.RefundWorkflowID(refundID), "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return true, "is gone"
	case err != nil:
		s.log().Warn("refund hold: workflow not described", "refundId", refundID, "err", err)
		return false, ""
	}
	switch st := desc.GetWorkflowExecutionInfo().GetStatus(); st {
	case enums.WORKFLOW_EXECUTION_STATUS_COMPLETED, enums.WORKFLOW_EXECUTION_STATUS_FAILED, enums.WORKFLOW_EXECUTION_STATUS_CANCELED,
		enums.WORKFLOW_EXECUTION_STATUS_TERMINATED, enums.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return true, strings.ToLower(strings.TrimPrefix(st.String(), "WORKFLOW_EXECUTION_STATUS_"))
	}
	return false, "" // running, paused, or a status this code does not know
}

// RunRepairer repairs every interval until ctx ends, and every ten
// minutes gives back the amounts of lapsed watches (an hour past their
// end) and starts again the workflows of refunds that closed open (an
// hour overdue).
func (s *Service) RunRepairer(ctx context.Context, interval, grace time.Duration) {
	go periodic.Run(ctx, 10*time.Minute, func(ctx context.Context) {
		if _, err := s.ReleaseLapsedHolds(ctx, time.Hour); err != nil && ctx.Err() == nil {
			s.log().Warn("refund hold pass failed", "err", err)
		}
		if _, err := s.ResumeStoppedRefunds(ctx, time.Hour); err != nil && ctx.Err() == nil {
			s.log().Warn("refund resume pass failed", "err", err)
		}
	})
	periodic.Run(ctx, interval, func(ctx context.Context) {
		if _, err := s.RepairOnce(ctx, grace); err != nil && ctx.Err() == nil {
			s.log().Warn("refund repair pass failed", "err", err)
		}
	})
}
