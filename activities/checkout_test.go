package activities

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/chain"
)

// checkoutStubStore is a CheckoutStore whose answers the test sets: err
// fails every call, claimedBy makes ClaimSessionTxHash conflict for other
// sessions, ids are FinishSession's delivery ids. It records its calls.
type checkoutStubStore struct {
	mu        sync.Mutex
	err       error
	claimedBy string
	ids       []string
	calls     []string
	// subscription is the subscription the finished session pays.
	subscription string
}

func (s *checkoutStubStore) note(call string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call)
	return s.err
}

func (s *checkoutStubStore) ClaimSessionTxHash(_ context.Context, sessionID, network, txHash string) error {
	if err := s.note("claim " + sessionID + " " + network + " " + txHash); err != nil {
		return err
	}
	if s.claimedBy != "" && s.claimedBy != sessionID {
		return apperr.Conflict("transaction hash already attached to another session")
	}
	return nil
}

func (s *checkoutStubStore) RecordSessionTransition(_ context.Context, t SessionTransition) error {
	return s.note("record " + t.EntryID + " " + t.Status)
}

func (s *checkoutStubStore) ReleaseSessionTxHash(_ context.Context, r SessionRelease) (ReleasedSession, error) {
	if err := s.note("release " + r.EntryID + " " + r.TxHash); err != nil {
		return ReleasedSession{}, err
	}
	return ReleasedSession{Released: true, Status: "wallet_ready", Deliveries: s.ids}, nil
}

func (s *checkoutStubStore) ReplaceSessionTxHash(_ context.Context, r SessionReplacement) (ReplacedSession, error) {
	if err := s.note("replace " + r.Held + " " + r.TxHash); err != nil {
		return ReplacedSession{}, err
	}
	return ReplacedSession{Replaced: true, Status: "wallet_ready", ExpiresAt: r.ExpiresAt}, nil
}

func (s *checkoutStubStore) FinishSession(_ context.Context, o SessionOutcome) (FinishedSession, error) {
	if err := s.note("finish " + o.EntryID + " " + o.Status); err != nil {
		return FinishedSession{}, err
	}
	return FinishedSession{Status: o.Status, Reason: o.Reason, Message: o.Message, Deliveries: s.ids, SubscriptionID: s.subscription}, nil
}

// checkoutStubVerifier answers every Verify with res and err.
type checkoutStubVerifier struct {
	res chain.VerifyResult
	err error
}

func (v checkoutStubVerifier) Verify(context.Context, chain.VerifyRequest) (chain.VerifyResult, error) {
	return v.res, v.err
}

// checkoutStubDispatcher records dispatched ids and fails with err.
type checkoutStubDispatcher struct {
	mu    sync.Mutex
	err   error
	batch [][]string
}

func (d *checkoutStubDispatcher) Dispatch(_ context.Context, ids []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.batch = append(d.batch, ids)
	return d.err
}

func newCheckoutActivityEnv(a *CheckoutActivities) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	return env
}

// checkoutErrKind describes an activity error: "" for none, the application
// error type with "/nonretryable" when so, or "other".
func checkoutErrKind(err error) string {
	if err == nil {
		return ""
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return "other"
	}
	if appErr.NonRetryable() {
		return appErr.Type() + "/nonretryable"
	}
	return "retryable"
}

func TestCheckoutClaimTxHash(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store *checkoutStubStore
		in    ClaimTxHashInput
		want  string
	}{
		{"claimed", &checkoutStubStore{}, ClaimTxHashInput{"cs_1", "base", "0xab"}, ""},
		{"claimed again by the same session", &checkoutStubStore{claimedBy: "cs_1"}, ClaimTxHashInput{"cs_1", "base", "0xab"}, ""},
		{"claimed by another session", &checkoutStubStore{claimedBy: "cs_2"}, ClaimTxHashInput{"cs_1", "base", "0xab"}, ErrTypeTxHashClaimed + "/nonretryable"},
		{"store down", &checkoutStubStore{err: errors.New("database is locked")}, ClaimTxHashInput{"cs_1", "base", "0xab"}, "retryable"},
		{"no hash", &checkoutStubStore{}, ClaimTxHashInput{"cs_1", "base", ""}, ErrTypeInvalidInput + "/nonretryable"},
		{"no network", &checkoutStubStore{}, ClaimTxHashInput{"cs_1", "", "0xab"}, ErrTypeInvalidInput + "/nonretryable"},
		{"no session", &checkoutStubStore{}, ClaimTxHashInput{"", "base", "0xab"}, ErrTypeInvalidInput + "/nonretryable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &CheckoutActivities{Store: tc.store}
			_, err := newCheckoutActivityEnv(a).ExecuteActivity(a.ClaimTxHash, tc.in)
			if got := checkoutErrKind(err); got != tc.want {
				t.Fatalf("error %v (%s), want %q", err, got, tc.want)
			}
		})
	}
}

