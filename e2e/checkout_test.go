package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/workflows"
)

func hashN(i int) string { return fmt.Sprintf("0x%064x", 0xabc000+i) }

func statuses(d map[string]any) []string {
	var out []string
	for _, e := range d["events"].([]any) {
		out = append(out, e.(map[string]any)["status"].(string))
	}
	return out
}

// TestCheckoutCompletes: link, quote, session, submit, complete, through the
// real API, a real Temporal dev server, the worker and the store.
func TestCheckoutCompletes(t *testing.T) {
	v := &scriptedVerifier{}
	s := startStack(t, stackOptions{verifier: v})
	key, _ := s.merchant()
	id, link := s.openSession(key, "", "25.00")
	s.call("POST", "/api/checkout/session/"+id+"/wallet", "", map[string]any{"status": "wallet_ready"}, 200)
	h := hashN(1)
	v.set(h, chain.VerifyResult{Verdict: chain.VerdictPending},
		chain.VerifyResult{Seen: true, Verdict: chain.VerdictPending, Confirmations: 1, Required: 2},
		chain.VerifyResult{Seen: true, Verdict: chain.VerdictComplete, Confirmations: 2, Required: 2, ReceivedUnits: "29750000", Payer: "0x8617E340B3D01FA5F11F306F4090FD50E238070D"})
	sub := s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": id, "txHash": h}, 200)
	if sub["status"] != "txn_broadcast" || sub["nextAction"] != "poll_status" || sub["txHash"] != h || sub["sessionId"] != id {
		t.Fatalf("submit answered %v", sub)
	}
	// The same hash again (a retry after a timeout) is answered as before.
	again := s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": id, "txHash": h}, 200)
	if again["status"] != "txn_broadcast" || again["txHash"] != h {
		t.Fatalf("resubmit answered %v", again)
	}
	// Another hash on the same session is 409.
	s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": id, "txHash": hashN(2)}, 409)
	// A cancel after the broadcast is refused.
	s.call("POST", "/api/checkout/session/"+id+"/cancel", "", nil, 409)

	d := s.waitStatus(id, "complete", 20*time.Second)
	// A retry that arrives after the outcome (its first try got a 503 while
	// the workers were down, and the workflow applied it later) is answered
	// as the first time, not refused; the poll shows the outcome.
	late := s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": id, "txHash": h}, 200)
	if late["status"] != "txn_broadcast" || late["txHash"] != h {
		t.Fatalf("resubmit after the outcome answered %v", late)
	}
	// Once it paid a session, the hash is the merchant's: another session
	// of the merchant cannot take it (while the first was still verifying
	// the claim was provisional: the chain decides between sessions).
	other, _ := s.openSession(key, link, "")
	s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": other, "txHash": h}, 409)
	got := strings.Join(statuses(d), ",")
	if got != "payment_session_created,wallet_ready,txn_broadcast,txn_confirming,complete" {
		t.Fatalf("history %s", got)
	}
	ev := d["events"].([]any)
	if ev[3].(map[string]any)["source"] != "chain" || ev[3].(map[string]any)["chain"] != "base_sepolia" || ev[2].(map[string]any)["source"] != "client" {
		t.Fatalf("history sources %v", ev)
	}
	// The read model followed: transaction, link totals, customer.
	txs := s.call("GET", "/api/transactions?txHash="+h, key, nil, 200)
	_ = txs
	l := s.call("GET", "/api/payment-links/"+link, key, nil, 200)
	if l["totalCollected"] != 29.75 || l["totalTransactions"] != 1.0 {
		t.Fatalf("link totals %v", l)
	}
	// The workflow is findable by its search attribute.
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := s.temporal.ListWorkflow(ctx, workflowsQuery(`CheckoutStatus="complete" AND WorkflowId="`+workflows.CheckoutWorkflowID(id)+`"`))
		if err == nil && len(resp.Executions) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("search attribute CheckoutStatus=complete not visible: %v %v", resp, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCheckoutExpiresOnTime: sessions with a short lifetime expire when
// their timer fires, not up to a minute later.
func TestCheckoutExpiresOnTime(t *testing.T) {
	s := startStack(t, stackOptions{verifier: &scriptedVerifier{}, lifetime: 3 * time.Second})
	key, _ := s.merchant()
	const n = 5
	ids := make([]string, n)
	_, link := s.openSession(key, "", "10.00")
	for i := range ids {
		ids[i], _ = s.openSession(key, link, "")
	}
	var lags []time.Duration
	for _, id := range ids {
		d := s.waitStatus(id, "expired", 15*time.Second)
		sess := d["session"].(map[string]any)
		exp, _ := time.Parse(time.RFC3339Nano, sess["expiresAt"].(string))
		ev := d["events"].([]any)
		last := ev[len(ev)-1].(map[string]any)
		at, _ := time.Parse(time.RFC3339Nano, last["createdAt"].(string))
		lag := at.Sub(exp)
		lags = append(lags, lag)
		if lag < 0 || lag > 2*time.Second {
			t.Errorf("session %s expired %s after expiresAt (must be within 2 s)", id, lag)
		}
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	t.Logf("expiry lag over %d sessions: median %s, max %s", n, lags[n/2], lags[n-1])
	// Submitting to an expired session is 404 (SPEC.md Errors).
	s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": ids[0], "txHash": hashN(9)}, 404)
}

// TestCheckoutCancelAndLinkDeletion: a customer cancel before a broadcast,
// and deleting a link fails its open sessions but not a broadcast one.
func TestCheckoutCancelAndLinkDeletion(t *testing.T) {
	v := &scriptedVerifier{}
	s := startStack(t, stackOptions{verifier: v})
	key, session := s.merchant()
	id, link := s.openSession(key, "", "10.00")
	d := s.call("POST", "/api/checkout/session/"+id+"/cancel", "", nil, 200)
	if d["status"] != "cancelled" {
		t.Fatalf("cancel answered %v", d)
	}
	s.call("POST", "/api/checkout/session/"+id+"/cancel", "", nil, 409)

	open, _ := s.openSession(key, link, "")
	paid, _ := s.openSession(key, link, "")
	h := hashN(3)
	v.set(h, chain.VerifyResult{Seen: true, Verdict: chain.VerdictPending})
	s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": paid, "txHash": h}, 200)
	s.call("DELETE", "/api/payment-links/"+link, session, nil, 200)
	d = s.waitStatus(open, "failed", 10*time.Second)
	if d["session"].(map[string]any)["failureReason"] != "LINK_DELETED" {
		t.Fatalf("link deletion reason %v", d["session"])
	}
	// The broadcast session is still watched and completes when verified.
	v.set(h, chain.VerifyResult{Seen: true, Verdict: chain.VerdictComplete, ReceivedUnits: "11900000"})
	s.waitStatus(paid, "complete", 10*time.Second)
	// No new sessions on a deleted link.
	s.call("POST", "/api/checkout/quote", "", map[string]any{"linkId": link, "network": "base_sepolia",
		"customer": map[string]any{"country": "DE"}}, 404)
}

// TestCheckoutRepairsMissingWorkflow: a session written to the database
// whose workflow never started (a crash in between) is repaired.
func TestCheckoutRepairsMissingWorkflow(t *testing.T) {
	s := startStack(t, stackOptions{verifier: &scriptedVerifier{}})
	key, _ := s.merchant()
	_, link := s.openSession(key, "", "10.00")
	ctx := context.Background()
	l, err := s.store.PaymentLinkByID(ctx, link)
	if err != nil {
		t.Fatal(err)
	}
	// Write a session as CreateSession does, but "crash" before the start.
	cs := &models.CheckoutSession{MerchantID: l.MerchantID, Mode: l.Mode, PaymentLinkID: l.ID, Network: "base_sepolia",
		WalletType: "evm", ExpectedAmount: l.Amount, MerchantWalletAddress: merchantWallet, TokenAddress: "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
		CustomerEmail: "crash@example.com", ExpiresAt: time.Now().Add(time.Hour)}
	if err := s.store.CreateCheckoutSession(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.temporal.DescribeWorkflowExecution(ctx, workflows.CheckoutWorkflowID(cs.ID), ""); err == nil {
		t.Fatal("workflow must not exist before the repair")
	}
	n, err := s.checkout.RepairOnce(ctx, 0)
	if err != nil || n != 1 {
		t.Fatalf("repair: %d %v", n, err)
	}
	if _, err := s.temporal.DescribeWorkflowExecution(ctx, workflows.CheckoutWorkflowID(cs.ID), ""); err != nil {
		t.Fatalf("workflow after repair: %v", err)
	}
	again, _ := s.store.CheckoutSession(ctx, cs.ID)
	if !again.WorkflowStarted {
		t.Fatal("session not marked")
	}
	if n, _ := s.checkout.RepairOnce(ctx, 0); n != 0 {
		t.Fatalf("second pass repaired %d", n)
	}
	// The repaired session works: a cancel reaches its workflow.
	d := s.call("POST", "/api/checkout/session/"+cs.ID+"/cancel", "", nil, 200)
	if d["status"] != "cancelled" {
		t.Fatalf("cancel of repaired session: %v", d)
	}
}

// TestCheckoutRepairsUntoldLinkDeletion: a link deleted without its open
// sessions being told (a failure half-way through DELETE) is caught by the
// repairer, which fails those sessions with LINK_DELETED.
func TestCheckoutRepairsUntoldLinkDeletion(t *testing.T) {
	s := startStack(t, stackOptions{verifier: &scriptedVerifier{}})
	key, _ := s.merchant()
	id, link := s.openSession(key, "", "10.00")
	ctx := context.Background()
	l, err := s.store.PaymentLinkByID(ctx, link)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.DeletePaymentLink(ctx, l.MerchantID, link); err != nil { // the store write only
		t.Fatal(err)
	}
	if n, err := s.checkout.RepairOnce(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("repair: %d %v", n, err)
	}
	d := s.waitStatus(id, "failed", 10*time.Second)
	if d["session"].(map[string]any)["failureReason"] != "LINK_DELETED" {
		t.Fatalf("reason %v", d["session"])
	}
}

// TestCheckoutReconcilesStoppedWorkflows: an operator terminated the
// workflows of an open session and of a broadcast one; the repairer starts
// them again from the read model, so the first expires and the second
// still completes when its transfer is verified.
func TestCheckoutReconcilesStoppedWorkflows(t *testing.T) {
	v := &scriptedVerifier{}
	s := startStack(t, stackOptions{verifier: v, lifetime: 2 * time.Second})
	key, _ := s.merchant()
	open, link := s.openSession(key, "", "10.00")
	paid, _ := s.openSession(key, link, "")
	h := hashN(7)
	v.set(h, chain.VerifyResult{Verdict: chain.VerdictPending})
	s.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": paid, "txHash": h}, 200)
	ctx := context.Background()
	for _, id := range []string{open, paid} {
		if err := s.temporal.TerminateWorkflow(ctx, workflows.CheckoutWorkflowID(id), "", "operator mistake"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2500 * time.Millisecond) // past the open session's expiry
	s.checkout.ReconcileGrace = -1      // check at once
	s.checkout.NotFoundWindow = 0       // the broadcast one is overdue too
	n, err := s.checkout.RepairOnce(ctx, time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("reconcile: %d %v", n, err)
	}
	s.waitStatus(open, "expired", 10*time.Second)
	v.set(h, chain.VerifyResult{Seen: true, Verdict: chain.VerdictComplete, ReceivedUnits: "11900000"})
	d := s.waitStatus(paid, "complete", 10*time.Second)
	if got := strings.Join(statuses(d), ","); got != "payment_session_created,txn_broadcast,txn_confirming,complete" {
		t.Fatalf("history after the resume: %s", got)
	}
	// A second pass finds nothing left to do.
	if n, _ := s.checkout.RepairOnce(ctx, time.Hour); n != 0 {
		t.Fatalf("second pass acted on %d sessions", n)
	}
}
