package workflows

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
)

// Names of the checkout workflow's handlers.
const (
	// CheckoutSubmitUpdate attaches a transaction hash (POST /api/checkout/submit).
	CheckoutSubmitUpdate = "submit"
	// CheckoutWalletUpdate reports wallet progress from the checkout page.
	CheckoutWalletUpdate = "wallet"
	// CheckoutCancelSignal cancels before a broadcast (customer, merchant or
	// link deletion); after a broadcast it is ignored.
	CheckoutCancelSignal = "cancel"
	// CheckoutStatusQuery answers the session's state and history.
	CheckoutStatusQuery = "status"
)

// Application error types of rejected updates, mapped to HTTP by the API.
const (
	ErrTypeSessionExpired   = "SessionExpired"   // 404 (SPEC.md: expired session)
	ErrTypeSessionNotOpen   = "SessionNotOpen"   // 409 (already has a hash, or terminal)
	ErrTypeSubmitInProgress = "SubmitInProgress" // 409
	ErrTypeBadUpdate        = "BadUpdate"        // 400
	// ErrTypeTxHashReleased: the hash was checked and given back (it does
	// not pay the session); 400 on txHash.
	ErrTypeTxHashReleased = "TxHashReleased"
)

// Cancel sources carried by CheckoutCancelSignal.
const (
	CancelByCustomer    = "customer"
	CancelByMerchant    = "merchant"
	CancelByLinkDeleted = "link_deleted"
)

// Failure reasons the workflow itself decides (the chain's are in package chain).
const (
	ReasonLinkDeleted       = "LINK_DELETED"
	ReasonCustomerCancelled = "customer_cancelled"
)

// Search attributes the workflow keeps current, registered by `make run`
// and by `paygate worker` (temporaldev.PaygateSearchAttributes).
var (
	CheckoutStatusAttr = temporal.NewSearchAttributeKeyKeyword("CheckoutStatus")
	MerchantIDAttr     = temporal.NewSearchAttributeKeyKeyword("MerchantId")
	NetworkAttr        = temporal.NewSearchAttributeKeyKeyword("Network")
	PaymentLinkIDAttr  = temporal.NewSearchAttributeKeyKeyword("PaymentLinkId")
)

// CheckoutWorkflowID is the workflow id of a session: checkout:<sessionId>.
func CheckoutWorkflowID(sessionID string) string { return "checkout:" + sessionID }

// CheckoutInput starts (or continues) one session's workflow.
type CheckoutInput struct {
	SessionID      string
	MerchantID     string
	PaymentLinkID  string
	Network        string
	MerchantWallet string
	// PayerWallet is the customer's wallet: only a transfer from it pays the
	// session (empty: any payer, for sessions started before this field).
	PayerWallet string
	// CreatedAt is the session's creation; older transfers do not pay it.
	CreatedAt time.Time
	// PaymentReference binds a payment to the session: the nonce of the
	// EIP-3009 authorization (EVM) or the Solana Pay reference key. Empty
	// on sessions started before it existed.
	PaymentReference string
	// ExpectedUnits is the total due in USDC base units (6 decimals).
	ExpectedUnits int64
	ExpiresAt     time.Time
	// PollInterval is the pause between chain checks (the network's).
	PollInterval time.Duration
	// NotFoundWindow is how long a broadcast hash may stay unseen before the
	// session fails with TX_NOT_FOUND (DESIGN.md: 1 hour).
	NotFoundWindow time.Duration
	// Carry holds the state of a run that continued as new; nil at first.
	Carry *CheckoutCarry
	// Shape is the command shape the session's workflow was started with,
	// fixed for its life (continue-as-new keeps it): 0 for the histories
	// written before it existed (every effect a remote activity, history
	// entry ids from side effects), ShapeLocalEffects for new starts.
	// Starters set ShapeCurrent. See the README's design notes on versioning.
	Shape int
}

// Command shapes of the checkout and webhook delivery workflows, carried
// in their input so an execution keeps the shape it started with and old
// histories replay unchanged.
const (
	// ShapeRemoteEffects: every store write and chain check is a remote
	// activity (three history events and a round trip through the matching
	// service each), and history entry ids are side-effect markers.
	ShapeRemoteEffects = 0
	// ShapeLocalEffects: store writes, chain checks and delivery attempts
	// are local activities (one marker each, run in the workflow task that
	// asks for them), and history entry ids are derived from the run.
	ShapeLocalEffects = 1
	// ShapeCurrent is the shape new executions start with.
	ShapeCurrent = ShapeLocalEffects
)