func TestCheckoutRecordTransition(t *testing.T) {
	store := &checkoutStubStore{}
	a := &CheckoutActivities{Store: store}
	env := newCheckoutActivityEnv(a)
	at := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	if _, err := env.ExecuteActivity(a.RecordTransition, SessionTransition{SessionID: "cs_1", EntryID: "e1", Status: "wallet_ready", Source: "client", At: at}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []SessionTransition{{EntryID: "e", Status: "s"}, {SessionID: "cs", Status: "s"}, {SessionID: "cs", EntryID: "e"}} {
		_, err := env.ExecuteActivity(a.RecordTransition, bad)
		if got := checkoutErrKind(err); got != ErrTypeInvalidInput+"/nonretryable" {
			t.Errorf("%+v: error %v", bad, err)
		}
	}
	store.err = errors.New("database is locked")
	if _, err := env.ExecuteActivity(a.RecordTransition, SessionTransition{SessionID: "cs_1", EntryID: "e2", Status: "txn_broadcast"}); checkoutErrKind(err) != "retryable" {
		t.Errorf("store error: %v", err)
	}
	if fmt.Sprint(store.calls) != "[record e1 wallet_ready record e2 txn_broadcast]" {
		t.Errorf("calls %v", store.calls)
	}
}

// A verifier error is never a verdict: permanent ones are non-retryable
// VerifierMisconfigured, transient ones are retryable.
func TestCheckoutVerifyTransfer(t *testing.T) {
	ok := chain.VerifyResult{Seen: true, Verdict: chain.VerdictComplete, ReceivedUnits: "32610000"}
	for _, tc := range []struct {
		name string
		v    checkoutStubVerifier
		want string
	}{
		{"verdict", checkoutStubVerifier{res: ok}, ""},
		{"rpc down", checkoutStubVerifier{err: errors.New("connection refused")}, "retryable"},
		{"unknown network", checkoutStubVerifier{err: fmt.Errorf("%w: %q", chain.ErrUnknownNetwork, "foo")}, "VerifierMisconfigured/nonretryable"},
		{"chain id mismatch", checkoutStubVerifier{err: fmt.Errorf("%w: got 1", chain.ErrChainIDMismatch)}, "VerifierMisconfigured/nonretryable"},
		{"invalid request", checkoutStubVerifier{err: fmt.Errorf("%w: bad hash", chain.ErrInvalidRequest)}, "VerifierMisconfigured/nonretryable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &CheckoutActivities{Verifier: tc.v}
			val, err := newCheckoutActivityEnv(a).ExecuteActivity(a.VerifyTransfer, chain.VerifyRequest{Network: "base", TxHash: "0xab", MerchantAddress: "0x11", ExpectedUnits: "1"})
			if got := checkoutErrKind(err); got != tc.want {
				t.Fatalf("error %v (%s), want %q", err, got, tc.want)
			}
			if err == nil {
				var res chain.VerifyResult
				if err := val.Get(&res); err != nil || !reflect.DeepEqual(res, ok) {
					t.Fatalf("result %+v %v", res, err)
				}
			}
		})
	}
}

