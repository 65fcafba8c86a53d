package checkout_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/paygate/paygate/checkout"
)

// updateRecorder is a Temporal client that records the workflow updates
// asked of it and answers none.
type updateRecorder struct {
	client.Client
	mu      sync.Mutex
	updates []string // workflow id and update id
}

func (r *updateRecorder) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updates = append(r.updates, o.WorkflowID+" "+o.UpdateID)
	return nil, errors.New("updateRecorder: not answered")
}

func (r *updateRecorder) asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.updates...)
}

// TestPlainOfferSkipsAnotherSessionsPayment: a customer with two open
// sessions of one amount at a shop, both declaring their wallet, pays the
// first by its reference (an EIP-3009 authorization) and the first's page
// submits it. The watcher's transfer scan sees the USDC arrive from the
// declared wallet while the first session is still confirming: on the
// code before, it offered the transfer as plain to the second session,
// the one open session declaring that wallet and due that amount, and
// the store failed that session with nothing received (the transfer
// carries the first's reference). The customer's plain transfer still
// goes to the second session.
func TestPlainOfferSkipsAnotherSessionsPayment(t *testing.T) {
	e := newBindEnv(t)
	first := e.session(e.linkA, e.addr(e.customer))
	second := e.session(e.linkA, e.addr(e.customer))
	for _, cs := range []string{first.ID, second.ID} {
		if err := e.st.MarkWorkflowStarted(e.ctx, cs); err != nil {
			t.Fatal(err)
		}
	}
	rec := &updateRecorder{}
	s := &checkout.Service{Store: e.st, Temporal: rec, Finder: e.verifier, Verifier: e.verifier, Networks: e.reg,
		TaskQueue: "checkout", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	bound := e.payBound(first)
	if !e.submit(first, bound) {
		t.Fatal("the first session's own payment was not attached")
	}
	s.WatchOnce(e.ctx, nil)
	s.WatchOnce(e.ctx, nil)
	if got := rec.asked(); len(got) != 0 {
		t.Fatalf("updates asked after the first session's bound payment: %v", got)
	}

	plain := e.payPlain(e.customer, e.merchantA)
	s.WatchOnce(e.ctx, nil)
	got := rec.asked()
	if len(got) != 1 || !strings.Contains(got[0], second.ID) || !strings.Contains(got[0], strings.ToLower(plain)) {
		t.Fatalf("updates asked after the customer's plain transfer: %v (want the second session's submit of %s)", got, plain)
	}
}
