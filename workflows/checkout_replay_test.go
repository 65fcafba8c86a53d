package workflows

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/paygate/paygate/activities"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/temporaldev"
)

// The bound session's transfer and payment reference (an EIP-3009 nonce);
// the reference of a session whose submitted transfer reverted because a
// relayed copy of its authorization paid first, and that copy's hash.
const (
	checkoutHash3           = "0x" + "ab00000000000000000000000000000000000000000000000000000000000003"
	checkoutReference       = "0x" + "5e00000000000000000000000000000000000000000000000000000000000001"
	checkoutReferenceCopied = "0x" + "5e00000000000000000000000000000000000000000000000000000000000002"
	checkoutHashReverted    = "0x" + "ab00000000000000000000000000000000000000000000000000000000000005"
	checkoutHashCopy        = "0x" + "ab00000000000000000000000000000000000000000000000000000000000004"
	// A session whose submitted transfer the chain found unbound (a plain
	// transfer, with its block time) and the store contested.
	checkoutReferencePlain = "0x" + "5e00000000000000000000000000000000000000000000000000000000000003"
	checkoutHashPlain      = "0x" + "ab00000000000000000000000000000000000000000000000000000000000006"
	// A session declaring a wallet, submitted a stranger's transfer first
	// (released), then its customer's.
	checkoutReferenceForeign = "0x" + "5e00000000000000000000000000000000000000000000000000000000000004"
	checkoutHashForeign      = "0x" + "ab00000000000000000000000000000000000000000000000000000000000007"
	checkoutHashCustomer     = "0x" + "ab00000000000000000000000000000000000000000000000000000000000008"
	// A session held by a hash the chain never shows, whose customer's
	// plain transfer the watcher offers in its place.
	checkoutReferenceReplaced = "0x" + "5e00000000000000000000000000000000000000000000000000000000000005"
	checkoutHashUnseen        = "0x" + "ab00000000000000000000000000000000000000000000000000000000000009"
	checkoutHashQR            = "0x" + "ab0000000000000000000000000000000000000000000000000000000000000a"
)

// checkoutHistoryFiles are the saved checkout histories, recorded on a real
// dev server by TestCheckoutRecordHistories.
var checkoutHistoryFiles = []string{
	"testdata/checkout_completed.json",
	"testdata/checkout_expired.json",
	"testdata/checkout_cancelled.json",
	"testdata/checkout_link_deleted.json",
	// Recorded after the payment binding: a session with a payment
	// reference whose transfer the watcher attached (source "chain") and
	// the chain found bound to it.
	"testdata/checkout_bound_by_chain.json",
}

// checkoutLocalHistoryFiles are the same five sessions recorded in the
// local shape (ShapeLocalEffects: local activities, derived entry ids), and
// a sixth and a seventh recorded later.
var checkoutLocalHistoryFiles = []string{
	"testdata/checkout_local_completed.json",
	"testdata/checkout_local_expired.json",
	"testdata/checkout_local_cancelled.json",
	"testdata/checkout_local_link_deleted.json",
	"testdata/checkout_local_bound_by_chain.json",
	// Recorded with the verifier's PaidBy (local shape only, the shape new
	// sessions run): the submitted transfer reverted, a relayed copy of
	// the payer's authorization paid, and the session completed with it.
	"testdata/checkout_local_paid_by_copy.json",
	// Recorded with the outcome's block time (the eighteenth part of issue
	// 16): the submitted transfer was complete but unbound, and the store
	// contested it (another session declaring the payer's wallet was open
	// when it was mined), so the session failed TX_CONTESTED.
	"testdata/checkout_local_contested.json",
	// Recorded with the release of a stranger's transaction (releaseVersion):
	// the session declares a wallet, a transfer of one unit from another
	// wallet is submitted and released, the same hash is refused, and the
	// customer's bound payment completes the session.
	"testdata/checkout_local_released.json",
	// Recorded with the replacement of an unseen hash (replace): the
	// session declares a wallet, a hash the chain never shows is
	// submitted, the watcher offers the customer's plain transfer, which
	// takes its place and completes the session.
	"testdata/checkout_local_replaced.json",
}

