package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
)

// Names of the refund workflow's handlers.
const (
	// RefundSubmitUpdate attaches the refund transfer's hash
	// (POST /api/refunds/{id}/submit).
	RefundSubmitUpdate = "submit"
	// RefundStatusQuery answers the refund's state.
	RefundStatusQuery = "status"
)

// Application error types of rejected refund updates, mapped by the API.
const (
	ErrTypeRefundExpired = "RefundExpired" // 409: the window passed, the refund failed
	ErrTypeRefundNotOpen = "RefundNotOpen" // 409: a hash was submitted already, or the refund ended
)

// Failure reasons the refund workflow decides itself (the chain's are in
// package chain: INVALID_TRANSFER, TX_REVERTED, TX_NOT_FOUND).
const (
	// ReasonRefundExpired: no transfer was submitted within the window.
	ReasonRefundExpired = models.ReasonRefundExpired
)

// RefundWorkflowID is the workflow id of a refund: refund:<refundId>.
func RefundWorkflowID(refundID string) string { return "refund:" + refundID }

// RefundInput starts (or continues) one refund's workflow.
type RefundInput struct {
	RefundID   string
	MerchantID string
	Network    string
	// SourceWallet is the merchant wallet that received the payment: the
	// refund must come from it.
	SourceWallet string
	// DestinationWallet receives the refund.
	DestinationWallet string
	// Units is the refund in USDC base units.
	Units int64
	// CreatedAt is the refund's creation: older transfers do not pay it.
	CreatedAt time.Time
	// ExpiresAt ends the window for submitting the transfer.
	ExpiresAt time.Time
	// PollInterval is the pause between chain checks (the network's).
	PollInterval time.Duration
	// NotFoundWindow is how long a submitted hash may stay unseen (from the
	// submit, or its last sighting) before the refund fails TX_NOT_FOUND.
	NotFoundWindow time.Duration
	// LateWatch is how long, after that failure, the hash is still watched
	// (DefaultLateWatch when 0): a transfer that lands later makes the
	// refund succeeded, since the money did leave the merchant.
	LateWatch time.Duration
	// Carry holds the state of a run that continued as new (or of a refund
	// resumed from the read model); nil at first.
	Carry *RefundCarry
}

// RefundCarry is the state a confirmation loop hands to its next run.
type RefundCarry struct {
	Status      string
	TxHash      string
	SubmittedAt time.Time
	LastSeenAt  time.Time
	// LateUntil, when set, is the end of the late watch of a refund that
	// failed TX_NOT_FOUND (its next run goes on watching); Message is its
	// failure message.
	LateUntil time.Time
	Message   string `json:",omitempty"`
	// Replaced are the hashes the current one replaced (still checked);
	// Replacements counts the replacements the refund took.
	Replaced     []string `json:",omitempty"`
	Replacements int      `json:",omitempty"`
	// Reason is the failure's reason during a late watch (TX_NOT_FOUND
	// when empty); CurrentFailure, when set, is how TxHash itself failed on
	// chain: only the hashes it replaced are still watched.
	Reason         string `json:",omitempty"`
	CurrentFailure string `json:",omitempty"`
	// Seen: the late watch's last check saw a transfer on chain, not yet
	// decided (its verdict is awaited past the watch's end).
	Seen bool `json:",omitempty"`
}

// RefundState answers the status query.
type RefundState struct {
	RefundID  string
	Status    string
	TxHash    string
	Reason    string
	Message   string
	ExpiresAt time.Time
	// Verifying is true while a submit is being handled.
	Verifying bool
	// FullyRefunded: the transaction's succeeded refunds add up to all of it.
	FullyRefunded bool
	// LastCheck is the latest chain observation of the transfer.
	LastCheck *chain.VerifyResult
	// WatchedUntil is set while a failed refund is still watched (failed
	// TX_NOT_FOUND, or its replacement failed while the transfer it
	// replaced was unseen): that transfer landing before then makes it
	// succeeded.
	WatchedUntil *time.Time `json:",omitempty"`
	// Replaced are the hashes TxHash replaced (a speed-up or re-send),
	// oldest first: still checked, since the first may land after all.
	// Replacements counts the replacements taken (at most maxReplacements).
	Replaced     []string `json:",omitempty"`
	Replacements int      `json:",omitempty"`
}

// RefundSubmitRequest is the submit update's argument.
type RefundSubmitRequest struct {
	TxHash string
	// FirstOnly refuses the hash when the refund has one already (the
	// refund watcher's submit: a transfer it found is never taken as a
	// replacement of another, which could be a twin refund's).
	FirstOnly bool `json:",omitempty"`
}

// RefundSubmitResult is the submit update's answer.
type RefundSubmitResult struct {
	RefundID string
	Status   string
	TxHash   string
}

