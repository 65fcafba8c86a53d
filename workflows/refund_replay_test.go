package workflows

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// refundHistoryFiles are the saved refund histories, recorded on a real dev
// server by TestRefundRecordHistories.
var refundHistoryFiles = []string{
	"testdata/refund_succeeded.json",
	"testdata/refund_expired.json",
	"testdata/refund_wrong_sender.json",
	"testdata/refund_not_found.json",
	"testdata/refund_late_succeeded.json",
	"testdata/refund_replaced.json",
	"testdata/refund_replaced_watch.json",
	"testdata/refund_watched_resend_reverted.json",
	"testdata/refund_solana_replaced_watch.json",
	"testdata/refund_replaced_failed.json",
	"testdata/refund_found_on_chain.json",
}

// TestRefundReplay replays every saved refund history against the current
// workflow code: a change that is not deterministic fails here.
func TestRefundReplay(t *testing.T) {
	replayHistories(t, refundHistoryFiles, RefundWorkflow)
}

// refundLateHistoryFiles are the saved histories of
// RefundLateTransferWorkflow, recorded by TestRefundRecordHistories.
var refundLateHistoryFiles = []string{
	"testdata/refund_late_transfer.json",
}

// TestRefundLateReplay replays them against the current code.
func TestRefundLateReplay(t *testing.T) {
	replayHistories(t, refundLateHistoryFiles, RefundLateTransferWorkflow)
}

// TestRefundLateReplayDetectsNondeterminism: a late recording that records
// a side effect first no longer replays them.
func TestRefundLateReplayDetectsNondeterminism(t *testing.T) {
	replayMustDiverge(t, refundLateHistoryFiles, "RefundLateTransferWorkflow", func(ctx workflow.Context, in RefundLateInput) (RefundLateResult, error) {
		var v int
		if err := workflow.SideEffect(ctx, func(workflow.Context) any { return 1 }).Get(&v); err != nil {
			return RefundLateResult{}, err
		}
		return RefundLateTransferWorkflow(ctx, in)
	})
}

// refundWaitFirst is RefundWorkflow with one change that breaks
// determinism: it records a side effect before anything else. (A pause
// would not do: a timer matches the window's timer, which is the first
// command of a refund that expires.)
func refundWaitFirst(ctx workflow.Context, in RefundInput) (RefundResult, error) {
	var v int
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return 1 }).Get(&v); err != nil {
		return RefundResult{}, err
	}
	return RefundWorkflow(ctx, in)
}

// TestRefundReplayDetectsNondeterminism proves the replay test has teeth.
func TestRefundReplayDetectsNondeterminism(t *testing.T) {
	replayMustDiverge(t, refundHistoryFiles, "RefundWorkflow", refundWaitFirst)
}