// CheckoutCarry is the state a confirmation loop hands to its next run.
type CheckoutCarry struct {
	Status      string
	TxHash      string
	BroadcastAt time.Time
	// LastSeenAt is when the chain last showed the transaction (zero if never).
	LastSeenAt time.Time
	History    []HistoryEntry
	// Released are the hashes the session gave back (releaseVersion).
	Released []string `json:",omitempty"`
}

// HistoryEntry is one status change as the status query shows it.
type HistoryEntry struct {
	ID     string
	Status string
	Source string
	Chain  string
	At     time.Time
}

// CheckoutState answers the status query.
type CheckoutState struct {
	SessionID string
	Status    string
	TxHash    string
	Reason    string
	Message   string
	ExpiresAt time.Time
	// Verifying is true while a submit is being handled.
	Verifying bool
	History   []HistoryEntry
	// LastCheck is the latest chain observation after a broadcast.
	LastCheck *chain.VerifyResult
}

// SubmitRequest is the submit update's argument.
type SubmitRequest struct {
	TxHash string
	// Source is who attached the hash: "client" (the default: the page or
	// an integration) or "chain" (the service found the session's bound
	// payment on chain without a submit).
	Source string
}

// SubmitResult is the submit update's answer.
type SubmitResult struct {
	Status     string
	TxHash     string
	SessionID  string
	NextAction string
}

// WalletRequest is the wallet update's argument.
type WalletRequest struct{ Status string }

// CancelRequest is the cancel signal's argument.
type CancelRequest struct{ Source string }

// CheckoutResult is the workflow's outcome.
type CheckoutResult struct {
	Status string
	Reason string
	TxHash string
}

// maxChecksPerRun bounds the history of one run: each chain check adds about
// six events, so a run continues as new before it reaches a few thousand.
const maxChecksPerRun = 300

var checkoutActivities *activities.CheckoutActivities

// blockClockSlack is how much older than the session a block may claim to
// be (models.BlockClockSlack).
const blockClockSlack = models.BlockClockSlack

// preBroadcast reports whether a session may still take a hash or a cancel.
func preBroadcast(status string) bool {
	switch status {
	case models.StatusCreated, models.StatusWalletConnecting, models.StatusWalletReady:
		return true
	}
	return false
}

type checkout struct {
	in        CheckoutInput
	state     CheckoutState
	verifying bool
	// walletWrites counts wallet reports being written: a submit and the
	// session's end wait for them, so a late write cannot move it back.
	walletWrites int
	// ending is set once the outcome is being written: no update is
	// accepted from then on.
	ending    bool
	submitted workflow.Channel
	effects   workflow.Context
	verify    workflow.Context
	broadcast time.Time
	lastSeen  time.Time
	// entrySeq counts the history entry ids this run allocated.
	entrySeq int
	// released are the hashes the chain showed not to be the session's
	// payment: submitted again, they are refused.
	released []string
	// checks counts the chain checks of this run (maxChecksPerRun), over
	// every hash the session held in it.
	checks int
	// checking is set while the confirmation loop checks the held hash and
	// acts on the answer: a replacement (replace) waits for it to end.
	checking bool
}

// releaseVersion: a failed verdict on a transaction that is not the
// session's customer's (chain.VerifyResult.Foreign) gives the hash back and
// the session waits for its payment, where before it failed the session.
const releaseVersion = "release-foreign-tx"

// exec runs a store write or chain check: a local activity in the local
// shape, a remote one in the shape old histories recorded.
func (c *checkout) exec(ctx workflow.Context, verify bool, fn, arg any) workflow.Future {
	actx := c.effects
	if verify {
		actx = c.verify
	}
	if c.in.Shape >= ShapeLocalEffects {
		return workflow.ExecuteLocalActivity(actx, fn, arg)
	}
	return workflow.ExecuteActivity(actx, fn, arg)
}