// RefundResult is the workflow's outcome.
type RefundResult struct {
	Status        string
	Reason        string
	TxHash        string
	FullyRefunded bool
}

var refundActivities *activities.RefundActivities

type refund struct {
	in        RefundInput
	state     RefundState
	verifying bool
	ending    bool
	// closing: the late watch is ending (its outcome being recorded, or
	// continuing as new): no transfer may replace the hash any more.
	closing bool
	// currentFailure is how the current hash failed on chain while the
	// hashes it replaced are still watched (replacedWatchVersion).
	currentFailure string
	// lateSeen: the late watch's last check saw a transfer on chain, not
	// yet decided.
	lateSeen  bool
	submitted workflow.Channel
	effects   workflow.Context
	verify    workflow.Context
	since     time.Time // submit or last sighting: the not-found window runs from it
}

// RefundWorkflow runs one refund: it waits for the merchant's transfer
// (the submit update) until the window ends, then verifies it on chain
// (canonical token, from the merchant wallet that received the payment, to
// the destination, at least the amount, confirmations, reorg-safe) and only
// then marks the refund succeeded and emits payment.refunded. A wrong
// transfer, or none, fails the refund and frees its amount (once the late
// watch of a transfer that may still land is over). Activities
// write the read model before the workflow moves on.
func RefundWorkflow(ctx workflow.Context, in RefundInput) (RefundResult, error) {
	if in.RefundID == "" || in.Units <= 0 || in.SourceWallet == "" || in.DestinationWallet == "" {
		return RefundResult{}, temporal.NewNonRetryableApplicationError("refund id, wallets and a positive amount are required", ErrTypeBadUpdate, nil)
	}
	if in.PollInterval <= 0 {
		in.PollInterval = 5 * time.Second
	}
	if in.NotFoundWindow <= 0 {
		in.NotFoundWindow = time.Hour
	}
	if in.LateWatch <= 0 {
		in.LateWatch = DefaultLateWatch
	}
	r := &refund{in: in, submitted: workflow.NewBufferedChannel(ctx, 1)}
	r.state = RefundState{RefundID: in.RefundID, Status: models.RefundPending, ExpiresAt: in.ExpiresAt}
	if in.Carry != nil {
		r.state.Status, r.state.TxHash, r.state.Replaced = in.Carry.Status, in.Carry.TxHash, in.Carry.Replaced
		r.state.Replacements = in.Carry.Replacements
		r.since = in.Carry.SubmittedAt
		if in.Carry.LastSeenAt.After(r.since) {
			r.since = in.Carry.LastSeenAt
		}
	}
	r.effects, r.verify = refundActivityContexts(ctx)
	if err := r.registerHandlers(ctx); err != nil {
		return RefundResult{}, err
	}
	if in.Carry != nil && !in.Carry.LateUntil.IsZero() {
		r.state.Reason, r.state.Message, r.currentFailure, r.lateSeen = chain.ReasonTxNotFound, in.Carry.Message, in.Carry.CurrentFailure, in.Carry.Seen
		if in.Carry.Reason != "" {
			r.state.Reason = in.Carry.Reason
		}
		return r.watchLate(ctx, r.transfer(), in.Carry.LateUntil, 0)
	}
	if r.state.Status == models.RefundPending {
		if done, res, err := r.waitForTransfer(ctx); done || err != nil {
			return res, err
		}
	}
	return r.confirm(ctx, 0)
}

// refundActivityContexts are the activity options of a refund's
// workflows: effects (store writes, retried until they answer; a claimed
// hash, a bad input or an outcome for another transfer are final) and
// verify (chain checks, given up after five minutes: the loop asks again).
func refundActivityContexts(ctx workflow.Context) (effects, verify workflow.Context) {
	effects = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
			NonRetryableErrorTypes: []string{activities.ErrTypeRefundTxClaimed, activities.ErrTypeInvalidInput, activities.ErrTypeRefundOutcomeMismatch}},
	})
	verify = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: 5 * time.Minute,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
	})
	return effects, verify
}

func (r *refund) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, RefundStatusQuery, func() (RefundState, error) {
		s := r.state
		s.Verifying = r.verifying
		return s, nil
	}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, RefundSubmitUpdate, r.submit,
		workflow.UpdateHandlerOptions{Validator: r.validateSubmit})
}