// TestRefundRecordHistories records the histories replayed above on a real
// Temporal server, with the real activities over the in-memory fakes. It
// runs only when REFUND_RECORD_TEMPORAL is set: to 1 for a throwaway dev
// server (temporaldev.StartForTest), or to the host:port of a running one:
//
//	REFUND_RECORD_TEMPORAL=1 go test ./workflows/ -run TestRefundRecordHistories -v
func TestRefundRecordHistories(t *testing.T) {
	addr := os.Getenv("REFUND_RECORD_TEMPORAL")
	if addr == "" {
		t.Skip("set REFUND_RECORD_TEMPORAL=1 (or host:port of a dev server) to re-record the refund replay histories")
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
	store := newRefundFakeStore()
	fakeChain := newRefundFakeChain(time.Now)
	queue := "refund-record-" + time.Now().UTC().Format("150405.000")
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflow(RefundWorkflow)
	w.RegisterWorkflow(RefundLateTransferWorkflow)
	w.RegisterActivity(&activities.RefundActivities{Store: store, Verifier: fakeChain, Dispatcher: &checkoutFakeDispatcher{}})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	updates := 0
	notFoundWindow, lateWatch := time.Hour, time.Duration(0)
	network, source, destination, units := refundNetwork, refundMerchant, refundPayer, int64(5_000_000)
	start := func(id string, window time.Duration) client.WorkflowRun {
		t.Helper()
		store.create(t, id, units)
		now := time.Now()
		in := RefundInput{RefundID: id, MerchantID: "mer_replay", Network: network, SourceWallet: source,
			DestinationWallet: destination, Units: units, CreatedAt: now, ExpiresAt: now.Add(window),
			PollInterval: 100 * time.Millisecond, NotFoundWindow: notFoundWindow, LateWatch: lateWatch}
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: RefundWorkflowID(id) + "-" + queue, TaskQueue: queue,
			TypedSearchAttributes: temporal.NewSearchAttributes(MerchantIDAttr.ValueSet(in.MerchantID), NetworkAttr.ValueSet(in.Network)),
			Memo:                  map[string]any{"amountUnits": fmt.Sprint(in.Units), "network": in.Network}}, RefundWorkflow, in)
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	submitRequest := func(run client.WorkflowRun, req RefundSubmitRequest) error {
		updates++
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{UpdateID: fmt.Sprintf("submit-%d", updates), WorkflowID: run.GetID(),
			RunID: run.GetRunID(), UpdateName: RefundSubmitUpdate, Args: []any{req},
			WaitForStage: client.WorkflowUpdateStageCompleted})
		if err != nil {
			return err
		}
		var res RefundSubmitResult
		return h.Get(ctx, &res)
	}
	submit := func(run client.WorkflowRun, hash string) error {
		return submitRequest(run, RefundSubmitRequest{TxHash: hash})
	}
	// A saved history is kept: it is what an earlier version of the
	// workflow wrote, which the replay test must keep replaying.
	finish := func(run client.WorkflowRun, status, file string) {
		t.Helper()
		var res RefundResult
		if err := run.Get(ctx, &res); err != nil || res.Status != status {
			t.Fatalf("%s: result %+v %v, want %s", run.GetID(), res, err, status)
		}
		if _, err := os.Stat(file); err == nil {
			t.Logf("kept %s (delete it to record it again)", file)
			return
		}
		webhookSaveHistory(ctx, t, c, run.GetID(), run.GetRunID(), file)
	}

	// 1. Succeeded: a hash that backs another refund (the update fails),
	// the right one, an RPC error, then unseen, seen, confirmed. (The saved
	// history, recorded before replacements, also has a second submit the
	// validator refused; refused updates leave no event, and a second hash
	// is a replacement now: scenario 6.)
	store.claims[refundHash(90)] = "rf_other"
	run := start("rf_replay_succeeded", time.Hour)
	if err := submit(run, refundHash(90)); !checkoutIsType(err, activities.ErrTypeRefundTxClaimed) {
		t.Fatalf("submit of a claimed hash: %v", err)
	}
	fakeChain.errs[refundHash(91)] = 1
	fakeChain.put(refundHash(91), good(5_000_000), 0, 1, 2)
	if err := submit(run, refundHash(91)); err != nil {
		t.Fatal(err)
	}
	finish(run, models.RefundSucceeded, refundHistoryFiles[0])

	// 2. Expired: nothing submitted within a 2 s window.
	run = start("rf_replay_expired", 2*time.Second)
	finish(run, models.RefundFailed, refundHistoryFiles[1])

	// 3. A transfer from another wallet than the merchant's fails it.
	run = start("rf_replay_wrong_sender", time.Hour)
	fakeChain.put(refundHash(93), refundTransfer{from: refundStranger, to: refundPayer, units: 5_000_000}, 1, 2)
	if err := submit(run, refundHash(93)); err != nil {
		t.Fatal(err)
	}
	finish(run, models.RefundFailed, refundHistoryFiles[2])

	// 4. A submitted transfer the chain never shows fails TX_NOT_FOUND
	// after the not-found window (1 s here; then watched for 1 s).
	notFoundWindow, lateWatch = time.Second, time.Second
	run = start("rf_replay_not_found", time.Hour)
	if err := submit(run, refundHash(94)); err != nil {
		t.Fatal(err)
	}
	finish(run, models.RefundFailed, refundHistoryFiles[3])

	// 5. The same, and the transfer lands after the failure: the late
	// watch (workflow version refund-late-watch) makes it succeeded.
	lateWatch = time.Minute
	run = start("rf_replay_late", time.Hour)
	if err := submit(run, refundHash(95)); err != nil {
		t.Fatal(err)
	}
	for store.refund("rf_replay_late").status != models.RefundFailed {
		if ctx.Err() != nil {
			t.Fatal("the refund did not fail TX_NOT_FOUND")
		}
		time.Sleep(50 * time.Millisecond)
	}
	fakeChain.put(refundHash(95), good(5_000_000), 1, 2)
	finish(run, models.RefundSucceeded, refundHistoryFiles[4])

	// 6. A submitted transfer replaced (a speed-up): the replacement lands.
	notFoundWindow, lateWatch = time.Hour, 0
	run = start("rf_replay_replaced", time.Hour)
	if err := submit(run, refundHash(96)); err != nil {
		t.Fatal(err)
	}
	fakeChain.put(refundHash(97), good(5_000_000), 0, 1, 2)
	if err := submit(run, refundHash(97)); err != nil {
		t.Fatal(err)
	}
	finish(run, models.RefundSucceeded, refundHistoryFiles[5])

	// 7. A submitted transfer unseen, its replacement reverts: the refund
	// fails TX_REVERTED and the replaced transfer is still watched (workflow
	// version refund-replaced-watch); it lands and the refund succeeds with
	// it.
	notFoundWindow, lateWatch = time.Second, time.Minute
	run = start("rf_replay_replaced_watch", time.Hour)
	if err := submit(run, refundHash(98)); err != nil {
		t.Fatal(err)
	}
	fakeChain.put(refundHash(99), refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000, reverted: true}, 1, 2)
	if err := submit(run, refundHash(99)); err != nil {
		t.Fatal(err)
	}
	for r := store.refund("rf_replay_replaced_watch"); r.status != models.RefundFailed; r = store.refund("rf_replay_replaced_watch") {
		if ctx.Err() != nil {
			t.Fatal("the refund did not fail TX_REVERTED")
		}
		time.Sleep(50 * time.Millisecond)
	}
	fakeChain.put(refundHash(98), good(5_000_000), 1, 2)
	finish(run, models.RefundSucceeded, refundHistoryFiles[6])

	// 8. Two hashes unseen: the refund fails TX_NOT_FOUND, both watched;
	// the current one lands reverted (the stored message says so, version
	// 2 of refund-replaced-watch), then the first lands and pays it.
	run = start("rf_replay_watched_resend", time.Hour)
	if err := submit(run, refundHash(100)); err != nil {
		t.Fatal(err)
	}
	if err := submit(run, refundHash(101)); err != nil {
		t.Fatal(err)
	}
	waitFor := func(id string, ok func(refundFakeRefund) bool, what string) {
		t.Helper()
		for !ok(store.refund(id)) {
			if ctx.Err() != nil {
				t.Fatal(what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("rf_replay_watched_resend", func(r refundFakeRefund) bool { return r.status == models.RefundFailed }, "the refund did not fail TX_NOT_FOUND")
	fakeChain.put(refundHash(101), refundTransfer{from: refundMerchant, to: refundPayer, units: 5_000_000, reverted: true}, 2)
	waitFor("rf_replay_watched_resend", func(r refundFakeRefund) bool { return strings.Contains(r.message, "does not pay it") },
		"the watched hash's failure was not noted")
	fakeChain.put(refundHash(100), good(5_000_000), 1, 2)
	finish(run, models.RefundSucceeded, refundHistoryFiles[7])

	// 9. On Solana: a submitted transfer unseen, its re-send reverts; the
	// refund fails TX_REVERTED and the first is watched for the not-found
	// window (refund-solana-replaced-watch); it lands and pays the refund.
	network, source, destination, units = "solana_devnet", solRefundMerchant, solRefundPayer, 1_000_000
	notFoundWindow = time.Minute
	run = start("rf_replay_solana_replaced", time.Hour)
	if err := submit(run, solRefundSig(0)); err != nil {
		t.Fatal(err)
	}
	fakeChain.put(solRefundSig(1), refundTransfer{from: source, to: destination, units: units, reverted: true}, 1, 2)
	if err := submit(run, solRefundSig(1)); err != nil {
		t.Fatal(err)
	}
	waitFor("rf_replay_solana_replaced", func(r refundFakeRefund) bool { return r.status == models.RefundFailed }, "the refund did not fail TX_REVERTED")
	fakeChain.put(solRefundSig(0), refundTransfer{from: source, to: destination, units: units}, 1, 2)
	finish(run, models.RefundSucceeded, refundHistoryFiles[8])

	// 10. A submitted transfer unseen, its re-send reverts (the first
	// watched), a third reverts too: the second, decided, is no longer
	// checked (refund-replaced-failed); the first lands and pays the refund.
	network, source, destination, units = refundNetwork, refundMerchant, refundPayer, 1_000_000
	notFoundWindow, lateWatch = time.Hour, time.Minute
	run = start("rf_replay_replaced_failed", time.Hour)
	if err := submit(run, refundHash(102)); err != nil {
		t.Fatal(err)
	}
	for i, hash := range []string{refundHash(103), refundHash(104)} {
		fakeChain.put(hash, refundTransfer{from: source, to: destination, units: units, reverted: true}, 1, 2)
		if err := submit(run, hash); err != nil {
			t.Fatal(err)
		}
		waitFor("rf_replay_replaced_failed", func(r refundFakeRefund) bool { return r.status == models.RefundFailed && r.hash == hash },
			fmt.Sprintf("re-send %d did not fail the refund", i+1))
	}
	fakeChain.put(refundHash(102), refundTransfer{from: source, to: destination, units: units}, 1, 2)
	finish(run, models.RefundSucceeded, refundHistoryFiles[9])

	// 11. Found on chain: the refund watcher's submit (FirstOnly) attaches
	// a transfer; a second one, a twin refund's transfer, is refused by
	// the validator (no event); the first lands and pays the refund.
	run = start("rf_replay_found", time.Hour)
	fakeChain.put(refundHash(105), refundTransfer{from: source, to: destination, units: units}, 0, 1, 2)
	if err := submitRequest(run, RefundSubmitRequest{TxHash: refundHash(105), FirstOnly: true}); err != nil {
		t.Fatal(err)
	}
	if err := submitRequest(run, RefundSubmitRequest{TxHash: refundHash(106), FirstOnly: true}); !checkoutIsType(err, ErrTypeRefundNotOpen) {
		t.Fatalf("a second found transfer: %v", err)
	}
	finish(run, models.RefundSucceeded, refundHistoryFiles[10])

	// 12. Expired, then paid late: the refund fails REFUND_EXPIRED after a
	// 1 s window; the watcher's find starts RefundLateTransferWorkflow,
	// which checks the transfer (unseen, seen, confirmed) and records it.
	run = start("rf_replay_expired_late", time.Second)
	finish(run, models.RefundFailed, filepath.Join(t.TempDir(), "expired.json"))
	fakeChain.put(refundHash(107), refundTransfer{from: source, to: destination, units: units}, 0, 1, 2)
	now := time.Now()
	lateIn := RefundLateInput{TxHash: refundHash(107), Refund: RefundInput{RefundID: "rf_replay_expired_late", MerchantID: "mer_replay",
		Network: network, SourceWallet: source, DestinationWallet: destination, Units: units, CreatedAt: now.Add(-time.Minute),
		ExpiresAt: now.Add(-time.Second), PollInterval: 100 * time.Millisecond, NotFoundWindow: time.Hour}}
	late, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: RefundLateWorkflowID(lateIn.Refund.RefundID, lateIn.TxHash) + "-" + queue,
		TaskQueue: queue, TypedSearchAttributes: temporal.NewSearchAttributes(MerchantIDAttr.ValueSet("mer_replay"), NetworkAttr.ValueSet(network))},
		RefundLateTransferWorkflow, lateIn)
	if err != nil {
		t.Fatal(err)
	}
	var lateRes RefundLateResult
	if err := late.Get(ctx, &lateRes); err != nil || !lateRes.Recorded {
		t.Fatalf("the late transfer: %+v %v", lateRes, err)
	}
	if _, err := os.Stat(refundLateHistoryFiles[0]); err == nil {
		t.Logf("kept %s (delete it to record it again)", refundLateHistoryFiles[0])
	} else {
		webhookSaveHistory(ctx, t, c, late.GetID(), late.GetRunID(), refundLateHistoryFiles[0])
	}
	store.check(t)
	if r := store.refund("rf_replay_wrong_sender"); r.reason != chain.ReasonInvalidTransfer {
		t.Fatalf("wrong sender stored %+v", r)
	}
	if r := store.refund("rf_replay_not_found"); r.reason != chain.ReasonTxNotFound {
		t.Fatalf("not found stored %+v", r)
	}
	if r := store.refund("rf_replay_replaced"); r.status != models.RefundSucceeded || r.hash != refundHash(97) {
		t.Fatalf("replaced stored %+v", r)
	}
	if r := store.refund("rf_replay_late"); r.status != models.RefundSucceeded {
		t.Fatalf("late landing stored %+v", r)
	}
	if r := store.refund("rf_replay_watched_resend"); r.status != models.RefundSucceeded || r.hash != refundHash(100) {
		t.Fatalf("watched re-send reverted stored %+v", r)
	}
	if r := store.refund("rf_replay_replaced_watch"); r.status != models.RefundSucceeded || r.hash != refundHash(98) {
		t.Fatalf("replaced, watched stored %+v", r)
	}
	if r := store.refund("rf_replay_replaced_failed"); r.status != models.RefundSucceeded || r.hash != refundHash(102) {
		t.Fatalf("replaced failed stored %+v", r)
	}
	if r := store.refund("rf_replay_solana_replaced"); r.status != models.RefundSucceeded || r.hash != solRefundSig(0) {
		t.Fatalf("Solana replaced, watched stored %+v", r)
	}
	if r := store.refund("rf_replay_found"); r.status != models.RefundSucceeded || r.hash != refundHash(105) {
		t.Fatalf("found on chain stored %+v", r)
	}
}
