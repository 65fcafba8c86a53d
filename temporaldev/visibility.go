package temporaldev

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	_ "github.com/glebarez/go-sqlite" // database/sql driver "sqlite", the pure-Go SQLite the server also runs
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// The dev server's visibility store is one SQLite table, executions_visibility
// (Temporal's schema/sqlite/v3/visibility/schema.sql), which the schema
// indexes 45 times beside its primary key: once per system column, predefined
// search attribute and pre-allocated custom attribute slot. Every index key
// ends in the close time, so each visibility write (a workflow's start, its
// search attribute upserts and its close) rewrites every one of them: in an
// expiry storm the records written when workflows close were 30% of the
// server's CPU, the largest single piece of its work.
//
// Most of those indexes serve nothing paygate or an operator asks: custom
// attribute slots no namespace uses, and filters on columns such as
// HistoryLength or the deployment attributes of worker versioning. A query on
// such a column still works without its index (SQLite then reads the
// namespace's rows in order, a few milliseconds on a dev database);
// visibility writes get cheaper for every index removed. make bench, 1,000
// sessions due in one second, runs alternated in one sitting: 51 and 59 ->
// 65-77 lifecycles/s, the server's CPU -10 to -20%.
//
// pruneVisibilityIndexes keeps the indexes of the Web UI's workflow list
// (default order, workflow id, type, status, task queue, execution time; the
// namespace division, which separates schedules from workflows) and of every
// custom attribute slot some namespace uses, creating those again if an
// earlier start dropped them; it drops the rest. It runs at every Start, after
// the search attributes are registered. The server never runs its schema on an
// existing state file again, so what it drops stays dropped; a state file
// kept in memory (no DataDir) is not reachable and keeps the full schema.
// Pruning is only a cost saving: Start logs a failure and goes on.

// unqueriedVisibilityIndexes are the schema's indexes on system columns and
// predefined attributes that neither paygate nor the Web UI's workflow list
// filters on.
var unqueriedVisibilityIndexes = []string{
	"by_history_length", "by_history_size_bytes", "by_execution_duration", "by_state_transition_count",
	"by_parent_workflow_id", "by_parent_run_id", "by_root_workflow_id", "by_root_run_id",
	"by_batcher_user", "by_temporal_scheduled_start_time", "by_temporal_scheduled_by_id",
	"by_temporal_schedule_paused", "by_temporal_pause_info",
	"by_temporal_worker_deployment_version", "by_temporal_workflow_versioning_behavior",
	"by_temporal_worker_deployment",
}

// customSlots are the pre-allocated custom attribute columns that have a
// b-tree index (Text and KeywordList slots are full-text indexed instead), by
// type and count.
var customSlots = []struct {
	kind  string
	count int
}{{"Bool", 3}, {"Datetime", 3}, {"Double", 3}, {"Int", 3}, {"Keyword", 10}}

// visibilityIndexPlan returns the statements that drop the indexes nobody
// queries and keep (or make again) those of the slots in used, a set of
// column names such as "Keyword03".
func visibilityIndexPlan(used map[string]bool) []string {
	var stmts []string
	for _, name := range unqueriedVisibilityIndexes {
		stmts = append(stmts, "DROP INDEX IF EXISTS "+name)
	}
	for _, slot := range customSlots {
		for i := 1; i <= slot.count; i++ {
			col := fmt.Sprintf("%s%02d", slot.kind, i)
			index := fmt.Sprintf("by_%s_%02d", strings.ToLower(slot.kind), i)
			if !used[col] {
				stmts = append(stmts, "DROP INDEX IF EXISTS "+index)
				continue
			}
			// As the schema creates it.
			stmts = append(stmts, fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON executions_visibility "+
				"(namespace_id, %s, (COALESCE(close_time, '9999-12-31 23:59:59+00:00')) DESC, start_time DESC, run_id)", index, col))
		}
	}
	return stmts
}

// unindexedAttributes are custom attributes whose slot keeps no index:
// DeliveryStatus marks the rare failed delivery, asked for by an operator
// now and then (a scan of the namespace's rows answers it), while an index
// would cost every visibility write of every workflow.
var unindexedAttributes = map[string]bool{"DeliveryStatus": true}

// usedCustomSlots returns the custom attribute columns any namespace of the
// server maps an attribute to (unindexedAttributes left out).
func usedCustomSlots(ctx context.Context, c client.Client) (map[string]bool, error) {
	used := map[string]bool{}
	var token []byte
	for {
		resp, err := c.WorkflowService().ListNamespaces(ctx, &workflowservice.ListNamespacesRequest{NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("listing namespaces: %w", err)
		}
		for _, ns := range resp.GetNamespaces() {
			for col, alias := range ns.GetConfig().GetCustomSearchAttributeAliases() {
				if !unindexedAttributes[alias] {
					used[col] = true
				}
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return used, nil
		}
	}
}

// pruneVisibilityIndexes applies visibilityIndexPlan to the state file in one
// transaction, beside the running server (both wait for the other's lock:
// busy_timeout here and in devSQLitePragmas). It returns how many indexes the
// visibility table had before and has after.
func (s *Server) pruneVisibilityIndexes(ctx context.Context, c client.Client) (before, after int, err error) {
	if s.opts.DataDir == "" {
		return 0, 0, nil
	}
	used, err := usedCustomSlots(ctx, c)
	if err != nil {
		return 0, 0, err
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(s.opts.DataDir, DBFileName)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	conn, err := db.Conn(ctx) // BEGIN and COMMIT on the same connection
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	names, err := visibilityIndexes(ctx, conn)
	if err != nil || len(names) == 0 {
		return 0, 0, err // no visibility table: not the schema this plans for
	}
	before = len(names)
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return 0, 0, err
	}
	for _, stmt := range visibilityIndexPlan(used) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
			return 0, 0, fmt.Errorf("%s: %w", stmt, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		return 0, 0, err
	}
	names, err = visibilityIndexes(ctx, conn)
	return before, len(names), err
}

// visibilityIndexes lists the indexes of executions_visibility by name.
func visibilityIndexes(ctx context.Context, conn interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) ([]string, error) {
	rows, err := conn.QueryContext(ctx,
		"SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'executions_visibility' AND sql IS NOT NULL")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names, rows.Err()
}
