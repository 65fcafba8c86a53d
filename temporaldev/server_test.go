package temporaldev

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"
)

var checkoutStatus = temporal.NewSearchAttributeKeyKeyword("CheckoutStatus")

// TestRestartKeepsStateAndReappliesSetup boots a server twice on one data
// dir: the workflow started before the restart is still there and found by a
// CheckoutStatus query, and the second boot adds the search attributes the
// first lacked and raises a retention lowered in between.
func TestRestartKeepsStateAndReappliesSetup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := Options{
		Binary:           binaryForTest(t),
		DataDir:          t.TempDir(),
		Port:             freePort(t),
		SearchAttributes: map[string]enumspb.IndexedValueType{"CheckoutStatus": enumspb.INDEXED_VALUE_TYPE_KEYWORD},
	}
	const id = "checkout:restart-test"

	srv := startOrFatal(t, opts)
	c := dialOrFatal(t, srv)
	wantSearchAttributes(t, ctx, c, DefaultNamespace, opts.SearchAttributes)
	wantRetention(t, ctx, c, DefaultNamespace, DefaultRetention)
	// A workflow type nobody polls: it stays running, in state only.
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             "temporaldev-test-unpolled",
		TypedSearchAttributes: temporal.NewSearchAttributes(checkoutStatus.ValueSet("open")),
	}, "NobodyPollsThisWorkflow")
	if err != nil {
		t.Fatalf("start workflow: %v", err)
	}
	wantListed(t, ctx, c, `CheckoutStatus = "open"`, id)
	wantVisibilityIndexes(t, ctx, c, opts.DataDir, 1)
	// Lower the retention by hand: the next boot must raise it again.
	if _, err := c.WorkflowService().UpdateNamespace(ctx, &workflowservice.UpdateNamespaceRequest{
		Namespace: srv.Namespace(),
		Config:    &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: durationpb.New(48 * time.Hour)},
	}); err != nil {
		t.Fatalf("lower retention: %v", err)
	}
	wantRetention(t, ctx, c, DefaultNamespace, 48*time.Hour)
	c.Close()
	if err := srv.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	opts.SearchAttributes = PaygateSearchAttributes()
	srv = startOrFatal(t, opts)
	defer func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	c = dialOrFatal(t, srv)
	defer c.Close()
	wantSearchAttributes(t, ctx, c, DefaultNamespace, PaygateSearchAttributes())
	wantRetention(t, ctx, c, DefaultNamespace, DefaultRetention)

	desc, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatalf("describe workflow after restart: %v", err)
	}
	if got := desc.GetWorkflowExecutionInfo(); got.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || got.GetExecution().GetRunId() != run.GetRunID() {
		t.Fatalf("after restart: status %v run %s, want RUNNING run %s", got.GetStatus(), got.GetExecution().GetRunId(), run.GetRunID())
	}
	wantListed(t, ctx, c, `CheckoutStatus = "open" AND WorkflowType = "NobodyPollsThisWorkflow"`, id)
	// The slots of the attributes added have their indexes again; a filter
	// on a column whose index was dropped still finds the workflow.
	wantVisibilityIndexes(t, ctx, c, opts.DataDir, len(PaygateSearchAttributes())-len(unindexedAttributes))
	wantListed(t, ctx, c, `RootWorkflowId = "`+id+`"`, id)

	// The second boot added attributes to an existing database, which the
	// server's services would not see for a minute (their cache is no
	// longer refreshed on every read): Start restarted it, so a workflow
	// upserts a new attribute at once and is found by it.
	if !strings.Contains(srv.out.String(), "restarted the server") {
		t.Errorf("the boot that added search attributes did not restart the server; output:\n%s", srv.out)
	}
	const queue = "temporaldev-test-new-attribute"
	w := worker.New(c, queue, worker.Options{})
	merchant := temporal.NewSearchAttributeKeyKeyword("MerchantId")
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, id string) error {
		return workflow.UpsertTypedSearchAttributes(ctx, merchant.ValueSet(id))
	}, workflow.RegisterOptions{Name: "SetMerchant"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	defer wcancel()
	wrun, err := c.ExecuteWorkflow(wctx, client.StartWorkflowOptions{ID: "merchant:new-attribute", TaskQueue: queue}, "SetMerchant", "m-1")
	if err == nil {
		err = wrun.Get(wctx, nil)
	}
	if err != nil {
		t.Fatalf("workflow upserting an attribute added at boot: %v", err)
	}
	wantListed(t, ctx, c, `MerchantId = "m-1" AND ExecutionStatus = "Completed"`, "merchant:new-attribute")
	wantListed(t, ctx, c, `HistoryLength > 0 AND StateTransitionCount > 0`, "merchant:new-attribute")

	t.Run("RegisterSearchAttributes is idempotent", func(t *testing.T) {
		if err := RegisterSearchAttributes(ctx, c, srv.Namespace(), PaygateSearchAttributes()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("RegisterSearchAttributes refuses a type change", func(t *testing.T) {
		err := RegisterSearchAttributes(ctx, c, srv.Namespace(), map[string]enumspb.IndexedValueType{"CheckoutStatus": enumspb.INDEXED_VALUE_TYPE_TEXT})
		if !errors.Is(err, ErrSearchAttributeConflict) {
			t.Fatalf("got %v, want ErrSearchAttributeConflict", err)
		}
	})
	t.Run("EnsureRetention never lowers", func(t *testing.T) {
		if err := EnsureRetention(ctx, c, srv.Namespace(), time.Hour); err != nil {
			t.Fatal(err)
		}
		wantRetention(t, ctx, c, DefaultNamespace, DefaultRetention)
	})
}

// wantVisibilityIndexes checks that the state file in dataDir indexes the
// visibility table as pruneVisibilityIndexes leaves it: the Web UI list's
// indexes and one per custom attribute slot in use (customs of them, all
// Keyword slots: paygate's attributes are keywords).
func wantVisibilityIndexes(t *testing.T, ctx context.Context, c client.Client, dataDir string, customs int) {
	t.Helper()
	used, err := usedCustomSlots(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(used) != customs {
		t.Fatalf("custom attribute slots in use: %v, want %d", used, customs)
	}
	want := []string{"by_execution_time", "by_status", "by_task_queue", "by_temporal_namespace_division",
		"by_workflow_id", "by_workflow_type", "default_idx"}
	for col := range used {
		want = append(want, "by_keyword_"+strings.TrimPrefix(col, "Keyword"))
	}
	slices.Sort(want)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dataDir, DBFileName)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := visibilityIndexes(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("visibility indexes:\n got %v\nwant %v", got, want)
	}
}

func TestVisibilityIndexPlan(t *testing.T) {
	plan := visibilityIndexPlan(map[string]bool{"Keyword03": true, "Int02": true})
	var drops, creates []string
	for _, stmt := range plan {
		if name, ok := strings.CutPrefix(stmt, "DROP INDEX IF EXISTS "); ok {
			drops = append(drops, name)
		} else {
			creates = append(creates, stmt)
		}
	}
	// 16 unqueried, 22 custom slots of which 2 used.
	if len(drops) != 16+20 || len(creates) != 2 {
		t.Fatalf("%d drops, %d creates; plan:\n%s", len(drops), len(creates), strings.Join(plan, "\n"))
	}
	for _, keep := range []string{"default_idx", "by_workflow_id", "by_status", "by_keyword_03", "by_int_02"} {
		if slices.Contains(drops, keep) {
			t.Errorf("the plan drops %s", keep)
		}
	}
	if !slices.Contains(drops, "by_keyword_04") || !slices.Contains(drops, "by_bool_01") || !slices.Contains(drops, "by_history_length") {
		t.Errorf("drops %v", drops)
	}
	wantCreate := "CREATE INDEX IF NOT EXISTS by_int_02 ON executions_visibility (namespace_id, Int02, " +
		"(COALESCE(close_time, '9999-12-31 23:59:59+00:00')) DESC, start_time DESC, run_id)"
	if !slices.Contains(creates, wantCreate) {
		t.Errorf("creates %v, want %s among them", creates, wantCreate)
	}
}

// TestStartForTest runs a workflow on a worker against the helper's server
// and finds it by the CheckoutStatus the workflow upserted.
func TestStartForTest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := StartForTest(t)
	if srv.UIURL() != "" {
		t.Errorf("UIURL() = %q, want headless", srv.UIURL())
	}
	c := dialOrFatal(t, srv)
	defer c.Close()
	wantSearchAttributes(t, ctx, c, DefaultNamespace, PaygateSearchAttributes())
	wantRetention(t, ctx, c, DefaultNamespace, DefaultRetention)

	const queue = "temporaldev-test"
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, status string) (string, error) {
		return status, workflow.UpsertTypedSearchAttributes(ctx, checkoutStatus.ValueSet(status))
	}, workflow.RegisterOptions{Name: "SetStatus"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "checkout:helper-test", TaskQueue: queue}, "SetStatus", "paid")
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := run.Get(ctx, &got); err != nil || got != "paid" {
		t.Fatalf("workflow result %q, %v", got, err)
	}
	wantListed(t, ctx, c, `CheckoutStatus = "paid" AND ExecutionStatus = "Completed"`, "checkout:helper-test")
}