// TestCheckoutReplay replays every saved history against the current
// workflow code: a change that is not deterministic fails here.
func TestCheckoutReplay(t *testing.T) {
	replayHistories(t, append(append([]string(nil), checkoutHistoryFiles...), checkoutLocalHistoryFiles...), CheckoutSessionWorkflow)
}

// checkoutWaitFirst is CheckoutSessionWorkflow with one change that breaks
// determinism: it pauses before anything else.
func checkoutWaitFirst(ctx workflow.Context, in CheckoutInput) (CheckoutResult, error) {
	if err := workflow.Sleep(ctx, 10*time.Millisecond); err != nil {
		return CheckoutResult{}, err
	}
	return CheckoutSessionWorkflow(ctx, in)
}

// TestCheckoutReplayDetectsNondeterminism proves the replay test has teeth:
// a changed workflow fails against every saved history.
func TestCheckoutReplayDetectsNondeterminism(t *testing.T) {
	replayMustDiverge(t, append(append([]string(nil), checkoutHistoryFiles...), checkoutLocalHistoryFiles...), "CheckoutSessionWorkflow", checkoutWaitFirst)
}

// TestCheckoutRecordHistories records the histories replayed above on a real
// Temporal server, with the real activities over the in-memory fakes. It runs
// only when CHECKOUT_RECORD_TEMPORAL is set: to 1 for a throwaway dev server
// (temporaldev.StartForTest), or to the host:port of a running one. A saved
// history is the record of the code that wrote it, so an existing file is
// kept; delete it to record it again:
//
//	CHECKOUT_RECORD_TEMPORAL=1 go test ./workflows/ -run TestCheckoutRecordHistories -v
func TestCheckoutRecordHistories(t *testing.T) {
	addr := os.Getenv("CHECKOUT_RECORD_TEMPORAL")
	if addr == "" {
		t.Skip("set CHECKOUT_RECORD_TEMPORAL=1 (or host:port of a dev server) to re-record the checkout replay histories")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	namespace := "default"
	if addr == "1" {
		srv := temporaldev.StartForTest(t)
		addr, namespace = srv.Address(), srv.Namespace()
	}
	c, err := client.Dial(client.Options{HostPort: addr, Namespace: namespace, Logger: webhookTestLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := temporaldev.RegisterSearchAttributes(ctx, c, namespace, temporaldev.PaygateSearchAttributes()); err != nil {
		t.Fatal(err)
	}

	for _, set := range []struct {
		shape int
		files []string
	}{{ShapeRemoteEffects, checkoutHistoryFiles}, {ShapeLocalEffects, checkoutLocalHistoryFiles}} {
		recordCheckoutHistories(t, ctx, c, set.shape, set.files)
	}
}

// recordCheckoutHistories runs the recorded sessions in one shape (the
// sixth and seventh only where files name them) and saves their histories to files
// (keeping those that exist).
func recordCheckoutHistories(t *testing.T, ctx context.Context, c client.Client, shape int, files []string) {
	checkoutHistoryFiles := files
	store := newCheckoutFakeStore(time.Now)
	rec := &checkoutRecorder{t: t, ctx: ctx, c: c, store: store, shape: shape,
		queue: fmt.Sprintf("checkout-record-%d-%s", shape, time.Now().UTC().Format("150405.000"))}
	verifier := &checkoutFakeVerifier{now: time.Now, answer: rec.answer}
	w := worker.New(c, rec.queue, worker.Options{})
	w.RegisterWorkflow(CheckoutSessionWorkflow)
	w.RegisterActivity(&activities.CheckoutActivities{Store: store, Verifier: verifier, Dispatcher: &checkoutFakeDispatcher{}})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// 1. Completed: wallet progress, a hash claimed elsewhere (the update
	// fails), the real hash, a refused second submit, a cancel after the
	// broadcast (ignored), an RPC error, then pending, seen, complete.
	store.claims[checkoutNetwork+"/"+checkoutHash2] = "cs_other"
	run := rec.start("cs_replay_completed", time.Hour)
	rec.wallet(run, models.StatusWalletConnecting)
	rec.wallet(run, models.StatusWalletReady)
	if _, err := rec.submit(run, checkoutHash2); !checkoutIsType(err, activities.ErrTypeTxHashClaimed) {
		t.Fatalf("submit of a claimed hash: %v", err)
	}
	if res, err := rec.submit(run, checkoutHash); err != nil || res.Status != models.StatusBroadcast {
		t.Fatalf("submit: %+v %v", res, err)
	}
	if _, err := rec.submit(run, checkoutHash); !checkoutIsType(err, ErrTypeSessionNotOpen) {
		t.Fatalf("second submit: %v", err)
	}
	rec.signal(run, CancelByCustomer)
	rec.release.Store(true)
	rec.finish(run, models.StatusComplete, checkoutHistoryFiles[0])

	// 2. Expired: a wallet report, then the expiry timer 2 s after the start.
	run = rec.start("cs_replay_expired", 2*time.Second)
	rec.wallet(run, models.StatusWalletConnecting)
	rec.finish(run, models.StatusExpired, checkoutHistoryFiles[1])

	// 3. Cancelled by the customer after a wallet report.
	run = rec.start("cs_replay_cancelled", time.Hour)
	rec.wallet(run, models.StatusWalletReady)
	rec.signal(run, CancelByCustomer)
	rec.finish(run, models.StatusCancelled, checkoutHistoryFiles[2])

	// 4. The link is deleted before any broadcast.
	run = rec.start("cs_replay_link_deleted", time.Hour)
	rec.signal(run, CancelByLinkDeleted)
	rec.finish(run, models.StatusFailed, checkoutHistoryFiles[3])

	// 5. A bound session: the watcher attaches the transfer that carries the
	// session's payment reference, and the chain confirms it bound.
	run = rec.startBound("cs_replay_bound_by_chain", checkoutReference)
	var res SubmitResult
	if err := rec.update(run, CheckoutSubmitUpdate, SubmitRequest{TxHash: checkoutHash3, Source: "chain"}, &res); err != nil || res.Status != models.StatusBroadcast {
		t.Fatalf("attach by the watcher: %+v %v", res, err)
	}
	rec.finish(run, models.StatusComplete, checkoutHistoryFiles[4])

	// 6. (Local shape.) The customer's transfer reverted: a copy of the
	// authorization, relayed by someone else, was mined first and paid.
	if len(files) > 5 {
		run = rec.startBound("cs_replay_paid_by_copy", checkoutReferenceCopied)
		if res, err := rec.submit(run, checkoutHashReverted); err != nil || res.Status != models.StatusBroadcast {
			t.Fatalf("submit: %+v %v", res, err)
		}
		rec.finish(run, models.StatusComplete, files[5])
		var out CheckoutResult
		if err := run.Get(ctx, &out); err != nil || out.TxHash != checkoutHashCopy {
			t.Fatalf("paid by the copy: %+v %v", out, err)
		}
	}

	// 7. (Local shape.) A plain transfer, complete but unbound: the store
	// contests it and the session fails with the stored outcome.
	if len(files) > 6 {
		run = rec.startBound("cs_replay_contested", checkoutReferencePlain)
		store.mu.Lock()
		store.contested["cs_replay_contested"] = true
		store.mu.Unlock()
		if res, err := rec.submit(run, checkoutHashPlain); err != nil || res.Status != models.StatusBroadcast {
			t.Fatalf("submit: %+v %v", res, err)
		}
		rec.finish(run, models.StatusFailed, files[6])
	}

	// 8. (Local shape.) A stranger's transaction released, then the
	// customer's payment.
	if len(files) > 7 {
		in := rec.boundInput("cs_replay_released", checkoutReferenceForeign)
		in.PayerWallet = checkoutPayer
		run = rec.startInput(in)
		rec.wallet(run, models.StatusWalletReady)
		if res, err := rec.submit(run, checkoutHashForeign); err != nil || res.Status != models.StatusBroadcast {
			t.Fatalf("submit: %+v %v", res, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := rec.submit(run, checkoutHashForeign)
			if checkoutIsType(err, ErrTypeTxHashReleased) {
				break // released, and refused again
			}
			if time.Now().After(deadline) {
				t.Fatalf("the stranger's hash was not released: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if res, err := rec.submit(run, checkoutHashCustomer); err != nil || res.Status != models.StatusBroadcast {
			t.Fatalf("submit after the release: %+v %v", res, err)
		}
		rec.finish(run, models.StatusComplete, files[7])
	}

	// 9. (Local shape.) A hash the chain never shows, then the customer's
	// plain transfer offered by the watcher in its place.
	if len(files) > 8 {
		in := rec.boundInput("cs_replay_replaced", checkoutReferenceReplaced)
		in.PayerWallet = checkoutPayer
		run = rec.startInput(in)
		if res, err := rec.submit(run, checkoutHashUnseen); err != nil || res.Status != models.StatusBroadcast {
			t.Fatalf("submit: %+v %v", res, err)
		}
		time.Sleep(300 * time.Millisecond) // a few checks of the unseen hash
		var res SubmitResult
		if err := rec.update(run, CheckoutSubmitUpdate, SubmitRequest{TxHash: checkoutHashQR, Source: "chain"}, &res); err != nil ||
			res.TxHash != checkoutHashQR {
			t.Fatalf("offer: %+v %v", res, err)
		}
		if _, err := rec.submit(run, checkoutHashUnseen); !checkoutIsType(err, ErrTypeTxHashReleased) {
			t.Fatalf("the hash set aside submitted again: %v", err)
		}
		rec.finish(run, models.StatusComplete, files[8])
	}
	store.check(t)
}

// checkoutRecorder drives workflows on a real server for
// TestCheckoutRecordHistories.
type checkoutRecorder struct {
	t       *testing.T
	ctx     context.Context
	c       client.Client
	store   *checkoutFakeStore
	queue   string
	shape   int
	release atomic.Bool  // the chain may confirm the completed session's transfer
	seen    atomic.Int32 // checks answered since the release
	// qrChecks counts the checks of the replaced session's offered transfer.
	qrChecks atomic.Int32
	updates  atomic.Int32
}

// answer is the recorder's chain: one RPC error, then unseen until
// released, then seen once, then complete; a request with a reference is
// answered complete and bound at once.
func (r *checkoutRecorder) answer(n int, req chain.VerifyRequest) (chain.VerifyResult, error) {
	if req.Reference == checkoutReferencePlain {
		res := checkoutComplete(checkoutUnits).res
		res.Payer, res.BlockTime = "0x8617E340B3D01FA5F11F306F4090FD50E238070D", time.Now().UTC().Truncate(time.Second)
		return res, nil
	}
	if req.Reference == checkoutReferenceForeign && req.TxHash == checkoutHashForeign {
		res := checkoutFailedStep(chain.ReasonInvalidTransfer, 1, "merchant received 1 units, expected 32610000").res
		res.Payer, res.Foreign = "0x3333333333333333333333333333333333333333", true
		return res, nil
	}
	if req.Reference == checkoutReferenceReplaced {
		switch {
		case req.TxHash == checkoutHashUnseen:
			return checkoutPending(false).res, nil
		case r.qrChecks.Add(1) == 1:
			return checkoutPending(true).res, nil // mined: the offer's check
		}
		return checkoutComplete(checkoutUnits).res, nil
	}
	if req.Reference != "" {
		res := checkoutComplete(checkoutUnits).res
		res.Bound = true
		if req.Reference == checkoutReferenceCopied {
			res.PaidBy = checkoutHashCopy
		}
		return res, nil
	}
	switch {
	case n == 1:
		s := checkoutRPCError()
		return s.res, s.err
	case !r.release.Load():
		return checkoutPending(false).res, nil
	}
	if r.seen.Add(1) == 1 {
		return checkoutPending(true).res, nil
	}
	return checkoutComplete(checkoutUnits).res, nil
}

// start starts a session that expires after ttl, polled every 100 ms.
func (r *checkoutRecorder) start(sessionID string, ttl time.Duration) client.WorkflowRun {
	r.t.Helper()
	return r.startInput(CheckoutInput{SessionID: sessionID, MerchantID: "mer_replay", PaymentLinkID: checkoutLinkID, Network: checkoutNetwork,
		MerchantWallet: checkoutWallet, ExpectedUnits: checkoutUnits, ExpiresAt: time.Now().Add(ttl),
		PollInterval: 100 * time.Millisecond, NotFoundWindow: time.Hour, Shape: r.shape})
}

// startBound starts a session of an hour bound to a payment reference.
func (r *checkoutRecorder) startBound(sessionID, reference string) client.WorkflowRun {
	r.t.Helper()
	return r.startInput(r.boundInput(sessionID, reference))
}

// boundInput is the input of a session of an hour bound to a reference.
func (r *checkoutRecorder) boundInput(sessionID, reference string) CheckoutInput {
	return CheckoutInput{SessionID: sessionID, MerchantID: "mer_replay", PaymentLinkID: checkoutLinkID, Network: checkoutNetwork,
		MerchantWallet: checkoutWallet, ExpectedUnits: checkoutUnits, ExpiresAt: time.Now().Add(time.Hour),
		PollInterval: 100 * time.Millisecond, NotFoundWindow: time.Hour, PaymentReference: reference, Shape: r.shape}
}

func (r *checkoutRecorder) startInput(in CheckoutInput) client.WorkflowRun {
	r.t.Helper()
	run, err := r.c.ExecuteWorkflow(r.ctx, client.StartWorkflowOptions{
		ID: CheckoutWorkflowID(in.SessionID) + "-" + r.queue, TaskQueue: r.queue,
		TypedSearchAttributes: temporal.NewSearchAttributes(CheckoutStatusAttr.ValueSet(models.StatusCreated),
			MerchantIDAttr.ValueSet(in.MerchantID), NetworkAttr.ValueSet(in.Network), PaymentLinkIDAttr.ValueSet(in.PaymentLinkID)),
		Memo: map[string]any{"amountUnits": fmt.Sprint(in.ExpectedUnits), "network": in.Network, "paymentLinkId": in.PaymentLinkID},
	}, CheckoutSessionWorkflow, in)
	if err != nil {
		r.t.Fatal(err)
	}
	return run
}

func (r *checkoutRecorder) update(run client.WorkflowRun, name string, arg, out any) error {
	h, err := r.c.UpdateWorkflow(r.ctx, client.UpdateWorkflowOptions{
		UpdateID: fmt.Sprintf("%s-%d", name, r.updates.Add(1)), WorkflowID: run.GetID(), RunID: run.GetRunID(),
		UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return err
	}
	return h.Get(r.ctx, out)
}

func (r *checkoutRecorder) submit(run client.WorkflowRun, hash string) (SubmitResult, error) {
	var res SubmitResult
	err := r.update(run, CheckoutSubmitUpdate, SubmitRequest{TxHash: hash}, &res)
	return res, err
}

func (r *checkoutRecorder) wallet(run client.WorkflowRun, status string) {
	r.t.Helper()
	var st CheckoutState
	if err := r.update(run, CheckoutWalletUpdate, WalletRequest{Status: status}, &st); err != nil || st.Status != status {
		r.t.Fatalf("wallet %s: %+v %v", status, st, err)
	}
}

func (r *checkoutRecorder) signal(run client.WorkflowRun, source string) {
	r.t.Helper()
	if err := r.c.SignalWorkflow(r.ctx, run.GetID(), run.GetRunID(), CheckoutCancelSignal, CancelRequest{Source: source}); err != nil {
		r.t.Fatal(err)
	}
}

// finish waits for the outcome, checks it and saves the history.
func (r *checkoutRecorder) finish(run client.WorkflowRun, status, file string) {
	r.t.Helper()
	var res CheckoutResult
	if err := run.Get(r.ctx, &res); err != nil || res.Status != status {
		r.t.Fatalf("%s: result %+v %v, want %s", run.GetID(), res, err, status)
	}
	// The status query of a closed workflow still answers.
	v, err := r.c.QueryWorkflow(r.ctx, run.GetID(), run.GetRunID(), CheckoutStatusQuery)
	var st CheckoutState
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil || st.Status != status {
		r.t.Fatalf("%s: status %+v %v", run.GetID(), st, err)
	}
	if _, err := os.Stat(file); err == nil {
		r.t.Logf("%s: kept the saved %s", run.GetID(), file)
		return
	}
	webhookSaveHistory(r.ctx, r.t, r.c, run.GetID(), run.GetRunID(), file)
}

// checkoutIsType reports whether err carries an application error of type typ.
func checkoutIsType(err error, typ string) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == typ
}
