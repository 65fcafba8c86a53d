package models_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
)

// TestStatementsPerLifecycle counts the statements of an expired session's
// store work, from its outcome to its delivery answered: on PostgreSQL each
// is a round trip, and the expiry storm is bound by them (issue 16's
// PostgreSQL storm). A statement added to this path shows here first.
func TestStatementsPerLifecycle(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		cs := newLinkFixture(t, st, "count@example.com", "checkout.expired").session("0x" + strings.Repeat("3", 64))
		var res models.FinishResult
		finish := st.CaptureStatements(func() {
			var err error
			res, err = st.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusExpired,
				Source: "server", At: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
		})
		if len(res.Deliveries) != 1 {
			t.Fatalf("deliveries %v", res.Deliveries)
		}
		deliver := st.CaptureStatements(func() {
			if _, err := st.DeliveryTarget(ctx, res.Deliveries[0]); err != nil {
				t.Fatal(err)
			}
			if err := st.RecordDeliveryAttempt(ctx, models.AttemptRecord{DeliveryID: res.Deliveries[0], Attempt: 1, ResponseStatus: 200,
				At: time.Now(), Status: models.DeliveryDelivered}); err != nil {
				t.Fatal(err)
			}
		})
		// The outcome: the session read, its history entry, its status,
		// the event, the endpoints, the delivery (the link is read for a
		// payment only). The delivery: its target, its read model, the
		// attempt row.
		want := map[string][]string{
			"expiry":   {"SELECT checkout_sessions", "INSERT checkout_session_events", "UPDATE checkout_sessions", "INSERT events", "SELECT webhook_endpoints", "INSERT webhook_deliveries"},
			"delivery": {"SELECT webhook_endpoints", "UPDATE webhook_deliveries", "INSERT delivery_attempts"},
		}
		for name, got := range map[string][]string{"expiry": finish, "delivery": deliver} {
			var short []string
			for _, q := range got {
				short = append(short, shortStatement(q))
			}
			if strings.Join(short, ", ") != strings.Join(want[name], ", ") {
				t.Errorf("%s: %d statements\n got: %s\nwant: %s", name, len(got), strings.Join(short, ", "), strings.Join(want[name], ", "))
			}
		}
	})
}

var (
	statementGroup = regexp.MustCompile(`\([^()]*\)`)
	statementTable = regexp.MustCompile(`(?i)^\s*(SELECT|INSERT|UPDATE|DELETE)\b(?:.*?\b(?:FROM|INTO)\s+|\s+)([a-z_]+)`)
)

// shortStatement names a statement by its verb and its table (the one
// outside any parenthesis: not a subquery's).
func shortStatement(q string) string {
	q = strings.NewReplacer("`", "", `"`, "").Replace(q)
	for {
		outer := statementGroup.ReplaceAllString(q, "")
		if outer == q {
			break
		}
		q = outer
	}
	m := statementTable.FindStringSubmatch(q)
	if m == nil {
		return q
	}
	return strings.ToUpper(m[1]) + " " + m[2]
}

// TestChainCursors: a stored scan cursor only moves forward (two workers
// store theirs), per network and kind.
func TestChainCursors(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, st *models.Store) {
		ctx := context.Background()
		if got, err := st.ChainCursorOf(ctx, "base", "references"); err != nil || got != 0 {
			t.Fatalf("none stored: %d %v", got, err)
		}
		for _, b := range []uint64{10, 5, 20} {
			if err := st.SaveChainCursor(ctx, "base", "references", b); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.SaveChainCursor(ctx, "base", "transfers", 7); err != nil {
			t.Fatal(err)
		}
		if got, _ := st.ChainCursorOf(ctx, "base", "references"); got != 20 {
			t.Fatalf("references cursor %d, want 20", got)
		}
		if got, _ := st.ChainCursorOf(ctx, "base", "transfers"); got != 7 {
			t.Fatalf("transfers cursor %d, want 7", got)
		}
	})
}
