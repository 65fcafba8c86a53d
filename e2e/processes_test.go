package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/paygate/paygate/models/storetest"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/temporaldev"
)

// procSecret is the PAYGATE_SECRET_KEY of the processes under test.
const procSecret = "processes-test-secret-processes-test-secret"

// lockedBuffer collects a child process's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// child is a running paygate process.
type child struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan error
}

// buildPaygate compiles cmd/paygate into a temporary folder.
func buildPaygate(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "paygate")
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/paygate")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func loopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startChild runs `paygate args...` with env; cleanup kills it if the test
// did not stop it, and a failed test prints its output.
func startChild(t *testing.T, bin, name string, env []string, args ...string) *child {
	t.Helper()
	c := &child{name: name, out: &lockedBuffer{}, done: make(chan error, 1)}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Env = env
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("--- %s output ---\n%s", name, c.out.String())
		}
	})
	return c
}

// startBound starts `paygate args...` on n fresh loopback addresses (env
// turns them into its environment) and waits until its log says each is
// bound. loopbackAddr only probes a free port: another test of the package
// can take it before the child binds, and the child then exits while the
// test would talk to the other test's server (a readiness probe cannot tell
// them apart). Such a child is started again on fresh ports.
func startBound(t *testing.T, bin, name string, n int, env func(addrs []string) []string, args ...string) (*child, []string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		addrs := make([]string, n)
		for i := range addrs {
			addrs[i] = loopbackAddr(t)
		}
		c := startChild(t, bin, name, env(addrs), args...)
		err := c.waitBound(addrs, 60*time.Second)
		if err == nil {
			return c, addrs
		}
		if attempt < 5 && strings.Contains(c.out.String(), "address already in use") {
			t.Logf("%s: a port was taken before it bound; again on fresh ports", name)
			_ = c.cmd.Process.Kill() // exited already, unless one listener is up
			continue
		}
		t.Fatalf("%s: %v\n%s", name, err, c.out.String())
	}
}

// waitBound waits until the child's log names each address as one it
// listens on ("API listening", "metrics listening"), or it exits.
func (c *child) waitBound(addrs []string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		out := c.out.String()
		bound := 0
		for _, a := range addrs {
			if strings.Contains(out, `"addr":"http://`+a+`"`) {
				bound++
			}
		}
		if bound == len(addrs) {
			return nil
		}
		select {
		case err := <-c.done:
			c.done <- err
			return fmt.Errorf("exited before it listened: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %v after %s", addrs, within)
		}
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (c *child) stop(t *testing.T, within time.Duration) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signal %s: %v", c.name, err)
	}
	select {
	case err := <-c.done:
		c.done <- err // for the cleanup
		if err != nil {
			t.Errorf("%s exited with %v after SIGTERM", c.name, err)
		}
	case <-time.After(within):
		t.Errorf("%s still running %s after SIGTERM", c.name, within)
	}
}

