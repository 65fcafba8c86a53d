package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// benchGoal is one of issue 16's goals judged on one run's figures.
type benchGoal struct {
	Goal   string
	Figure string
	// Verdict is "met", "NOT MET" or "not measured" (its part did not run
	// or was skipped, e.g. no PostgreSQL).
	Verdict string
}

// goalsOf judges the goals on the rows of one `make bench` run.
// Where a goal is a ratio to a reference (create, poll, PostgreSQL poll),
// the reference is the one measured in the same run; the absolute goals
// (lifecycles/s, deliveries/s, latencies) are shown beside the same-run
// reference where there is one, since the machine's speed moves between
// sittings.
func goalsOf(rows []benchRow) []benchGoal {
	byKey := map[string]benchRow{}
	for _, r := range rows {
		if r.Key != "" {
			byKey[r.Key] = r
		}
	}
	val := func(key, name string) (float64, bool) {
		r, ok := byKey[key]
		if !ok {
			return 0, false
		}
		v, ok := r.Values[name]
		return v, ok
	}
	var out []benchGoal
	judge := func(goal string, measured, met bool, figure string, args ...any) {
		g := benchGoal{Goal: goal, Figure: fmt.Sprintf(figure, args...), Verdict: "met"}
		switch {
		case !measured:
			g.Figure, g.Verdict = "-", "not measured"
		case !met:
			g.Verdict = "NOT MET"
		}
		out = append(out, g)
	}

	// Lifecycles: both storm sizes must clear at 2x the 32/s.
	sRate, sOK := val("storm", "lifecyclesPerSec")
	sRef, _ := val("storm", "refLifecyclesPerSec")
	bRate, bOK := val("storm1000", "lifecyclesPerSec")
	var parts []string
	met := true
	if sOK {
		parts = append(parts, fmt.Sprintf("storm: %.0f/s (%.1fx the bare same-shape workflow's %.0f/s)", sRate, sRate/max(sRef, 1), sRef))
		met = met && sRate >= 64
	}
	if bOK {
		parts = append(parts, fmt.Sprintf("storm of 1,000: %.0f/s", bRate))
		met = met && bRate >= 64
	}
	judge("session lifecycles >= 64/s (2x the issue's 32, which was 1.3x its bare 24)", sOK || bOK, met, "%s", strings.Join(parts, "; "))

	bMax, mOK := val("storm1000", "expiredMaxMs")
	judge("1,000 due in one second: all expired within 60 s", mOK, bMax <= 60000, "last expired %.1f s after due", bMax/1000)
	b99, b99OK := val("storm1000", "expiredP99ms")
	judge("1,000 due in one second: expired lag p99 <= 10 s", b99OK, b99 <= 10000, "p99 %.2f s", b99/1000)

	st99, stOK := val("steady", "expiredP99ms")
	rate, _ := val("steady", "ratePerSec")
	judge("steady expiry at 70% of capacity: expired lag p99 < 250 ms", stOK, st99 < 250, "p99 %.0f ms at %.0f/s", st99, rate)
	sd99, sdOK := val("steady", "deliveredP99ms")
	judge("steady expiry: checkout.expired at the receiver p99 < 500 ms", sdOK, sd99 < 500, "p99 %.0f ms", sd99)

	c, cOK := val("create", "rps")
	cRef, _ := val("create", "refRps")
	judge("create >= 0.8x bare StartWorkflow", cOK && cRef > 0, c >= 0.8*cRef, "%.0f/s vs %.0f/s: %.2fx", c, cRef, c/max(cRef, 1))

	p, pOK := val("poll32", "rps")
	pRef, _ := val("poll32", "refRps")
	p99, _ := val("poll32", "p99ms")
	judge("poll at 32 clients >= 0.35x a bare Gin handler, p99 < 10 ms", pOK && pRef > 0, p >= 0.35*pRef && p99 < 10,
		"%.0f req/s vs %.0f: %.2fx; p99 %.1f ms", p, pRef, p/max(pRef, 1), p99)

	d, dOK := val("deliveries", "deliveriesPerSec")
	judge("webhook deliveries >= 100/s to a local receiver", dOK, d >= 100, "%.0f/s", d)

	pg1, ok1 := val("pgPoll1", "rps")
	pg8, ok8 := val("pgPoll8", "rps")
	pg32, ok32 := val("pgPoll32", "rps")
	judge("PostgreSQL: poll throughput never falls as clients are added", ok1 && ok8 && ok32, pg1 <= pg8 && pg8 <= pg32,
		"1/8/32 clients: %.0f/%.0f/%.0f req/s", pg1, pg8, pg32)
	pgRef, _ := val("pgPoll32", "refTPS")
	pg99, _ := val("pgPoll32", "p99ms")
	judge("PostgreSQL: poll at 32 clients >= 0.25x pgbench -S, p99 < 10 ms", ok32 && pgRef > 0, pg32 >= 0.25*pgRef && pg99 < 10,
		"%.0f req/s vs %.0f TPS: %.2fx; p99 %.1f ms", pg32, pgRef, pg32/max(pgRef, 1), pg99)
	// The PostgreSQL storm's reference is the SQLite storm alternated with
	// it; a run without those rounds compares with the embedded part's.
	pgS, pgSOK := val("pgStorm", "lifecyclesPerSec")
	pgSRef, refOK := val("pgStorm", "refLifecyclesPerSec")
	if !refOK {
		pgSRef, refOK = sRate, sOK
	}
	judge("PostgreSQL: expiry storm at least as fast as on SQLite", pgSOK && refOK, pgS >= pgSRef,
		"%.0f lifecycles/s vs SQLite's %.0f/s", pgS, pgSRef)
	var opened float64
	var pollRows int
	for _, k := range []string{"pgPoll1", "pgPoll8", "pgPoll32"} {
		if v, ok := val(k, "newSessions"); ok {
			opened += v
			pollRows++
		}
	}
	judge("PostgreSQL: no new database connections in steady state", pollRows > 0, opened == 0,
		"%.0f new sessions over %d polling runs of 5 s", opened, pollRows)

	exp, eOK := val("open", "expired")
	n, _ := val("open", "sessions")
	rss, _ := val("open", "temporalRSSDeltaMB")
	heap, _ := val("open", "heapDeltaMB")
	judge("open sessions on one worker: memory stated, every one expired", eOK && n > 0, exp == n,
		"%.0f open: heap +%.0f MB, Temporal RSS +%.0f MB; %.0f of %.0f expired", n, heap, rss, exp, n)
	return out
}