// validateSubmit refuses, before anything reaches the history, a submit
// without a hash, one after the window, a second one, or one while another
// is being handled.
func (r *refund) validateSubmit(ctx workflow.Context, req RefundSubmitRequest) error {
	switch {
	case req.TxHash == "":
		return temporal.NewApplicationError("txHash is required", ErrTypeBadUpdate)
	case r.verifying:
		return temporal.NewApplicationError("a transaction hash is being attached to this refund", ErrTypeSubmitInProgress)
	case req.FirstOnly && r.state.TxHash != "":
		return temporal.NewApplicationError("the refund already has a transaction hash", ErrTypeRefundNotOpen)
	case r.replaceable(req.TxHash):
		return nil
	case r.state.Status == models.RefundFailed && r.state.Reason == ReasonRefundExpired,
		r.state.Status == models.RefundPending && !workflow.Now(ctx).Before(r.in.ExpiresAt):
		return temporal.NewApplicationError("the refund window has passed; the refund failed and its amount is free for a new refund", ErrTypeRefundExpired)
	case r.state.TxHash != "" && req.TxHash != r.state.TxHash && r.state.Replacements >= maxReplacements &&
		(r.state.Status == models.RefundSubmitted || r.state.WatchedUntil != nil):
		return temporal.NewApplicationError(fmt.Sprintf("this refund's transfer was replaced %d times already; no other hash is taken", maxReplacements),
			ErrTypeRefundNotOpen)
	case r.ending || r.state.Status != models.RefundPending:
		if r.state.TxHash != "" {
			return temporal.NewApplicationError("the refund already has a transaction hash", ErrTypeRefundNotOpen)
		}
		return temporal.NewApplicationError("refund is "+r.state.Status, ErrTypeRefundNotOpen)
	}
	return nil
}

// replaceable says whether hash may replace the refund's submitted one: a
// wallet's speed-up or re-send lands under a new hash, and the first one
// then never does. It may while the submitted transfer is being checked,
// and while a refund failed TX_NOT_FOUND is still watched.
func (r *refund) replaceable(hash string) bool {
	if r.state.TxHash == "" || hash == r.state.TxHash || r.closing || r.state.Replacements >= maxReplacements ||
		slices.Contains(r.state.Replaced, hash) {
		return false
	}
	return (r.state.Status == models.RefundSubmitted && !r.ending) ||
		(r.state.Status == models.RefundFailed && r.state.WatchedUntil != nil)
}

// replacedFailedVersion marks the refund workflow that, when a watched
// refund whose current transfer failed on chain is submitted again, no
// longer adds that transfer to the hashes it checks (version 1): before
// it, the decided transfer was checked again at every pass and named as
// still watched.
const replacedFailedVersion = "refund-replaced-failed"

// maxReplacements bounds the transfers that may replace a refund's first
// one (each is checked at every pass until one lands).
const maxReplacements = 2

// submit records the hash (unique per merchant and network), or the one
// that replaced it, then the confirmation loop takes over (again).
func (r *refund) submit(ctx workflow.Context, req RefundSubmitRequest) (RefundSubmitResult, error) {
	r.verifying = true
	defer func() { r.verifying = false }()
	replace := r.state.Status != models.RefundPending
	record := refundActivities.SubmitRefundTx
	if replace {
		record = refundActivities.ReplaceRefundTx
	}
	sub := activities.RefundSubmission{RefundID: r.in.RefundID, TxHash: req.TxHash, At: workflow.Now(ctx)}
	if err := workflow.ExecuteActivity(r.effects, record, sub).Get(ctx, nil); err != nil {
		return RefundSubmitResult{}, err
	}
	if replace {
		// A watched failure is submitted again (its amount reserved again).
		// The hash replaced goes on being checked, unless it failed on chain
		// already (decided: replacedFailedVersion).
		if r.currentFailure == "" || workflow.GetVersion(ctx, replacedFailedVersion, workflow.DefaultVersion, 1) < 1 {
			r.state.Replaced = append(r.state.Replaced, r.state.TxHash)
		}
		r.state.Reason, r.state.Message, r.state.LastCheck, r.ending, r.currentFailure = "", "", nil, false, ""
		r.state.Replacements++
	}
	r.state.Status, r.state.TxHash, r.since = models.RefundSubmitted, req.TxHash, sub.At
	r.submitted.SendAsync(true)
	return RefundSubmitResult{RefundID: r.in.RefundID, Status: models.RefundSubmitted, TxHash: req.TxHash}, nil
}

// finish ends the refund with an outcome; the store decides its effects
// (and answers the first outcome if one was stored already).
func (r *refund) finish(ctx workflow.Context, o activities.RefundOutcome) (RefundResult, error) {
	r.ending = true
	workflow.SetCurrentDetails(ctx, "Recording the refund's outcome.")
	o.RefundID, o.At = r.in.RefundID, workflow.Now(ctx)
	var stored activities.RefundFinish
	if err := workflow.ExecuteActivity(r.effects, refundActivities.FinishRefund, o).Get(ctx, &stored); err != nil {
		return RefundResult{}, err
	}
	r.state.Status, r.state.Reason, r.state.Message, r.state.FullyRefunded = stored.Status, stored.Reason, stored.Message, stored.FullyRefunded
	// Updates still running would be cut off by the workflow's end.
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	return RefundResult{Status: stored.Status, Reason: stored.Reason, TxHash: r.state.TxHash, FullyRefunded: stored.FullyRefunded}, nil
}

