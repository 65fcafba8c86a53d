package activities

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/paygate/paygate/apperr"
)

type stubSubStore struct {
	err  error
	ids  []string
	recs []SubscriptionRecord
}

func (s *stubSubStore) RecordSubscription(_ context.Context, r SubscriptionRecord) ([]string, error) {
	s.recs = append(s.recs, r)
	return s.ids, s.err
}

type stubSessions struct {
	openErr, voidErr error
	status           string
}

func (s *stubSessions) OpenInvoiceSession(_ context.Context, req InvoiceSessionRequest) (InvoiceSession, error) {
	return InvoiceSession{SessionID: req.SessionID, Status: "payment_session_created", ExpiresAt: req.ExpiresAt}, s.openErr
}

func (s *stubSessions) InvoiceSessionStatus(context.Context, string) (string, error) {
	return s.status, nil
}

func (s *stubSessions) VoidInvoiceSession(context.Context, string) (string, error) {
	return s.status, s.voidErr
}

// Every subscription activity's errors are classified: bad input and
// permanent answers are non-retryable, faults retryable; a broadcast
// payment is PaymentInFlight.
func TestSubscriptionActivities(t *testing.T) {
	newEnv := func(a *SubscriptionActivities) *testsuite.TestActivityEnvironment {
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		env.RegisterActivity(a)
		return env
	}
	run := func(a *SubscriptionActivities, fn any, args ...any) error {
		_, err := newEnv(a).ExecuteActivity(fn, args...)
		return err
	}
	rec := SubscriptionRecord{SubscriptionID: "sub_1", Seq: 1, Status: "trialing"}
	d := &checkoutStubDispatcher{}
	a := &SubscriptionActivities{Store: &stubSubStore{ids: []string{"dlv_1"}}, Dispatcher: d, Sessions: &stubSessions{}}
	if err := run(a, a.RecordSubscription, rec); err != nil || len(d.batch) != 1 {
		t.Fatalf("record: %v, dispatched %v", err, d.batch)
	}
	for _, bad := range []SubscriptionRecord{{Seq: 1, Status: "x"}, {SubscriptionID: "s", Status: "x"}, {SubscriptionID: "s", Seq: 1}} {
		if err := run(a, a.RecordSubscription, bad); checkoutErrKind(err) != ErrTypeInvalidInput+"/nonretryable" {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	a.Store = &stubSubStore{err: errors.New("database is locked")}
	if err := run(a, a.RecordSubscription, rec); checkoutErrKind(err) != "retryable" {
		t.Fatalf("store fault: %v", err)
	}
	a.Store = &stubSubStore{err: apperr.New(apperr.ErrNotFound, "gone")}
	if err := run(a, a.RecordSubscription, rec); checkoutErrKind(err) != ErrTypeInvalidInput+"/nonretryable" {
		t.Fatalf("missing subscription: %v", err)
	}

	req := InvoiceSessionRequest{SessionID: "cs_1", SubscriptionID: "sub_1", ExpiresAt: time.Now().Add(time.Hour)}
	a.PublicBaseURL = "https://pay.example/"
	v, err := newEnv(a).ExecuteActivity(a.OpenInvoiceSession, req)
	var got InvoiceSession
	if err == nil {
		err = v.Get(&got)
	}
	if err != nil || got.CheckoutURL != "https://pay.example/checkout/cs_1" {
		t.Fatalf("open: %+v %v", got, err)
	}
	a.Sessions = &stubSessions{openErr: apperr.Invalid("merchantWalletAddress", "missing")}
	if err := run(a, a.OpenInvoiceSession, req); checkoutErrKind(err) != ErrTypeUnbillable+"/nonretryable" {
		t.Fatalf("unbillable: %v", err)
	}
	a.Sessions = &stubSessions{openErr: errors.New("connection refused")}
	if err := run(a, a.OpenInvoiceSession, req); checkoutErrKind(err) != "retryable" {
		t.Fatalf("fault: %v", err)
	}
	a.Sessions = &stubSessions{status: "txn_broadcast", voidErr: apperr.Conflict("broadcast")}
	if err := run(a, a.VoidInvoiceSession, "cs_1"); checkoutErrKind(err) != ErrTypePaymentInFlight+"/nonretryable" {
		t.Fatalf("void in flight: %v", err)
	}
}