// TestBenchGoals checks the judge of `make bench`'s goals on made-up rows:
// a goal is met, missed or not measured by the figures, never by the run.
func TestBenchGoals(t *testing.T) {
	rows := []benchRow{
		{Key: "poll32", Values: map[string]float64{"rps": 20000, "refRps": 40000, "p99ms": 6}},
		{Key: "create", Values: map[string]float64{"rps": 70, "refRps": 100}},
		{Key: "storm", Values: map[string]float64{"lifecyclesPerSec": 80, "refLifecyclesPerSec": 30}},
		{Key: "storm1000", Values: map[string]float64{"lifecyclesPerSec": 60, "expiredP99ms": 12000, "expiredMaxMs": 14000}},
		{Key: "pgPoll1", Values: map[string]float64{"rps": 100, "newSessions": 0}},
		{Key: "pgPoll8", Values: map[string]float64{"rps": 90, "newSessions": 2}},
	}
	verdicts := map[string]string{}
	for _, g := range goalsOf(rows) {
		verdicts[g.Goal] = g.Verdict
	}
	want := map[string]string{
		"poll at 32 clients >= 0.35x a bare Gin handler, p99 < 10 ms":                "met",
		"create >= 0.8x bare StartWorkflow":                                          "NOT MET",
		"session lifecycles >= 64/s (2x the issue's 32, which was 1.3x its bare 24)": "NOT MET", // the storm of 1,000 is under
		"1,000 due in one second: all expired within 60 s":                           "met",
		"1,000 due in one second: expired lag p99 <= 10 s":                           "NOT MET",
		"steady expiry at 70% of capacity: expired lag p99 < 250 ms":                 "not measured",
		"webhook deliveries >= 100/s to a local receiver":                            "not measured",
		"PostgreSQL: poll throughput never falls as clients are added":               "not measured", // no 32-client row
		"PostgreSQL: no new database connections in steady state":                    "NOT MET",
		"open sessions on one worker: memory stated, every one expired":              "not measured",
		"PostgreSQL: expiry storm at least as fast as on SQLite":                     "not measured",
		"PostgreSQL: poll at 32 clients >= 0.25x pgbench -S, p99 < 10 ms":            "not measured",
		"steady expiry: checkout.expired at the receiver p99 < 500 ms":               "not measured",
	}
	for goal, v := range want {
		if verdicts[goal] != v {
			t.Errorf("%q: %q, want %q", goal, verdicts[goal], v)
		}
	}
	if len(verdicts) != len(want) {
		t.Errorf("%d goals judged, want %d", len(verdicts), len(want))
	}

	// The PostgreSQL storm is judged against the SQLite storms alternated
	// with it when it has them, else against the embedded part's storm.
	const pgGoal = "PostgreSQL: expiry storm at least as fast as on SQLite"
	for _, c := range []struct {
		pg   map[string]float64
		want string
	}{
		{map[string]float64{"lifecyclesPerSec": 75, "refLifecyclesPerSec": 70}, "met"},
		{map[string]float64{"lifecyclesPerSec": 75, "refLifecyclesPerSec": 76}, "NOT MET"},
		{map[string]float64{"lifecyclesPerSec": 75}, "NOT MET"}, // the storm row's 80
		{map[string]float64{"lifecyclesPerSec": 85}, "met"},
	} {
		rows := []benchRow{{Key: "storm", Values: map[string]float64{"lifecyclesPerSec": 80}}, {Key: "pgStorm", Values: c.pg}}
		for _, g := range goalsOf(rows) {
			if g.Goal == pgGoal && g.Verdict != c.want {
				t.Errorf("%v: %q, want %q (%s)", c.pg, g.Verdict, c.want, g.Figure)
			}
		}
	}
}

// The bench's CPU readings: /proc's ticks as seconds, this process's CPU
// growing with work, the machine's idle CPU readable.
func TestBenchCPUReadings(t *testing.T) {
	if got := tickSeconds("150", "50"); got != 2 {
		t.Fatalf("tickSeconds = %v", got)
	}
	before := processCPU(os.Getpid())
	sum := 0
	for start := time.Now(); processCPU(os.Getpid()) <= before; {
		for i := range 1_000_000 {
			sum += i
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("this process's CPU stayed at %v s over 20 s of work (%d)", before, sum)
		}
	}
	if idleCPU() <= 0 {
		t.Fatal("no idle CPU read from /proc/stat")
	}
}