// FinishSession dispatches the deliveries the store returns, after the
// store, and never when the store failed.
func TestCheckoutFinishSession(t *testing.T) {
	o := SessionOutcome{SessionID: "cs_1", EntryID: "e9", Status: "complete", Source: "chain"}
	t.Run("dispatches", func(t *testing.T) {
		store, d := &checkoutStubStore{ids: []string{"dlv_1", "dlv_2"}}, &checkoutStubDispatcher{}
		a := &CheckoutActivities{Store: store, Dispatcher: d}
		if _, err := newCheckoutActivityEnv(a).ExecuteActivity(a.FinishSession, o); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(d.batch) != "[[dlv_1 dlv_2]]" || fmt.Sprint(store.calls) != "[finish e9 complete]" {
			t.Fatalf("dispatched %v, store calls %v", d.batch, store.calls)
		}
	})
	t.Run("no deliveries", func(t *testing.T) {
		d := &checkoutStubDispatcher{}
		a := &CheckoutActivities{Store: &checkoutStubStore{}, Dispatcher: d}
		if _, err := newCheckoutActivityEnv(a).ExecuteActivity(a.FinishSession, o); err != nil || len(d.batch) != 0 {
			t.Fatalf("err %v, dispatched %v", err, d.batch)
		}
	})
	t.Run("no dispatcher", func(t *testing.T) {
		a := &CheckoutActivities{Store: &checkoutStubStore{ids: []string{"dlv_1"}}}
		if _, err := newCheckoutActivityEnv(a).ExecuteActivity(a.FinishSession, o); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("store fails", func(t *testing.T) {
		d := &checkoutStubDispatcher{}
		a := &CheckoutActivities{Store: &checkoutStubStore{err: errors.New("database is locked"), ids: []string{"dlv_1"}}, Dispatcher: d}
		_, err := newCheckoutActivityEnv(a).ExecuteActivity(a.FinishSession, o)
		if checkoutErrKind(err) != "retryable" || len(d.batch) != 0 {
			t.Fatalf("err %v, dispatched %v", err, d.batch)
		}
	})
	t.Run("dispatch fails", func(t *testing.T) {
		d := &checkoutStubDispatcher{err: errors.New("temporal unavailable")}
		a := &CheckoutActivities{Store: &checkoutStubStore{ids: []string{"dlv_1"}}, Dispatcher: d}
		if _, err := newCheckoutActivityEnv(a).ExecuteActivity(a.FinishSession, o); checkoutErrKind(err) != "retryable" {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("tells the subscription", func(t *testing.T) {
		n := &stubNotifier{}
		a := &CheckoutActivities{Store: &checkoutStubStore{subscription: "sub_1"}, Subscriptions: n}
		if _, err := newCheckoutActivityEnv(a).ExecuteActivity(a.FinishSession, o); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(n.got) != "[sub_1 cs_1 complete]" {
			t.Fatalf("notified %v", n.got)
		}
		// A session of a payment link tells nobody; a failed signal is retried.
		n = &stubNotifier{}
		a = &CheckoutActivities{Store: &checkoutStubStore{}, Subscriptions: n}
		if _, err := newCheckoutActivityEnv(a).ExecuteActivity(a.FinishSession, o); err != nil || len(n.got) != 0 {
			t.Fatalf("link session notified %v %v", n.got, err)
		}
		n = &stubNotifier{err: errors.New("temporal unavailable")}
		a = &CheckoutActivities{Store: &checkoutStubStore{subscription: "sub_1"}, Subscriptions: n}
		if _, err := newCheckoutActivityEnv(a).ExecuteActivity(a.FinishSession, o); checkoutErrKind(err) != "retryable" {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		a := &CheckoutActivities{Store: &checkoutStubStore{}}
		for _, bad := range []SessionOutcome{{EntryID: "e"}, {SessionID: "cs"}} {
			if _, err := newCheckoutActivityEnv(a).ExecuteActivity(a.FinishSession, bad); checkoutErrKind(err) != ErrTypeInvalidInput+"/nonretryable" {
				t.Errorf("%+v: %v", bad, err)
			}
		}
	})
}

// stubNotifier records the session outcomes it is told about.
type stubNotifier struct {
	mu  sync.Mutex
	err error
	got []string
}

func (n *stubNotifier) SessionFinished(_ context.Context, subscriptionID string, s SessionNotice) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.err != nil {
		return n.err
	}
	n.got = append(n.got, subscriptionID, s.SessionID, s.Status)
	return nil
}

// ReleaseTxHash gives the hash back, then starts the deliveries of the
// exception keeping the stranger's USDC; a store or dispatch fault is
// retried, bad input is not.
func TestReleaseTxHash(t *testing.T) {
	r := SessionRelease{SessionID: "cs_1", EntryID: "e_1", TxHash: "0xab", ReceivedUnits: "1", At: time.Now()}
	d := &checkoutStubDispatcher{}
	store := &checkoutStubStore{ids: []string{"dlv_exc"}}
	a := &CheckoutActivities{Store: store, Dispatcher: d}
	v, err := newCheckoutActivityEnv(a).ExecuteActivity(a.ReleaseTxHash, r)
	var got SessionReleased
	if err == nil {
		err = v.Get(&got)
	}
	if err != nil || got != (SessionReleased{Released: true, Status: "wallet_ready"}) || fmt.Sprint(d.batch) != "[[dlv_exc]]" ||
		fmt.Sprint(store.calls) != "[release e_1 0xab]" {
		t.Fatalf("release: %+v %v, dispatched %v, calls %v", got, err, d.batch, store.calls)
	}
	a = &CheckoutActivities{Store: &checkoutStubStore{err: errors.New("database is locked")}, Dispatcher: d}
	if _, err := newCheckoutActivityEnv(a).ExecuteActivity(a.ReleaseTxHash, r); checkoutErrKind(err) != "retryable" {
		t.Fatalf("store fails: %v", err)
	}
	a = &CheckoutActivities{Store: &checkoutStubStore{ids: []string{"dlv_exc"}}, Dispatcher: &checkoutStubDispatcher{err: errors.New("temporal unavailable")}}
	if _, err := newCheckoutActivityEnv(a).ExecuteActivity(a.ReleaseTxHash, r); checkoutErrKind(err) != "retryable" {
		t.Fatalf("dispatch fails: %v", err)
	}
	for _, bad := range []SessionRelease{{EntryID: "e", TxHash: "h"}, {SessionID: "cs", TxHash: "h"}, {SessionID: "cs", EntryID: "e"}} {
		if _, err := newCheckoutActivityEnv(a).ExecuteActivity(a.ReleaseTxHash, bad); checkoutErrKind(err) != ErrTypeInvalidInput+"/nonretryable" {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
