package refund

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/workflows"
)

// lateClient is a Temporal client whose RefundLateTransferWorkflow answers
// through get; every other call is the nil interface's (a panic: the
// submit of an expired refund makes no other).
type lateClient struct {
	client.Client
	get     func(ctx context.Context, out any) error
	started []string
}

func (c *lateClient) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	c.started = append(c.started, o.ID)
	return lateRun{get: c.get}, nil
}

type lateRun struct {
	client.WorkflowRun
	get func(ctx context.Context, out any) error
}

func (r lateRun) Get(ctx context.Context, out any) error { return r.get(ctx, out) }

// The submit of a hash for a refund that expired without one answers what
// its RefundLateTransferWorkflow decided: 409 with the reason it gives, 503
// with Retry-After while it has not answered and when it failed (the same
// hash again starts it afresh), the refund once recorded; and 409 without
// starting it for a hash another refund holds or a refund expired more
// than a week ago; a hash another merchant's refund holds is checked.
func TestSubmitLateAnswers(t *testing.T) {
	f := newWatchFixture(t)
	ctx := context.Background()
	r := f.refund(models.ModeTest, 500, "")
	f.expire(r)
	sc := models.Scope{MerchantID: r.MerchantID, Mode: r.Mode}
	tc := &lateClient{}
	f.svc.Temporal, f.svc.UpdateTimeout = tc, 50*time.Millisecond
	hash := fmt.Sprintf("0x%064x", 0xabc)
	answer := func(res workflows.RefundLateResult, err error) func(context.Context, any) error {
		return func(_ context.Context, out any) error {
			if err == nil {
				*out.(*workflows.RefundLateResult) = res
			}
			return err
		}
	}
	for _, c := range []struct {
		name     string
		get      func(context.Context, any) error
		kind     error
		contains string
		retry    bool
	}{
		{"refused", answer(workflows.RefundLateResult{Reason: "INVALID_TRANSFER", Message: "the amount differs"}, nil),
			apperr.ErrConflict, "(INVALID_TRANSFER): the amount differs", false},
		{"taken meanwhile", answer(workflows.RefundLateResult{Reason: "NOT_RECORDED", Message: "this transaction hash already backs another refund"}, nil),
			apperr.ErrConflict, "already backs another refund", false},
		{"unconfirmed", func(ctx context.Context, _ any) error { <-ctx.Done(); return ctx.Err() },
			apperr.ErrUnavailable, "being checked on chain", true},
		{"workflow failed", answer(workflows.RefundLateResult{}, errors.New("workflow execution error: terminated")),
			apperr.ErrUnavailable, "could not be checked", true},
	} {
		tc.get = c.get
		_, err := f.svc.Submit(ctx, sc, r.ID, hash)
		var ae *apperr.Error
		if !errors.As(err, &ae) || !errors.Is(err, c.kind) || !strings.Contains(ae.Message, c.contains) || (ae.RetryAfter > 0) != c.retry {
			t.Fatalf("%s: %v (%#v), want %v containing %q, Retry-After %v", c.name, err, ae, c.kind, c.contains, c.retry)
		}
	}
	if want := workflows.RefundLateWorkflowID(r.ID, hash); len(tc.started) != 4 || tc.started[3] != want {
		t.Fatalf("workflows started: %v, want 4 of %s", tc.started, want)
	}

	// Recorded (as the workflow records a verified transfer): the refund
	// as the store has it now.
	var recording string
	record := func(h string) func(context.Context, any) error {
		return func(ctx context.Context, out any) error {
			if _, err := f.st.FinishExpiredRefundLate(ctx, models.RefundOutcome{RefundID: recording, Status: models.RefundSucceeded, TxHash: h, At: time.Now()}); err != nil {
				return err
			}
			*out.(*workflows.RefundLateResult) = workflows.RefundLateResult{Recorded: true, Status: models.RefundSucceeded}
			return nil
		}
	}
	recording, tc.get = r.ID, record(hash)
	got, err := f.svc.Submit(ctx, sc, r.ID, hash)
	if err != nil || got.Status != models.RefundSucceeded || got.TxHash == nil || *got.TxHash != hash {
		t.Fatalf("recorded: %+v, %v", got, err)
	}

	// Decided without a workflow: a hash another refund of the merchant
	// holds, a refund expired more than a week ago.
	started := len(tc.started)
	other := f.refund(models.ModeTest, 700, "")
	f.expire(other)
	if _, err := f.svc.Submit(ctx, sc, other.ID, hash); !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "already backs another refund") {
		t.Fatalf("a hash another refund holds: %v", err)
	}
	if len(tc.started) != started {
		t.Fatalf("workflows started for a hash the merchant's refund holds: %v", tc.started[started:])
	}
	// A hash another merchant's refund holds (a stranger who named the
	// wallet theirs too and submitted it first) is checked and recorded
	// all the same; theirs is left as it was.
	recording = other.ID
	stranger := f.merchant("stranger@example.com")
	theirs := f.refundOf(f.paid(stranger, models.ModeTest), 700, "")
	hTheirs := fmt.Sprintf("0x%064x", 0xbad)
	if err := f.st.SubmitRefundTx(ctx, theirs.ID, hTheirs, time.Now()); err != nil {
		t.Fatal(err)
	}
	tc.get = record(hTheirs)
	got, err = f.svc.Submit(ctx, sc, other.ID, hTheirs)
	if err != nil || got.Status != models.RefundSucceeded || got.TxHash == nil || *got.TxHash != hTheirs {
		t.Fatalf("a hash another merchant's refund holds: %+v %v", got, err)
	}
	if want := workflows.RefundLateWorkflowID(other.ID, hTheirs); len(tc.started) != started+1 || tc.started[started] != want {
		t.Fatalf("workflows started for a hash another merchant holds: %v, want %s", tc.started[started:], want)
	}
	if r, err := f.st.RefundByID(ctx, theirs.ID); err != nil || r.Status != models.RefundSubmitted || *r.TxHash != hTheirs {
		t.Fatalf("the other merchant's refund after: %+v %v", r, err)
	}
	started++
	old := f.refund(models.ModeTest, 800, "")
	f.expire(old)
	f.svc.Now = func() time.Time { return old.ExpiresAt.Add(models.ExpiredRefundListed + time.Second) }
	if _, err := f.svc.Submit(ctx, sc, old.ID, fmt.Sprintf("0x%064x", 0xdef)); !errors.Is(err, apperr.ErrConflict) || !strings.Contains(err.Error(), "more than a week ago") {
		t.Fatalf("a week on: %v", err)
	}
	if len(tc.started) != started {
		t.Fatalf("workflows started for answers the store gives: %v", tc.started[started:])
	}
}