// CheckoutSessionWorkflow runs one checkout session from creation to its
// outcome: the expiry timer, the submit and wallet updates, cancellation,
// and after a broadcast the chain confirmation loop. Activities write the
// read model before the workflow moves on.
func CheckoutSessionWorkflow(ctx workflow.Context, in CheckoutInput) (CheckoutResult, error) {
	if in.SessionID == "" || in.ExpectedUnits <= 0 {
		return CheckoutResult{}, temporal.NewNonRetryableApplicationError("session id and a positive amount are required", ErrTypeBadUpdate, nil)
	}
	if in.PollInterval <= 0 {
		in.PollInterval = 5 * time.Second
	}
	if in.NotFoundWindow <= 0 {
		in.NotFoundWindow = time.Hour
	}
	c := &checkout{in: in, submitted: workflow.NewBufferedChannel(ctx, 1)}
	c.state = CheckoutState{SessionID: in.SessionID, Status: models.StatusCreated, ExpiresAt: in.ExpiresAt}
	if in.Carry != nil {
		c.state.Status, c.state.TxHash, c.broadcast, c.lastSeen = in.Carry.Status, in.Carry.TxHash, in.Carry.BroadcastAt, in.Carry.LastSeenAt
		c.state.History = in.Carry.History
		c.released = in.Carry.Released
	}
	effectsRetry := &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
		NonRetryableErrorTypes: []string{activities.ErrTypeTxHashClaimed, activities.ErrTypeInvalidInput}}
	verifyRetry := &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second}
	if in.Shape >= ShapeLocalEffects {
		// The same budgets as the remote activities below: a store write is
		// retried until the store answers, a chain check for 5 minutes.
		c.effects = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: 30 * time.Second, RetryPolicy: effectsRetry})
		c.verify = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: 30 * time.Second, ScheduleToCloseTimeout: 5 * time.Minute, RetryPolicy: verifyRetry})
	} else {
		c.effects = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 30 * time.Second, RetryPolicy: effectsRetry})
		c.verify = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 30 * time.Second, ScheduleToCloseTimeout: 5 * time.Minute, RetryPolicy: verifyRetry})
	}
	if err := c.registerHandlers(ctx); err != nil {
		return CheckoutResult{}, err
	}
	for {
		if preBroadcast(c.state.Status) {
			if done, res, err := c.waitForBroadcast(ctx); done || err != nil {
				return res, err
			}
		}
		res, reopened, err := c.confirm(ctx)
		if !reopened || err != nil {
			return res, err
		}
	}
}

func (c *checkout) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, CheckoutStatusQuery, func() (CheckoutState, error) {
		s := c.state
		s.Verifying = c.verifying
		s.History = append([]HistoryEntry(nil), c.state.History...)
		return s, nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, CheckoutSubmitUpdate, c.submit,
		workflow.UpdateHandlerOptions{Validator: c.validateSubmit}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, CheckoutWalletUpdate, c.wallet,
		workflow.UpdateHandlerOptions{Validator: c.validateWallet})
}

// openError says why a session takes no more hashes or wallet reports.
func (c *checkout) openError(ctx workflow.Context) error {
	switch {
	case c.verifying:
		return temporal.NewApplicationError("a transaction hash is being attached to this session", ErrTypeSubmitInProgress)
	case c.state.Status == models.StatusExpired || (preBroadcast(c.state.Status) && !workflow.Now(ctx).Before(c.in.ExpiresAt)):
		return temporal.NewApplicationError("checkout session expired", ErrTypeSessionExpired)
	case c.ending:
		return temporal.NewApplicationError("session is ending", ErrTypeSessionNotOpen)
	case !preBroadcast(c.state.Status):
		if c.state.TxHash != "" {
			return temporal.NewApplicationError("session already has a transaction hash", ErrTypeSessionNotOpen)
		}
		return temporal.NewApplicationError("session is "+c.state.Status, ErrTypeSessionNotOpen)
	}
	return nil
}

func (c *checkout) validateSubmit(ctx workflow.Context, req SubmitRequest) error {
	if req.TxHash == "" {
		return temporal.NewApplicationError("txHash is required", ErrTypeBadUpdate)
	}
	if slices.Contains(c.released, req.TxHash) {
		return temporal.NewApplicationError("transaction "+req.TxHash+" was checked on chain and does not pay this session", ErrTypeTxHashReleased)
	}
	if c.replaceable(req) {
		return nil
	}
	return c.openError(ctx)
}

// replaceable reports whether req may take the place of the hash holding
// the session: the chain has not shown that one (txn_broadcast), the
// session declares its payer, and the service's watcher (source chain, not
// a client) offers another transaction it found paying the session.
func (c *checkout) replaceable(req SubmitRequest) bool {
	return req.Source == "chain" && c.state.Status == models.StatusBroadcast && c.state.TxHash != "" &&
		req.TxHash != c.state.TxHash && c.in.PayerWallet != "" && !c.verifying && !c.ending
}

