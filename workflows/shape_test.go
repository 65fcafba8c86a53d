package workflows

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The shapes the unit tests run the workflows in: the current one, and
// again the shape of older executions (TestCheckoutRemoteShape,
// TestWebhookDeliveryRemoteShape), which still run until they end.
var (
	checkoutTestShape = ShapeCurrent
	webhookTestShape  = ShapeCurrent
)

// TestCheckoutRemoteShape runs the checkout tests again in the shape of the
// executions started before local activities (every effect a remote
// activity, history entry ids from side effects).
func TestCheckoutRemoteShape(t *testing.T) {
	checkoutTestShape = ShapeRemoteEffects
	defer func() { checkoutTestShape = ShapeCurrent }()
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"Completes", TestCheckoutCompletes},
		{"FailedVerdicts", TestCheckoutFailedVerdicts},
		{"ForeignVerdictReleases", TestCheckoutForeignVerdictReleases},
		{"UnseenHashReplaced", TestCheckoutUnseenHashReplaced},
		{"TxNotFound", TestCheckoutTxNotFound},
		{"Expires", TestCheckoutExpires},
		{"CancelledBeforeBroadcast", TestCheckoutCancelledBeforeBroadcast},
		{"CancelDuringSubmitWaitsForIt", TestCheckoutCancelDuringSubmitWaitsForIt},
		{"ExpiryDuringSubmitWaitsForIt", TestCheckoutExpiryDuringSubmitWaitsForIt},
		{"DoubleSubmitRefused", TestCheckoutDoubleSubmitRefused},
		{"WalletUpdates", TestCheckoutWalletUpdates},
		{"ActivityRetriesWriteOnce", TestCheckoutActivityRetriesWriteOnce},
		{"RPCErrorsAreNoVerdict", TestCheckoutRPCErrorsAreNoVerdict},
		{"ContinuesAsNew", TestCheckoutContinuesAsNew},
		{"BoundByReference", TestCheckoutBoundByReference},
	} {
		t.Run(tc.name, tc.f)
	}
}

// TestWebhookDeliveryRemoteShape runs the delivery tests again in the shape
// of the executions started before local activities.
func TestWebhookDeliveryRemoteShape(t *testing.T) {
	webhookTestShape = ShapeRemoteEffects
	defer func() { webhookTestShape = ShapeCurrent }()
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"AlwaysFailing", TestWebhookDeliveryWorkflowAlwaysFailing},
		{"RecoversOnAttempt4", TestWebhookDeliveryWorkflowRecoversOnAttempt4},
		{"Resume", TestWebhookDeliveryWorkflowResume},
		{"RetrySignalWhileWaiting", TestWebhookDeliveryWorkflowRetrySignalWhileWaiting},
		{"ManualRetryAfterFailed", TestWebhookDeliveryWorkflowManualRetryAfterFailed},
		{"GoneStops", TestWebhookDeliveryWorkflowGoneStops},
		{"ActivityRetryKeepsAttemptNumber", TestWebhookDeliveryWorkflowActivityRetryKeepsAttemptNumber},
		{"RealActivityAlwaysFailing", TestWebhookDeliveryWorkflowRealActivityAlwaysFailing},
		{"RetryDuringFinalAttempt", TestWebhookDeliveryWorkflowRetryDuringFinalAttempt},
	} {
		t.Run(tc.name, tc.f)
	}
}

// Entry ids made without a side effect are version 7 UUIDs in time order,
// in allocation order within a millisecond, and distinct across runs.
func TestEntryIDs(t *testing.T) {
	at := time.Date(2099, 1, 2, 3, 4, 5, 6e6, time.UTC)
	seen := map[string]bool{}
	var ids []string
	for _, run := range []string{"run-a", "run-b"} {
		for seq := 1; seq <= 300; seq++ {
			id := entryID(at, run, seq)
			u, err := uuid.Parse(id)
			if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
				t.Fatalf("%s: %v version %d variant %v", id, err, u.Version(), u.Variant())
			}
			if sec, nsec := u.Time().UnixTime(); time.Unix(sec, nsec).UnixMilli() != at.UnixMilli() {
				t.Fatalf("%s: time %v", id, time.Unix(sec, nsec))
			}
			if seen[id] {
				t.Fatalf("%s repeated", id)
			}
			seen[id] = true
			if run == "run-a" {
				ids = append(ids, id)
			}
		}
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatal("ids of one run in one millisecond are not in allocation order")
	}
	if later := entryID(at.Add(time.Millisecond), "run-a", 1); strings.Compare(later, ids[len(ids)-1]) <= 0 {
		t.Fatal("a later millisecond sorts first")
	}
	if entryID(at, "run-a", 7) != entryID(at, "run-a", 7) {
		t.Fatal("entry ids are not deterministic")
	}
}