// waitForTransfer waits for a submit or the end of the window. It reports
// done when the refund failed for want of a transfer.
func (r *refund) waitForTransfer(ctx workflow.Context) (bool, RefundResult, error) {
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Pending**: waiting for the merchant's transfer of %s USDC base units to `%s` on %s, until %s.",
		fmt.Sprint(r.in.Units), r.in.DestinationWallet, r.in.Network, r.in.ExpiresAt.UTC().Format(time.RFC3339)))
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	timer := workflow.NewTimer(timerCtx, r.in.ExpiresAt.Sub(workflow.Now(ctx)))
	for {
		expired := false
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(timer, func(workflow.Future) { expired = true })
		sel.AddReceive(r.submitted, func(ch workflow.ReceiveChannel, _ bool) { ch.Receive(ctx, nil) })
		sel.Select(ctx)
		// A submit in flight decides first: the window waits for it.
		if err := workflow.Await(ctx, func() bool { return !r.verifying }); err != nil {
			return true, RefundResult{}, err
		}
		if r.state.Status != models.RefundPending {
			return false, RefundResult{}, nil
		}
		if expired {
			res, err := r.finish(ctx, activities.RefundOutcome{Status: models.RefundFailed, Reason: ReasonRefundExpired,
				Message: fmt.Sprintf("no refund transfer was submitted within %s", r.in.ExpiresAt.Sub(r.in.CreatedAt).Round(time.Second))})
			return true, res, err
		}
		// A refused submit (hash taken) leaves the refund pending.
	}
}

// confirm watches the submitted transfer until the chain gives a verdict
// or the hash stays unseen past the not-found window.
func (r *refund) confirm(ctx workflow.Context, checks int) (RefundResult, error) {
	if r.since.IsZero() {
		r.since = workflow.Now(ctx)
	}
	var t chain.RefundTransfer
	for ; ; checks++ {
		if checks >= maxChecksPerRun {
			_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
			next := r.in
			next.Carry = &RefundCarry{Status: r.state.Status, TxHash: r.state.TxHash, SubmittedAt: r.since, Replaced: r.state.Replaced,
				Replacements: r.state.Replacements}
			return RefundResult{}, workflow.NewContinueAsNewError(ctx, RefundWorkflow, next)
		}
		if t.TxHash != r.state.TxHash {
			t = r.transfer()
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Submitted**: checking transfer `%s` on %s every %s; unseen for %s, the refund fails TX_NOT_FOUND.",
				t.TxHash, r.in.Network, r.in.PollInterval, r.in.NotFoundWindow))
		}
		var res chain.VerifyResult
		err := workflow.ExecuteActivity(r.verify, refundActivities.VerifyRefundTransfer, t).Get(ctx, &res)
		// A transfer that replaced this one while it was checked is checked
		// next: this answer is about the one it replaced.
		_ = workflow.Await(ctx, func() bool { return !r.verifying })
		if t.TxHash != r.state.TxHash {
			continue
		}
		// The hashes this one replaced are checked before its verdict
		// counts: the first transfer may have landed after all (and a
		// re-send of it then reverts).
		replacedSeen := false
		if (err != nil || res.Verdict != chain.VerdictComplete) && len(r.state.Replaced) > 0 {
			adopted, done, seen, n, aerr := r.adoptLanded(ctx)
			checks += n
			if done || aerr != nil {
				return adopted, aerr
			}
			if _ = workflow.Await(ctx, func() bool { return !r.verifying }); t.TxHash != r.state.TxHash {
				continue // replaced while the replaced ones were checked
			}
			replacedSeen = seen
		}
		if err != nil {
			logVerifyFault(ctx, err, "refund")
		} else {
			r.state.LastCheck = &res
			switch res.Verdict {
			case chain.VerdictComplete:
				return r.finish(ctx, activities.RefundOutcome{Status: models.RefundSucceeded, TxHash: r.state.TxHash, Message: res.Message})
			case chain.VerdictFailed:
				if !replacedSeen {
					if r.watchReplaced(ctx) {
						return r.failWatched(ctx, res, checks+1)
					}
					return r.finish(ctx, activities.RefundOutcome{Status: models.RefundFailed, TxHash: r.state.TxHash,
						Reason: res.Reason, Message: res.Message})
				}
				// A replaced transfer is on chain, not yet confirmed: it
				// decides.
			}
			// Seen (again, after a reorg), or a replaced one seen, restarts
			// the not-found window.
			if res.Seen || replacedSeen {
				r.since = workflow.Now(ctx)
			} else if workflow.Now(ctx).Sub(r.since) >= r.in.NotFoundWindow {
				return r.notFound(ctx, t, checks+1)
			}
		}
		if err := workflow.Sleep(ctx, r.in.PollInterval); err != nil {
			return RefundResult{}, err
		}
	}
}