// submit claims the hash (unique across sessions and transactions), then
// moves the session to txn_broadcast; the confirmation loop takes over.
func (c *checkout) submit(ctx workflow.Context, req SubmitRequest) (SubmitResult, error) {
	if c.state.Status == models.StatusBroadcast {
		return c.replace(ctx, req) // validated by replaceable
	}
	c.verifying = true
	defer func() { c.verifying = false }()
	// A wallet report being written goes first, so it cannot land after the broadcast.
	if err := workflow.Await(ctx, func() bool { return c.walletWrites == 0 }); err != nil {
		return SubmitResult{}, err
	}
	claim := activities.ClaimTxHashInput{SessionID: c.in.SessionID, Network: c.in.Network, TxHash: req.TxHash}
	if err := c.exec(ctx, false, checkoutActivities.ClaimTxHash, claim).Get(ctx, nil); err != nil {
		return SubmitResult{}, err
	}
	c.state.TxHash = req.TxHash
	c.broadcast = workflow.Now(ctx)
	source, network := "client", ""
	if req.Source == "chain" {
		source, network = "chain", c.in.Network
	}
	if err := c.transition(ctx, models.StatusBroadcast, source, network); err != nil {
		return SubmitResult{}, err
	}
	c.submitted.SendAsync(true)
	return SubmitResult{Status: models.StatusBroadcast, TxHash: req.TxHash, SessionID: c.in.SessionID, NextAction: "poll_status"}, nil
}

func (c *checkout) validateWallet(ctx workflow.Context, req WalletRequest) error {
	if req.Status != models.StatusWalletConnecting && req.Status != models.StatusWalletReady {
		return temporal.NewApplicationError("status must be wallet_connecting or wallet_ready", ErrTypeBadUpdate)
	}
	return c.openError(ctx)
}

func (c *checkout) wallet(ctx workflow.Context, req WalletRequest) (CheckoutState, error) {
	c.walletWrites++
	defer func() { c.walletWrites-- }()
	if req.Status != c.state.Status {
		if err := c.transition(ctx, req.Status, "client", ""); err != nil {
			return CheckoutState{}, err
		}
	}
	return c.state, nil
}

// nextEntryID makes a history entry id: a UUIDv7, so entries sort in time
// order. In the local shape it is derived from the run (workflow time, the
// run id and a count of the ids the run allocated), so a replay makes the
// same id without a marker in the history; before, a side effect recorded it.
func (c *checkout) nextEntryID(ctx workflow.Context) string {
	if c.in.Shape >= ShapeLocalEffects {
		// Numbered when allocated, not when recorded: two wallet reports in
		// one workflow task must not share a number.
		c.entrySeq++
		return entryID(workflow.Now(ctx), workflow.GetInfo(ctx).WorkflowExecution.RunID, c.entrySeq)
	}
	return newEntryID(ctx)
}

// newEntryID makes a UUIDv7 recorded in the workflow history as a side
// effect, so replays reuse it.
func newEntryID(ctx workflow.Context) string {
	var id string
	_ = workflow.SideEffect(ctx, func(workflow.Context) any { return uuid.Must(uuid.NewV7()).String() }).Get(&id)
	return id
}

// entryID is the UUIDv7 of the seq-th history entry of a run at time at:
// the millisecond timestamp, then seq in the 12 bits version 7 leaves for
// ordering within a millisecond (so entries written in the same workflow
// task keep their order), then 62 bits of SHA-256 over the run id and seq.
// Run ids are unique, so ids never repeat across sessions or runs.
func entryID(at time.Time, runID string, seq int) string {
	var u uuid.UUID
	msec := uint64(at.UnixMilli())
	for i := 0; i < 6; i++ {
		u[i] = byte(msec >> (40 - 8*i))
	}
	u[6] = 0x70 | byte(seq>>8)&0x0f
	u[7] = byte(seq)
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", runID, seq))
	copy(u[8:], sum[:8])
	u[8] = u[8]&0x3f | 0x80
	return u.String()
}

// transition writes a status change, then reflects it in the workflow's
// state and search attributes.
func (c *checkout) transition(ctx workflow.Context, status, source, network string) error {
	e := HistoryEntry{ID: c.nextEntryID(ctx), Status: status, Source: source, Chain: network, At: workflow.Now(ctx)}
	t := activities.SessionTransition{SessionID: c.in.SessionID, EntryID: e.ID, Status: status, Source: source, Chain: network, At: e.At}
	if status == models.StatusBroadcast {
		t.TxHash = c.state.TxHash
	}
	if err := c.exec(ctx, false, checkoutActivities.RecordTransition, t).Get(ctx, nil); err != nil {
		return err
	}
	c.record(ctx, e)
	return nil
}

