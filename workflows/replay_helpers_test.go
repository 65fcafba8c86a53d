package workflows

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// replayHistories replays every saved history in files against wf, the
// current workflow code: a change that is not deterministic fails here.
func replayHistories(t *testing.T, files []string, wf any) {
	t.Helper()
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			replayer := worker.NewWorkflowReplayer()
			replayer.RegisterWorkflow(wf)
			if err := replayer.ReplayWorkflowHistoryFromJSONFile(webhookTestLogger(), file); err != nil {
				t.Fatalf("replay %s: %v", file, err)
			}
		})
	}
}

// replayMustDiverge proves a replay test has teeth: changed, registered
// under the workflow's name, must fail every saved history in files with a
// nondeterminism error, and for no other reason.
func replayMustDiverge(t *testing.T, files []string, name string, changed any) {
	t.Helper()
	for _, file := range files {
		replayer := worker.NewWorkflowReplayer()
		replayer.RegisterWorkflowWithOptions(changed, workflow.RegisterOptions{Name: name})
		err := replayer.ReplayWorkflowHistoryFromJSONFile(webhookTestLogger(), file)
		if err == nil {
			t.Fatalf("replay of %s with a changed workflow succeeded", file)
		}
		if msg := err.Error(); !strings.Contains(msg, "TMPRL1100") && !strings.Contains(msg, "nondeterministic") {
			t.Fatalf("replay of %s failed for another reason: %v", file, err)
		}
	}
}

// testClockStart is where the test environments' clocks start. It lies in
// the future on purpose: the SDK's test environment checks a local
// activity's deadline (its start on the test clock plus the timeout)
// against the wall clock, so a clock started in the past would time every
// local activity out at once.
var testClockStart = time.Date(2099, 11, 22, 3, 0, 0, 0, time.UTC)