// transfer is what the refund's transfer must be on chain.
func (r *refund) transfer() chain.RefundTransfer {
	t := chain.RefundTransfer{Network: r.in.Network, TxHash: r.state.TxHash, From: r.in.SourceWallet, To: r.in.DestinationWallet,
		Units: fmt.Sprint(r.in.Units)}
	if !r.in.CreatedAt.IsZero() {
		// Slack for the difference between block clocks and ours.
		t.NotBefore = r.in.CreatedAt.Add(-blockClockSlack)
	}
	return t
}

// lateWatchVersion marks the refund workflow that goes on watching a
// transfer not found in time (version 1): before it, the workflow ended
// with the TX_NOT_FOUND failure, and a transfer landing later was never
// recorded while the refundable balance showed its amount again (a
// merchant could refund twice).
const lateWatchVersion = "refund-late-watch"

// DefaultLateWatch is RefundInput.LateWatch's default: a week, longer than
// any node keeps a transaction it could not mine.
const DefaultLateWatch = 7 * 24 * time.Hour

// Pauses of the late watch: the first check comes a minute after the
// failure (sooner under a not-found window shorter than an hour: a
// sixtieth of it, not under the poll interval), each unseen check doubles
// the pause up to an hour (a week is about 175 checks, one run); a
// transfer seen is checked every poll interval until its verdict.
const (
	lateFirstPause = time.Minute
	lateMaxPause   = time.Hour
)

// notFound fails the refund TX_NOT_FOUND, which gives its amount back to
// the transaction, and then keeps watching the transfer (lateWatchVersion)
// on an EVM network; checks is how many the run made so far. (A Solana
// transaction cannot land once its blockhash has expired, a minute or two
// after it was signed: one unseen for the window never will.)
func (r *refund) notFound(ctx workflow.Context, t chain.RefundTransfer, checks int) (RefundResult, error) {
	msg := fmt.Sprintf("refund transaction not found on %s within %s", r.in.Network, r.in.NotFoundWindow)
	late := workflow.GetVersion(ctx, lateWatchVersion, workflow.DefaultVersion, 1) >= 1
	if fam, _ := chain.FamilyOf(r.in.Network); fam != chain.FamilyEVM {
		late = false
	}
	until := workflow.Now(ctx).Add(r.in.LateWatch)
	if late {
		msg += fmt.Sprintf("; it is still watched until %s: if it lands by then, the refund succeeds", until.UTC().Format(time.RFC3339))
	}
	o := activities.RefundOutcome{Status: models.RefundFailed, TxHash: r.state.TxHash, Reason: chain.ReasonTxNotFound, Message: msg}
	if late {
		o.WatchedUntil = &until
	}
	res, err := r.finish(ctx, o)
	if err != nil || !late || res.Status != models.RefundFailed || res.Reason != chain.ReasonTxNotFound {
		return res, err
	}
	return r.watchLate(ctx, t, until, checks)
}

// replacedWatchVersion marks the refund workflow that goes on watching
// the hashes a failed transfer replaced (version 1; version 2 also writes
// the stored message when the watched hash itself lands and fails while
// one it replaced is still watched): before it, a re-send
// that reverted (or paid too little) ended the refund, and the transfer it
// replaced, unseen at that instant, was never recorded when it landed
// later, while the refund's amount was refundable again (a merchant could
// pay twice).
const replacedWatchVersion = "refund-replaced-watch"

// solanaReplacedWatchVersion marks the refund workflow that, on Solana,
// watches the hashes a transfer failed on chain replaced, for the
// not-found window (version 1): before it, the refund ended failed, and a
// replaced transfer still within its blockhash's lifetime (a minute or
// two from its signing) landing after was never recorded, while the
// refund's amount was refundable again.
const solanaReplacedWatchVersion = "refund-solana-replaced-watch"

// watchReplaced says whether, the current transfer having failed on chain,
// the hashes it replaced are still watched: on an EVM network from
// replacedWatchVersion on, on Solana from solanaReplacedWatchVersion on.
func (r *refund) watchReplaced(ctx workflow.Context) bool {
	if len(r.state.Replaced) == 0 {
		return false
	}
	if fam, _ := chain.FamilyOf(r.in.Network); fam != chain.FamilyEVM {
		return workflow.GetVersion(ctx, solanaReplacedWatchVersion, workflow.DefaultVersion, 1) >= 1
	}
	return workflow.GetVersion(ctx, replacedWatchVersion, workflow.DefaultVersion, 2) >= 1
}