func (c *checkout) record(ctx workflow.Context, e HistoryEntry) {
	c.state.Status = e.Status
	c.state.History = append(c.state.History, e)
	if err := workflow.UpsertTypedSearchAttributes(ctx, CheckoutStatusAttr.ValueSet(e.Status)); err != nil {
		workflow.GetLogger(ctx).Warn("search attribute not updated", "err", err)
	}
}

// finish ends the session with an outcome and its events.
func (c *checkout) finish(ctx workflow.Context, o activities.SessionOutcome) (CheckoutResult, error) {
	c.ending = true
	o.SessionID, o.EntryID, o.At = c.in.SessionID, c.nextEntryID(ctx), workflow.Now(ctx)
	var stored activities.SessionFinish
	if err := c.exec(ctx, false, checkoutActivities.FinishSession, o).Get(ctx, &stored); err != nil {
		return CheckoutResult{}, err
	}
	if stored.Status != "" {
		// The store decides whether an unproven transfer may complete.
		o.Status, o.Reason, o.Message = stored.Status, stored.Reason, stored.Message
	}
	c.state.Reason, c.state.Message = o.Reason, o.Message
	c.record(ctx, HistoryEntry{ID: o.EntryID, Status: o.Status, Source: o.Source, Chain: o.Chain, At: o.At})
	// Updates still running would be cut off by the workflow's end.
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	return CheckoutResult{Status: o.Status, Reason: o.Reason, TxHash: c.state.TxHash}, nil
}

// waitForBroadcast waits for a submit, a cancel or the expiry timer. It
// reports done when the session ended before any broadcast.
func (c *checkout) waitForBroadcast(ctx workflow.Context) (bool, CheckoutResult, error) {
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	timer := workflow.NewTimer(timerCtx, c.in.ExpiresAt.Sub(workflow.Now(ctx)))
	cancels := workflow.GetSignalChannel(ctx, CheckoutCancelSignal)
	for {
		var expired bool
		var cancel *CancelRequest
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(timer, func(workflow.Future) { expired = true })
		sel.AddReceive(cancels, func(ch workflow.ReceiveChannel, _ bool) {
			var req CancelRequest
			ch.Receive(ctx, &req)
			cancel = &req
		})
		sel.AddReceive(c.submitted, func(ch workflow.ReceiveChannel, _ bool) { ch.Receive(ctx, nil) })
		sel.Select(ctx)
		// A submit in flight decides first: expiry and cancel wait for it.
		if err := workflow.Await(ctx, func() bool { return !c.verifying && c.walletWrites == 0 }); err != nil {
			return true, CheckoutResult{}, err
		}
		if !preBroadcast(c.state.Status) {
			if cancel != nil {
				workflow.GetLogger(ctx).Info("cancel after broadcast ignored", "source", cancel.Source)
			}
			return false, CheckoutResult{}, nil
		}
		switch {
		case cancel != nil && cancel.Source == CancelByLinkDeleted:
			res, err := c.finish(ctx, activities.SessionOutcome{Status: models.StatusFailed, Source: "server",
				Reason: ReasonLinkDeleted, Message: "the payment link was deleted"})
			return true, res, err
		case cancel != nil:
			res, err := c.finish(ctx, activities.SessionOutcome{Status: models.StatusCancelled, Source: cancelSource(cancel.Source),
				Reason: ReasonCustomerCancelled, Message: "cancelled by the " + cancel.Source})
			return true, res, err
		case expired:
			msg := "no transaction was submitted before the session expired"
			if n := len(c.released); n > 0 {
				// Named, since the session keeps no hash: the merchant can
				// trace what the customer (or someone else) submitted.
				msg = fmt.Sprintf("no payment arrived before the session expired (set aside, not paying it: %s)",
					strings.Join(c.released[max(0, n-3):], ", "))
			}
			res, err := c.finish(ctx, activities.SessionOutcome{Status: models.StatusExpired, Source: "server", Message: msg})
			return true, res, err
		}
		// A rejected submit (hash claimed elsewhere) leaves the session open.
	}
}

func cancelSource(who string) string {
	if who == CancelByCustomer {
		return "client"
	}
	return "server"
}