// TestWebUIAndOtherNamespace starts a server with its UI, state in memory
// and a namespace of its own: the UI answers as soon as Start returns, and the
// namespace exists with the search attributes.
func TestWebUIAndOtherNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := startOrFatal(t, Options{
		Binary:           binaryForTest(t),
		Port:             freePort(t),
		UIPort:           freePort(t),
		Namespace:        "paygate-test",
		SearchAttributes: PaygateSearchAttributes(),
	})
	defer srv.kill()
	c := dialOrFatal(t, srv)
	defer c.Close()
	wantSearchAttributes(t, ctx, c, srv.Namespace(), PaygateSearchAttributes())
	wantRetention(t, ctx, c, srv.Namespace(), DefaultRetention)

	resp, err := http.Get(srv.UIURL())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(strings.ToLower(string(body)), "<html") {
		t.Fatalf("GET %s: %s, %.200q", srv.UIURL(), resp.Status, body)
	}
}

// TestWaitReportsUnexpectedExit kills the server behind the Server's back.
func TestWaitReportsUnexpectedExit(t *testing.T) {
	srv := startOrFatal(t, Options{Binary: binaryForTest(t), Port: freePort(t)})
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Wait(); err == nil || !strings.Contains(err.Error(), "exited unexpectedly") {
		t.Fatalf("Wait: got %v, want an unexpected-exit error", err)
	}
	if err := srv.Stop(); err == nil {
		t.Fatal("Stop after the server died: got nil, want the unexpected-exit error")
	}
}

func TestStartRefusesTakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	self, err := os.Executable() // any executable: Start must fail before running it
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), Options{Binary: self, Port: l.Addr().(*net.TCPAddr).Port})
	if !errors.Is(err, ErrPortInUse) {
		t.Fatalf("got %v, want ErrPortInUse", err)
	}
}

func TestMissingBinaryNamesTheBuildScript(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "temporal")
	_, err := Start(context.Background(), Options{Binary: missing})
	if !errors.Is(err, ErrBinaryNotFound) || !strings.Contains(err.Error(), "tools/build-temporal.sh") {
		t.Fatalf("Start: got %v, want ErrBinaryNotFound naming tools/build-temporal.sh", err)
	}
	t.Setenv(BinaryEnv, missing)
	if _, err := DefaultBinary(); !errors.Is(err, ErrBinaryNotFound) {
		t.Fatalf("DefaultBinary with %s=%s: got %v, want ErrBinaryNotFound", BinaryEnv, missing, err)
	}
}

// TestStartReportsEarlyExit uses a stand-in binary that fails at once: Start
// returns promptly with the binary's output in the error.
func TestStartReportsEarlyExit(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "temporal")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'boom: cannot open database' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err := Start(context.Background(), Options{Binary: bin, Port: freePort(t)})
	if !errors.Is(err, errExitedEarly) || !strings.Contains(err.Error(), "boom: cannot open database") {
		t.Fatalf("got %v, want an early-exit error with the output", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("Start took %s to notice the exit", d)
	}
}