// replacedWatch is how long failWatched watches the replaced hashes: the
// late watch on an EVM network (a replaced transaction waits in a node's
// pool for days); the not-found window on Solana, where one cannot land
// once its blockhash has expired, a minute or two after its signing.
func (r *refund) replacedWatch() time.Duration {
	if fam, _ := chain.FamilyOf(r.in.Network); fam != chain.FamilyEVM {
		return r.in.NotFoundWindow
	}
	return r.in.LateWatch
}

// watchGraceVersion marks the refund workflow whose late watch, when its
// last check saw a transfer on chain not yet confirmed, awaits that
// transfer's verdict past the watch's end, for at most the not-found
// window (version 1): before it, the watch ended at its end, and a
// transfer mined in its last minutes and confirmed after was never
// recorded.
const watchGraceVersion = "refund-watch-grace"

// failWatched fails the refund with its transfer's verdict (the amount is
// held while the watch lasts), then watches the hashes that transfer
// replaced: one landing and paying the refund makes it succeeded (the money
// left the merchant).
func (r *refund) failWatched(ctx workflow.Context, res chain.VerifyResult, checks int) (RefundResult, error) {
	until := workflow.Now(ctx).Add(r.replacedWatch())
	msg := res.Message
	if msg == "" {
		msg = "refund transaction failed (" + res.Reason + ")"
	}
	msg += fmt.Sprintf("; the transfer it replaced (%s) is still watched until %s: if it lands and pays the refund, the refund succeeds",
		strings.Join(r.state.Replaced, ", "), until.UTC().Format(time.RFC3339))
	stored, err := r.finish(ctx, activities.RefundOutcome{Status: models.RefundFailed, TxHash: r.state.TxHash, Reason: res.Reason,
		Message: msg, WatchedUntil: &until})
	if err != nil || stored.Status != models.RefundFailed || stored.Reason != res.Reason {
		return stored, err
	}
	r.currentFailure = failureOf(res)
	return r.watchLate(ctx, r.transfer(), until, checks)
}

// failureOf is a failed verdict in a message: its reason, and its
// message when there is one.
func failureOf(res chain.VerifyResult) string {
	if res.Message == "" {
		return res.Reason
	}
	return res.Reason + ": " + res.Message
}