// confirm watches the broadcast transaction until the chain gives a verdict
// or the hash stays unseen past the window. It never expires the session.
// reopened: the transaction is not the session's payment, its hash was
// given back, and the session waits for a broadcast again.
func (c *checkout) confirm(ctx workflow.Context) (_ CheckoutResult, reopened bool, _ error) {
	// Cancels after a broadcast are refused by the API; drain any that
	// still arrive so they do not pile up (until the session reopens:
	// then they count again).
	cancels := workflow.GetSignalChannel(ctx, CheckoutCancelSignal)
	drainCtx, stopDrain := workflow.WithCancel(ctx)
	defer stopDrain()
	workflow.Go(drainCtx, func(gctx workflow.Context) {
		for {
			var req CancelRequest
			stop := false
			sel := workflow.NewSelector(gctx)
			sel.AddReceive(cancels, func(ch workflow.ReceiveChannel, _ bool) { ch.Receive(gctx, &req) })
			sel.AddReceive(gctx.Done(), func(workflow.ReceiveChannel, bool) { stop = true })
			sel.Select(gctx)
			if stop {
				return
			}
			workflow.GetLogger(gctx).Info("cancel after broadcast ignored", "source", req.Source)
		}
	})
	defer func() { c.checking = false }()
	req := c.verifyRequest(c.state.TxHash)
	for {
		// A replacement being made goes first (it changes the hash).
		if err := workflow.Await(ctx, func() bool { return !c.verifying }); err != nil {
			return CheckoutResult{}, false, err
		}
		if c.checks >= maxChecksPerRun {
			_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
			next := c.in
			next.Carry = &CheckoutCarry{Status: c.state.Status, TxHash: c.state.TxHash, BroadcastAt: c.broadcast, LastSeenAt: c.lastSeen, History: c.state.History,
				Released: c.released}
			return CheckoutResult{}, false, workflow.NewContinueAsNewError(ctx, CheckoutSessionWorkflow, next)
		}
		c.checks++
		c.checking = true
		req.TxHash = c.state.TxHash
		var res chain.VerifyResult
		err := c.exec(ctx, true, checkoutActivities.VerifyTransfer, req).Get(ctx, &res)
		if err != nil {
			// No verdict from a fault: log it and look again after a pause.
			logVerifyFault(ctx, err, "session")
		} else {
			c.state.LastCheck = &res
			if res.PaidBy != "" && res.Verdict != chain.VerdictPending {
				// The submitted transaction reverted; the payer's
				// authorization paid in another (a relayed copy of it).
				workflow.GetLogger(ctx).Info("the payer's authorization was used by another transaction", "submitted", c.state.TxHash, "paidBy", res.PaidBy)
				c.state.TxHash = res.PaidBy
			}
			switch res.Verdict {
			case chain.VerdictComplete:
				if c.state.Status == models.StatusBroadcast {
					if err := c.transition(ctx, models.StatusConfirming, "chain", c.in.Network); err != nil {
						return CheckoutResult{}, false, err
					}
				}
				out, err := c.finish(ctx, activities.SessionOutcome{Status: models.StatusComplete, Source: "chain", Chain: c.in.Network,
					ReceivedUnits: res.ReceivedUnits, Payer: res.Payer, Message: res.Message, Bound: res.Bound, Refs: res.Refs, PaidBy: res.PaidBy,
					BlockTime: res.BlockTime})
				return out, false, err
			case chain.VerdictFailed:
				if res.Foreign && res.PaidBy == "" && c.in.PayerWallet != "" &&
					workflow.GetVersion(ctx, releaseVersion, workflow.DefaultVersion, 1) == 1 {
					released, err := c.release(ctx, res)
					if err != nil || released {
						return CheckoutResult{}, released, err
					}
				}
				out, err := c.finish(ctx, activities.SessionOutcome{Status: models.StatusFailed, Source: "chain", Chain: c.in.Network,
					Reason: res.Reason, Message: res.Message, ReceivedUnits: res.ReceivedUnits, Payer: res.Payer, Bound: res.Bound, Refs: res.Refs,
					PaidBy: res.PaidBy})
				return out, false, err
			}
			if res.Seen && c.state.Status == models.StatusBroadcast {
				if err := c.transition(ctx, models.StatusConfirming, "chain", c.in.Network); err != nil {
					return CheckoutResult{}, false, err
				}
			}
			// The window runs from the broadcast, or from the last sighting
			// when a reorg dropped the transaction: that is watching again.
			since := c.broadcast
			if res.Seen {
				c.lastSeen = workflow.Now(ctx)
			} else if c.lastSeen.After(since) {
				since = c.lastSeen
			}
			if !res.Seen && workflow.Now(ctx).Sub(since) >= c.in.NotFoundWindow {
				out, err := c.finish(ctx, activities.SessionOutcome{Status: models.StatusFailed, Source: "chain", Chain: c.in.Network,
					Reason: chain.ReasonTxNotFound, Message: fmt.Sprintf("transaction not found on %s within %s", c.in.Network, c.in.NotFoundWindow)})
				return out, false, err
			}
		}
		c.checking = false
		if err := workflow.Sleep(ctx, c.in.PollInterval); err != nil {
			return CheckoutResult{}, false, err
		}
	}
}