// waitReady polls base+/readyz until it answers 200.
func waitReady(t *testing.T, c *child, base string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		res, err := http.Get(base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		select {
		case err := <-c.done:
			c.done <- err
			t.Fatalf("%s exited before it was ready: %v", c.name, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready at %s after %s (last: %v)", c.name, base, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// procAPI calls the API of a process over HTTP.
type procAPI struct {
	t    *testing.T
	base string
}

func (p procAPI) call(method, path, token string, body any, want int) map[string]any {
	p.t.Helper()
	var rdr io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rdr = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, p.base+path, rdr)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		p.t.Fatalf("%s %s: %d, want %d: %s", method, path, res.StatusCode, want, raw)
	}
	var env map[string]any
	if err := json.Unmarshal(raw, &env); err != nil {
		p.t.Fatalf("%s %s: not JSON: %s", method, path, raw)
	}
	d, _ := env["data"].(map[string]any)
	return d
}

func scrape(t *testing.T, base string) string {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("%s/metrics: %d", base, res.StatusCode)
	}
	return string(b)
}

// TestSeparateProcesses runs the production shape: `paygate migrate`, then
// `paygate api` and `paygate worker` as separate child processes built from
// cmd/paygate, on PostgreSQL (a fresh schema), an external Temporal (a dev
// server) and the dev chain, all on loopback. A checkout goes from signup to
// complete through the API process while the worker process confirms the
// on-chain payment. Then the metrics of both processes show the requests by
// route, the session's outcome and the Temporal SDK's metrics, no
// credential appears in either log, and both stop cleanly on SIGTERM.
func TestSeparateProcesses(t *testing.T) {
	dbURL := storetest.PostgresURL(t)
	ts := temporaldev.StartForTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dc, err := devchain.Start(ctx, devchain.Config{Port: devchain.AnyPort, BlockInterval: 250 * time.Millisecond})
	if err != nil {
		t.Fatalf("dev chain: %v", err)
	}
	t.Cleanup(func() { _ = dc.Close() })
	bin := buildPaygate(t)

	suffix := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"PAYGATE_PROFILE=production",
		// The test polls from loopback faster than the read tier allows.
		"RATE_LIMIT_EXEMPT_LOOPBACK=true",
		"PAYGATE_SECRET_KEY=" + procSecret,
		"PAYGATE_DATA_DIR=" + t.TempDir(),
		"DATABASE_URL=" + dbURL,
		// Required in production; the API's bound address replaces it
		// (the last of duplicate keys wins).
		"PAYGATE_PUBLIC_URL=http://127.0.0.1",
		"TEMPORAL_ADDRESS=" + ts.Address(),
		"TEMPORAL_NAMESPACE=" + ts.Namespace(),
		"TEMPORAL_TASK_QUEUE_CHECKOUT=checkout-" + suffix,
		"TEMPORAL_TASK_QUEUE_WEBHOOKS=webhooks-" + suffix,
		"RPC_URL_BASE_SEPOLIA=" + dc.RPCURL(),
		fmt.Sprintf("CHAIN_ID_BASE_SEPOLIA=%d", dc.ChainID()),
		"USDC_BASE_SEPOLIA=" + dc.USDC().Hex(),
		"CONFIRMATIONS_BASE_SEPOLIA=2",
		"POLL_INTERVAL_BASE_SEPOLIA=200ms",
		"LOG_LEVEL=info",
	}

	// The schema first, once: api and worker would race on an empty database.
	mig := exec.Command(bin, "migrate")
	mig.Env = env
	if out, err := mig.CombinedOutput(); err != nil {
		t.Fatalf("paygate migrate: %v\n%s", err, out)
	}
	// A namespace that does not exist stops the API at once, named (the
	// dial alone does not look at it: the API answered 201 to sessions
	// whose workflows never started).
	bctx, bcancel := context.WithTimeout(ctx, 60*time.Second)
	defer bcancel()
	bad := exec.CommandContext(bctx, bin, "api")
	bad.Env = append(slices.Clone(env), "TEMPORAL_NAMESPACE=nope-"+suffix, "PAYGATE_ADDR=127.0.0.1:0")
	if out, err := bad.CombinedOutput(); err == nil || bctx.Err() != nil || !strings.Contains(string(out), "TEMPORAL_NAMESPACE") {
		t.Fatalf("paygate api on a namespace that does not exist: %v\n%s", err, out)
	}
	// One API and two workers: each kind scales on its own (the second
	// worker differs only in its metrics address).
	apiProc, addrs := startBound(t, bin, "paygate api", 2, func(a []string) []string {
		return append(slices.Clone(env), "PAYGATE_ADDR="+a[0], "PAYGATE_PUBLIC_URL=http://"+a[0], "PAYGATE_METRICS_ADDR="+a[1])
	}, "api")
	apiAddr, apiOpsAddr := addrs[0], addrs[1]
	env = append(env, "PAYGATE_ADDR="+apiAddr, "PAYGATE_PUBLIC_URL=http://"+apiAddr)
	workerEnv := func(a []string) []string { return append(slices.Clone(env), "WORKER_METRICS_ADDR="+a[0]) }
	workerProc, addrs := startBound(t, bin, "paygate worker", 1, workerEnv, "worker")
	workerAddr := addrs[0]
	worker2Proc, addrs := startBound(t, bin, "paygate worker #2", 1, workerEnv, "worker")
	worker2Addr := addrs[0]
	apiBase, workerBase, worker2Base := "http://"+apiAddr, "http://"+workerAddr, "http://"+worker2Addr
	waitReady(t, apiProc, apiBase, 60*time.Second)
	waitReady(t, workerProc, workerBase, 60*time.Second)
	waitReady(t, worker2Proc, worker2Base, 60*time.Second)

	p := procAPI{t: t, base: apiBase}
	d := p.call("POST", "/api/auth/signup", "", map[string]any{"email": "proc-" + suffix + "@example.com",
		"password": "correct horse battery", "businessName": "Process Shop"}, 201)
	key := d["testKey"].(map[string]any)["fullKey"].(string)
	session := d["sessionToken"].(string)
	p.call("PATCH", "/api/merchant", session, map[string]any{"wallets": map[string]any{"evm": merchantWallet}}, 200)
	link := p.call("POST", "/api/payment-links", key, map[string]any{"name": "Mug", "amount": "12.00", "network": "base_sepolia"}, 201)["id"].(string)
	q := p.call("POST", "/api/checkout/quote", "", map[string]any{"linkId": link, "network": "base_sepolia",
		"customer": map[string]any{"country": "DE", "address": "Berlin"}}, 200)
	sess := p.call("POST", "/api/checkout/session", "", map[string]any{
		"linkId": link, "quoteToken": q["quoteToken"], "walletAddress": dc.Customer().Hex(),
		"walletType": "evm", "network": "base_sepolia",
		"customer": map[string]any{"name": "Ann", "email": "ann@example.com", "address": "Berlin", "country": "DE"},
		"totalsSnapshot": map[string]any{"subtotalCents": q["subtotalCents"], "taxCents": q["taxCents"],
			"totalCents": q["totalCents"], "calculationId": q["calculationId"]},
	}, 201)
	id := sess["id"].(string)

	// Pay what the session asks, from the dev chain's customer, as a wallet would.
	got := p.call("GET", "/api/checkout/session/"+id, "", nil, 200)["session"].(map[string]any)
	units, ok := new(big.Int).SetString(fmt.Sprint(got["amountUnits"]), 10)
	if !ok || units.Sign() <= 0 {
		t.Fatalf("session amountUnits %v", got["amountUnits"])
	}
	if !strings.EqualFold(fmt.Sprint(got["tokenAddress"]), dc.USDC().Hex()) {
		t.Fatalf("session token %v, want the dev chain's USDC %s (RegistryFromEnv overrides)", got["tokenAddress"], dc.USDC().Hex())
	}
	hash, err := devchain.PayUSDC(ctx, dc.RPCURL(), dc.CustomerKey(), dc.USDC(), common.HexToAddress(fmt.Sprint(got["merchantWalletAddress"])), units)
	if err != nil {
		t.Fatal(err)
	}
	sub := p.call("POST", "/api/checkout/submit", "", map[string]any{"sessionId": id, "txHash": hash}, 200)
	if sub["status"] != "txn_broadcast" {
		t.Fatalf("submit answered %v", sub)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := p.call("GET", "/api/checkout/session/"+id, "", nil, 200)["session"].(map[string]any)
		if s["status"] == "complete" {
			break
		}
		if s["status"] == "failed" || s["status"] == "expired" || s["status"] == "cancelled" {
			t.Fatalf("session ended %v: %v", s["status"], s)
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s is %v after 60s, want complete", id, s["status"])
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Metrics, on the API process's own operational listener
	// (PAYGATE_METRICS_ADDR), not its public port: it counts requests by
	// route and reports its Temporal client; the worker process counts the outcome and reports
	// the SDK's worker metrics.
	apiMetrics := scrape(t, "http://"+apiOpsAddr)
	if res, err := http.Get(apiBase + "/metrics"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("the API's public port must not serve /metrics: %v %v", err, res)
	} else {
		res.Body.Close()
	}
	for _, want := range []string{
		`paygate_http_requests_total{method="POST",route="/api/checkout/submit",status="200"} 1`,
		`paygate_http_requests_total{method="GET",route="/api/checkout/session/:id",status="200"}`,
		`paygate_http_request_duration_seconds_bucket{method="POST",route="/api/checkout/session",status="201"`,
		`temporal_request{`,
	} {
		if !strings.Contains(apiMetrics, want) {
			t.Errorf("API /metrics lacks %s", want)
		}
	}
	if strings.Contains(apiMetrics, id) {
		t.Error("a raw session id became a metric label")
	}
	// The session's outcome is counted once, by whichever worker ran it.
	const completeSeries = `paygate_checkout_sessions_total{outcome="complete",reason=""}`
	var workerMetrics string
	var completes float64
	deadline = time.Now().Add(10 * time.Second)
	for {
		m1, m2 := scrape(t, workerBase), scrape(t, worker2Base)
		workerMetrics = m1 + "\n" + m2
		completes = seriesValue(m1, completeSeries) + seriesValue(m2, completeSeries)
		if completes >= 1 || time.Now().After(deadline) {
			for _, m := range []string{m1, m2} {
				if !strings.Contains(m, `temporal_num_pollers{`) {
					t.Errorf("a worker's /metrics lacks temporal_num_pollers")
				}
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if completes != 1 {
		t.Errorf("the workers counted %v complete sessions, want 1", completes)
	}
	for _, want := range []string{
		// The checkout's store writes and chain checks are local activities.
		`temporal_local_activity_execution_latency_bucket{`,
		`temporal_workflow_task_execution_latency_bucket{`,
	} {
		if !strings.Contains(workerMetrics, want) {
			t.Errorf("worker /metrics lacks %s", want)
		}
	}

	// Graceful shutdown of both.
	apiProc.stop(t, 30*time.Second)
	workerProc.stop(t, 30*time.Second)
	worker2Proc.stop(t, 30*time.Second)

	// Logs: JSON lines, request lines with their id, no credential anywhere.
	for _, c := range []*child{apiProc, workerProc, worker2Proc} {
		out := c.out.String()
		for _, prefix := range []string{"svc_test_sk_", "svc_live_sk_", "svc_sess_", "whsec_"} {
			if strings.Contains(out, prefix) {
				t.Errorf("%s logged %q", c.name, prefix)
			}
		}
		requests := 0
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("%s: not a JSON log line: %q", c.name, line)
				continue
			}
			if rec["msg"] == "request" {
				requests++
				if id, _ := rec["requestId"].(string); id == "" {
					t.Errorf("%s: request line without requestId: %s", c.name, line)
				}
			}
		}
		if c == apiProc && requests < 8 {
			t.Errorf("API logged %d request lines", requests)
		}
	}
}

// seriesValue returns the value of the exposition line that starts with
// series (name and labels), or 0.
func seriesValue(exposition, series string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return 0
}