// watchLate watches the transfer of a refund failed TX_NOT_FOUND until
// `until`: when it lands and verifies, the refund becomes succeeded
// (FinishLateRefund); when it lands and does not pay the refund (reverted,
// another transfer), or never lands, the refund stays failed and its
// message says the watch is over (EndRefundWatch). The hashes it replaced
// are checked too (adoptLanded), and go on being watched after it failed
// on chain (currentFailure; or the refund failed so in the first place).
// checks is how many the run made before (one run's history stays
// bounded).
func (r *refund) watchLate(ctx workflow.Context, t chain.RefundTransfer, until time.Time, checks int) (RefundResult, error) {
	r.state.WatchedUntil = &until
	defer func() { r.state.WatchedUntil = nil }()
	for r.submitted.ReceiveAsync(nil) {
		// An earlier submit's wake-up, not a replacement.
	}
	r.watchDetails(ctx, t, until)
	pause := min(lateFirstPause, max(r.in.NotFoundWindow/60, r.in.PollInterval))
	for ; ; checks++ {
		now := workflow.Now(ctx)
		over := !now.Before(until)
		if over && r.lateSeen && now.Before(until.Add(r.in.NotFoundWindow)) &&
			workflow.GetVersion(ctx, watchGraceVersion, workflow.DefaultVersion, 1) >= 1 {
			over = false // a transfer seen at the last check: its verdict first
		}
		if r.currentFailure != "" && (over || len(r.state.Replaced) == 0) {
			r.closing = true
			replaced := "another refund took the transfer it replaced"
			if len(r.state.Replaced) > 0 {
				replaced = fmt.Sprintf("the transfer it replaced (%s) did not pay the refund by the watch's end, %s",
					strings.Join(r.state.Replaced, ", "), until.UTC().Format(time.RFC3339))
			}
			return r.endWatch(ctx, fmt.Sprintf("refund transaction %s failed (%s), and %s", r.state.TxHash, r.currentFailure, replaced))
		}
		if over {
			r.closing = true
			return r.endWatch(ctx, fmt.Sprintf("refund transaction not found on %s within %s, nor in the %s after", r.in.Network,
				r.in.NotFoundWindow, r.in.LateWatch))
		}
		if checks >= maxChecksPerRun {
			r.closing = true
			_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
			if r.state.Status == models.RefundSubmitted {
				return r.rewatch(ctx, checks) // replaced just now
			}
			next := r.in
			next.Carry = &RefundCarry{Status: models.RefundFailed, TxHash: r.state.TxHash, LateUntil: until, Message: r.state.Message,
				Replaced: r.state.Replaced, Replacements: r.state.Replacements, CurrentFailure: r.currentFailure, Seen: r.lateSeen}
			if r.state.Reason != chain.ReasonTxNotFound {
				next.Carry.Reason = r.state.Reason
			}
			return RefundResult{}, workflow.NewContinueAsNewError(ctx, RefundWorkflow, next)
		}
		wait := pause // past the end (a seen transfer awaited): the poll interval
		if now.Before(until) {
			wait = min(pause, until.Sub(now))
		}
		if r.pause(ctx, wait) {
			return r.rewatch(ctx, checks)
		}
		// The current transfer, unless it failed on chain already (then
		// only the ones it replaced are checked).
		res := chain.VerifyResult{Verdict: chain.VerdictFailed}
		if r.currentFailure == "" {
			err := workflow.ExecuteActivity(r.verify, refundActivities.VerifyRefundTransfer, t).Get(ctx, &res)
			if _ = workflow.Await(ctx, func() bool { return !r.verifying }); r.state.Status == models.RefundSubmitted {
				return r.rewatch(ctx, checks) // replaced while the old one was checked
			}
			if err != nil {
				logVerifyFault(ctx, err, "refund")
				continue
			}
			r.state.LastCheck = &res
		}
		replacedSeen := false
		if res.Verdict != chain.VerdictComplete && len(r.state.Replaced) > 0 {
			adopted, done, seen, n, aerr := r.adoptLanded(ctx)
			checks += n
			if done || aerr != nil {
				return adopted, aerr
			}
			if _ = workflow.Await(ctx, func() bool { return !r.verifying }); r.state.Status == models.RefundSubmitted {
				return r.rewatch(ctx, checks) // replaced while the replaced ones were checked
			}
			replacedSeen = seen
		}
		if res.Verdict == chain.VerdictFailed && replacedSeen {
			pause, r.lateSeen = r.in.PollInterval, true // a replaced transfer is on chain: it decides
			continue
		}
		switch {
		case res.Verdict == chain.VerdictComplete:
			r.closing = true
			return r.finishLate(ctx)
		case res.Verdict == chain.VerdictFailed && r.currentFailure != "":
			pause, r.lateSeen = min(2*pause, lateMaxPause), false // the replaced ones, unseen
		case res.Verdict == chain.VerdictFailed && r.watchReplaced(ctx):
			// It landed and failed; the ones it replaced may still land.
			r.currentFailure, r.lateSeen = failureOf(res), false
			r.watchDetails(ctx, t, until)
			if workflow.GetVersion(ctx, replacedWatchVersion, workflow.DefaultVersion, 2) >= 2 {
				// The stored message says so (it said this hash was watched).
				msg := fmt.Sprintf("refund transaction %s landed after the refund had failed, and does not pay it (%s); the transfer it replaced (%s) is still watched until %s: if it lands and pays the refund, the refund succeeds",
					r.state.TxHash, r.currentFailure, strings.Join(r.state.Replaced, ", "), until.UTC().Format(time.RFC3339))
				e := activities.RefundWatchEnd{RefundID: r.in.RefundID, TxHash: r.state.TxHash, Message: msg}
				if err := workflow.ExecuteActivity(r.effects, refundActivities.NoteRefundWatch, e).Get(ctx, nil); err != nil {
					return RefundResult{}, err
				}
				r.state.Message = msg
			}
		case res.Verdict == chain.VerdictFailed:
			r.closing = true
			return r.endWatch(ctx, fmt.Sprintf("refund transaction landed after the refund had failed, and does not pay it (%s): %s",
				res.Reason, res.Message))
		case res.Seen || replacedSeen:
			pause, r.lateSeen = r.in.PollInterval, true
		default:
			pause, r.lateSeen = min(2*pause, lateMaxPause), false
		}
	}
}

// watchDetails tells the Web UI what the late watch checks.
func (r *refund) watchDetails(ctx workflow.Context, t chain.RefundTransfer, until time.Time) {
	if r.currentFailure != "" {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Failed %s, still watched**: transfer `%s` failed on chain (%s); the transfer it replaced (`%s`) on %s is checked until %s; if it lands and pays the refund, the refund becomes succeeded (its amount stays reserved meanwhile, and is refundable again when the watch ends without it).",
			r.state.Reason, t.TxHash, r.currentFailure, strings.Join(r.state.Replaced, "`, `"), r.in.Network, until.UTC().Format(time.RFC3339)))
		return
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Failed TX_NOT_FOUND, still watched**: transfer `%s` on %s is checked until %s; if it lands and pays the refund, the refund becomes succeeded (its amount stays reserved meanwhile, and is refundable again when the watch ends without it).",
		t.TxHash, r.in.Network, until.UTC().Format(time.RFC3339)))
}