// verifyRequest asks the chain whether hash pays the session.
func (c *checkout) verifyRequest(hash string) chain.VerifyRequest {
	req := chain.VerifyRequest{Network: c.in.Network, TxHash: hash, MerchantAddress: c.in.MerchantWallet,
		ExpectedUnits: fmt.Sprint(c.in.ExpectedUnits), PayerAddress: c.in.PayerWallet, Reference: c.in.PaymentReference}
	if !c.in.CreatedAt.IsZero() {
		// Slack for the difference between block clocks and ours.
		req.NotBefore = c.in.CreatedAt.Add(-blockClockSlack)
	}
	return req
}

// release gives the session's hash back after a failed verdict on a
// transaction that is not its customer's payment (res.Foreign): the store
// keeps what it paid the merchant as an exception, the session returns to
// its status before the broadcast, and the hash is refused if submitted
// again. It reports false when the store had nothing to release (the
// session holds another hash, or finished): the verdict then stands.
func (c *checkout) release(ctx workflow.Context, res chain.VerifyResult) (bool, error) {
	e := HistoryEntry{ID: c.nextEntryID(ctx), Source: "chain", Chain: c.in.Network, At: workflow.Now(ctx)}
	// The time the hash held the session is given back with it (their
	// payment may have been refused meanwhile, or mined and waiting to be
	// attached).
	expires := c.heldExpiry(e.At)
	r := activities.SessionRelease{SessionID: c.in.SessionID, EntryID: e.ID, TxHash: c.state.TxHash, Chain: c.in.Network,
		Reason: res.Reason, Message: res.Message, ReceivedUnits: res.ReceivedUnits, Payer: res.Payer, Bound: res.Bound, Refs: res.Refs,
		ExpiresAt: expires, At: e.At}
	got, err := c.setAside(ctx, e, r)
	if err != nil || !got.Released {
		return false, err
	}
	if !got.ExpiresAt.IsZero() {
		expires = got.ExpiresAt // as stored: the store caps what a release gives back
	}
	workflow.GetLogger(ctx).Info("transaction does not pay the session; hash released", "txHash", r.TxHash, "reason", res.Reason, "message", res.Message)
	c.in.ExpiresAt, c.state.ExpiresAt = expires, expires
	c.state.TxHash, c.state.LastCheck, c.state.Message = "", nil, res.Message
	c.broadcast, c.lastSeen = time.Time{}, time.Time{}
	return true, nil
}

// setAside gives the session's hash back in the store (r); when it
// happened, the hash is refused from then on and e, with the status the
// session returned to, joins the history. Released is false when the
// store had nothing to give back (the session holds another hash, or
// finished).
func (c *checkout) setAside(ctx workflow.Context, e HistoryEntry, r activities.SessionRelease) (activities.SessionReleased, error) {
	var got activities.SessionReleased
	if err := c.exec(ctx, false, checkoutActivities.ReleaseTxHash, r).Get(ctx, &got); err != nil || !got.Released {
		return got, err
	}
	c.released = append(c.released, r.TxHash)
	e.Status = got.Status
	c.record(ctx, e)
	return got, nil
}