// TestStartLaunchesAgainWhenAnInternalPortWasTaken uses a stand-in binary
// that, the first time, exits as start-dev does when another process took
// one of the ports it picked for its internal services, then runs the real
// server: Start launches again and returns a healthy server.
func TestStartLaunchesAgainWhenAnInternalPortWasTaken(t *testing.T) {
	real := binaryForTest(t)
	dir := t.TempDir()
	bin, once := filepath.Join(dir, "temporal"), filepath.Join(dir, "launched")
	script := "#!/bin/sh\nif [ ! -e " + once + " ]; then touch " + once +
		"; echo 'failed listening for HTTP API on 127.0.0.1:1: listen tcp 127.0.0.1:1: bind: address already in use' >&2; exit 1; fi\n" +
		"exec " + real + " \"$@\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := Start(ctx, Options{Binary: bin, Port: freePort(t)})
	if err != nil {
		t.Fatalf("Start did not launch again: %v", err)
	}
	defer srv.kill()
	if _, err := os.Stat(once); err != nil {
		t.Fatalf("the stand-in never ran its failing launch: %v", err)
	}
	if !strings.Contains(srv.out.String(), "launch 2: the one before lost a port") {
		t.Errorf("the server's output does not say it was launched again:\n%s", srv.out)
	}
}

func TestArgs(t *testing.T) {
	o, err := Options{Binary: os.Args[0], DataDir: "/data", UIPort: 8233, Namespace: "paygate",
		SearchAttributes: map[string]enumspb.IndexedValueType{"MerchantId": enumspb.INDEXED_VALUE_TYPE_KEYWORD,
			"CheckoutStatus": enumspb.INDEXED_VALUE_TYPE_KEYWORD}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(o.args(), " ")
	want := "server start-dev --ip 127.0.0.1 --port 7233 --log-level warn " +
		"--db-filename /data/temporal.db --sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=normal " +
		"--sqlite-pragma cache_size=-65536 --sqlite-pragma mmap_size=268435456 --sqlite-pragma wal_autocheckpoint=4000 --sqlite-pragma busy_timeout=10000 " +
		"--ui-port 8233 --namespace paygate " +
		"--search-attribute CheckoutStatus=Keyword --search-attribute MerchantId=Keyword " +
		"--dynamic-config-value frontend.enableServerVersionCheck=false " +
		"--dynamic-config-value matching.numTaskqueueReadPartitions=1 " +
		"--dynamic-config-value matching.numTaskqueueWritePartitions=1 " +
		"--dynamic-config-value system.forceSearchAttributesCacheRefreshOnRead=false"
	if got != want {
		t.Errorf("args:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(strings.Join(Options{}.args(), " "), "--headless") {
		t.Error("UIPort 0 must run headless")
	}
}

// startOrFatal starts a server with opts (on another port if its own was
// taken meanwhile, see startRetrying).
func startOrFatal(t *testing.T, opts Options) *Server {
	t.Helper()
	srv, err := startRetrying(t, time.Minute, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func dialOrFatal(t *testing.T, srv *Server) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{
		HostPort:  srv.Address(),
		Namespace: srv.Namespace(),
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantSearchAttributes(t *testing.T, ctx context.Context, c client.Client, namespace string, want map[string]enumspb.IndexedValueType) {
	t.Helper()
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		t.Fatal(err)
	}
	for name, typ := range want {
		if got, ok := resp.GetCustomAttributes()[name]; !ok || got != typ {
			t.Errorf("search attribute %s: got %v (registered %v), want %v", name, got, ok, typ)
		}
	}
}

func wantRetention(t *testing.T, ctx context.Context, c client.Client, namespace string, want time.Duration) {
	t.Helper()
	desc, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		t.Fatal(err)
	}
	if got := desc.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(); got != want {
		t.Errorf("retention %s, want %s", got, want)
	}
}

// wantListed waits for visibility (updated asynchronously) to list id for query.
func wantListed(t *testing.T, ctx context.Context, c client.Client, query, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil {
			t.Fatalf("ListWorkflow(%s): %v", query, err)
		}
		for _, e := range resp.GetExecutions() {
			if e.GetExecution().GetWorkflowId() == id {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ListWorkflow(%s) does not list %s: %d executions", query, id, len(resp.GetExecutions()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