// adoptLanded checks the hashes the current one replaced: when one of
// them paid the refund after all (the replacement never landed), the
// refund takes it back and succeeds with it (done; AdoptRefundTx). It also
// says whether one is on chain, not yet decided (seen), and how many
// checks it made. A replaced hash that another refund has taken since is
// no longer this one's to adopt.
func (r *refund) adoptLanded(ctx workflow.Context) (res RefundResult, done, seen bool, checks int, err error) {
	for _, h := range r.state.Replaced {
		t := r.transfer()
		t.TxHash = h
		var v chain.VerifyResult
		checks++
		if err := workflow.ExecuteActivity(r.verify, refundActivities.VerifyRefundTransfer, t).Get(ctx, &v); err != nil {
			logVerifyFault(ctx, err, "refund")
			continue
		}
		if v.Verdict != chain.VerdictComplete {
			seen = seen || (v.Seen && v.Verdict == chain.VerdictPending)
			continue
		}
		r.closing = true
		_ = workflow.Await(ctx, func() bool { return !r.verifying })
		o := activities.RefundOutcome{RefundID: r.in.RefundID, Status: models.RefundSucceeded, TxHash: h, Message: v.Message, At: workflow.Now(ctx)}
		var stored activities.RefundFinish
		if err := workflow.ExecuteActivity(r.effects, refundActivities.AdoptRefundTx, o).Get(ctx, &stored); err != nil {
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || appErr.Type() != activities.ErrTypeRefundTxClaimed {
				return RefundResult{}, false, seen, checks, err
			}
			workflow.GetLogger(ctx).Warn("a replaced refund transfer landed, but another refund holds its hash", "refundId", r.in.RefundID,
				"txHash", h)
			r.state.Replaced = slices.DeleteFunc(r.state.Replaced, func(x string) bool { return x == h })
			r.closing = false
			return RefundResult{}, false, seen, checks, nil
		}
		r.ending = true
		r.state.TxHash, r.state.WatchedUntil = h, nil
		r.state.Status, r.state.Reason, r.state.Message, r.state.FullyRefunded = stored.Status, stored.Reason, stored.Message, stored.FullyRefunded
		_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
		return RefundResult{Status: stored.Status, Reason: stored.Reason, TxHash: h, FullyRefunded: stored.FullyRefunded}, true, seen, checks, nil
	}
	return RefundResult{}, false, seen, checks, nil
}

// rewatch goes back from the late watch to checking the transfer that
// replaced the watched one (the refund is submitted again).
func (r *refund) rewatch(ctx workflow.Context, checks int) (RefundResult, error) {
	r.state.WatchedUntil, r.closing = nil, false
	return r.confirm(ctx, checks)
}

// pause waits d, or until a transfer replaces the watched one: it reports
// whether one did (the refund is submitted again).
func (r *refund) pause(ctx workflow.Context, d time.Duration) bool {
	timerCtx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	timer := workflow.NewTimer(timerCtx, d)
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(timer, func(workflow.Future) {})
	sel.AddReceive(r.submitted, func(ch workflow.ReceiveChannel, _ bool) { ch.Receive(ctx, nil) })
	sel.Select(ctx)
	_ = workflow.Await(ctx, func() bool { return !r.verifying })
	return r.state.Status == models.RefundSubmitted
}

// endWatch ends the late watch with the refund failed: its message says
// why, and no longer that it is watched.
func (r *refund) endWatch(ctx workflow.Context, msg string) (RefundResult, error) {
	e := activities.RefundWatchEnd{RefundID: r.in.RefundID, TxHash: r.state.TxHash, Message: msg}
	if err := workflow.ExecuteActivity(r.effects, refundActivities.EndRefundWatch, e).Get(ctx, nil); err != nil {
		return RefundResult{}, err
	}
	r.state.Message = msg
	return RefundResult{Status: models.RefundFailed, Reason: r.state.Reason, TxHash: r.state.TxHash}, nil
}

// finishLate records the late landing: the refund becomes succeeded.
func (r *refund) finishLate(ctx workflow.Context) (RefundResult, error) {
	var stored activities.RefundFinish
	o := activities.RefundOutcome{RefundID: r.in.RefundID, Status: models.RefundSucceeded, TxHash: r.state.TxHash, At: workflow.Now(ctx)}
	if err := workflow.ExecuteActivity(r.effects, refundActivities.FinishLateRefund, o).Get(ctx, &stored); err != nil {
		return RefundResult{}, err
	}
	r.state.Status, r.state.Reason, r.state.Message, r.state.FullyRefunded = stored.Status, stored.Reason, stored.Message, stored.FullyRefunded
	return RefundResult{Status: stored.Status, Reason: stored.Reason, TxHash: r.state.TxHash, FullyRefunded: stored.FullyRefunded}, nil
}