// replace puts a transaction the service's watcher found paying the
// session in the place of the hash holding it, which the chain has not
// shown: one a stranger submitted and never broadcast (a made-up hash
// holds a session for the whole not-found window), or the customer's own
// that a wallet's speed-up replaced. Without it the customer's plain
// transfer (the QR code's) would wait out that window and become an
// unmatched exception. The offered transaction must be on chain and pay
// the session in full, from its declared wallet or bound to it by its
// reference (chain.VerifyResult.PaysInFull); the held hash is set aside
// (refused if submitted again, as a released one) and the new one is
// confirmed as any broadcast is.
func (c *checkout) replace(ctx workflow.Context, req SubmitRequest) (SubmitResult, error) {
	c.verifying = true
	defer func() { c.verifying = false }()
	// A check of the held hash under way ends first: it may see the hash,
	// or end the session.
	if err := workflow.Await(ctx, func() bool { return !c.checking || c.ending }); err != nil {
		return SubmitResult{}, err
	}
	taken := temporal.NewApplicationError("session already has a transaction hash", ErrTypeSessionNotOpen)
	if c.ending || c.state.Status != models.StatusBroadcast {
		return SubmitResult{}, taken
	}
	held := c.state.TxHash
	// The held hash is looked at again: mined since the last check, it is
	// the session's to judge (the loop does), not to set aside unrecorded.
	var now chain.VerifyResult
	if err := c.exec(ctx, true, checkoutActivities.VerifyTransfer, c.verifyRequest(held)).Get(ctx, &now); err != nil {
		return SubmitResult{}, err
	}
	if now.Seen || now.Verdict != chain.VerdictPending || now.PaidBy != "" {
		return SubmitResult{}, taken
	}
	var res chain.VerifyResult
	if err := c.exec(ctx, true, checkoutActivities.VerifyTransfer, c.verifyRequest(req.TxHash)).Get(ctx, &res); err != nil {
		return SubmitResult{}, err
	}
	if !res.PaysInFull(c.in.PayerWallet, c.in.ExpectedUnits) {
		return SubmitResult{}, temporal.NewApplicationError(fmt.Sprintf("session already has a transaction hash (%s does not pay it in full from its wallet: %s)",
			req.TxHash, res.Message), ErrTypeSessionNotOpen)
	}
	claim := activities.ClaimTxHashInput{SessionID: c.in.SessionID, Network: c.in.Network, TxHash: req.TxHash}
	if err := c.exec(ctx, false, checkoutActivities.ClaimTxHash, claim).Get(ctx, nil); err != nil {
		return SubmitResult{}, err
	}
	at := workflow.Now(ctx)
	back := HistoryEntry{ID: c.nextEntryID(ctx), Source: "chain", Chain: c.in.Network, At: at}
	broadcast := HistoryEntry{ID: c.nextEntryID(ctx), Status: models.StatusBroadcast, Source: "chain", Chain: c.in.Network, At: at}
	r := activities.SessionReplacement{SessionID: c.in.SessionID, Held: held, TxHash: req.TxHash, Chain: c.in.Network,
		ReleaseEntryID: back.ID, BroadcastEntryID: broadcast.ID, ExpiresAt: c.heldExpiry(at), At: at}
	var got activities.ReplacedSession
	if err := c.exec(ctx, false, checkoutActivities.ReplaceTxHash, r).Get(ctx, &got); err != nil {
		return SubmitResult{}, err
	}
	if !got.Replaced {
		return SubmitResult{}, taken
	}
	workflow.GetLogger(ctx).Info("unseen hash replaced by a payment found on chain", "txHash", held, "replacement", req.TxHash)
	c.released = append(c.released, held)
	if !got.ExpiresAt.IsZero() {
		c.in.ExpiresAt, c.state.ExpiresAt = got.ExpiresAt, got.ExpiresAt
	}
	c.state.TxHash, c.state.LastCheck, c.state.Message = req.TxHash, &res, ""
	c.broadcast, c.lastSeen = at, time.Time{}
	back.Status = got.Status
	c.record(ctx, back)
	c.record(ctx, broadcast)
	return SubmitResult{Status: models.StatusBroadcast, TxHash: req.TxHash, SessionID: c.in.SessionID, NextAction: "poll_status"}, nil
}

// heldExpiry is the session's expiry with the time its hash held it since
// the broadcast given back, as of at: the customer has what was left when
// the hash was submitted.
func (c *checkout) heldExpiry(at time.Time) time.Time {
	expires := c.in.ExpiresAt
	if left := c.in.ExpiresAt.Sub(c.broadcast); !c.broadcast.IsZero() && left > 0 && at.Add(left).After(expires) {
		expires = at.Add(left)
	}
	return expires
}

// logVerifyFault logs a chain check that gave no verdict; subject names
// what waits ("session", "refund"). A misconfigured verifier is an error
// for an operator, anything else a transient fault.
func logVerifyFault(ctx workflow.Context, err error, subject string) {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == activities.ErrVerifierMisconfigured {
		workflow.GetLogger(ctx).Error("chain verifier misconfigured; the "+subject+" waits until it is fixed", "err", err)
		return
	}
	workflow.GetLogger(ctx).Warn(subject+" chain check failed; retrying", "err", err)
}
