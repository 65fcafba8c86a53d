//go:build chaos

package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/webhook"
)

const chaosSecret = "chaos-suite-secret-chaos-suite-secret-0001"

// merchantWallet is the EVM wallet of a lane's merchant, its own per lane.
// The lanes share one dev chain, one customer and one price: with one
// wallet, a lane's worker saw another lane's payment as a plain transfer
// from its session's wallet of exactly its amount, and attached it to the
// one open session it would pay (checkout.attachPlain); a cancel of that
// session then answered 409 (already broadcast).
func merchantWallet(lane string) string {
	return common.BytesToAddress(crypto.Keccak256([]byte("chaos merchant " + lane))).Hex()
}

// world is what every scenario shares: the binary, the dev chain.
type world struct {
	t     *testing.T
	bin   string
	chain *devchain.Chain
}

// stackConfig describes one scenario's processes.
type stackConfig struct {
	name     string
	temporal string // host:port
	dbURL    string
	lifetime time.Duration
	// extra environment for both processes (REDIS_URL, rate limits...)
	env []string
}

// stack is one scenario's API and worker processes, its merchant and its
// webhook receivers.
type stack struct {
	t      *testing.T
	w      *world
	cfg    stackConfig
	env    []string
	api    *proc
	worker *proc
	base   string
	// workerOps is the worker's /readyz address.
	workerOps string
	client    *client
	db        string

	session, key, link string
	quote              map[string]any
	receivers          []*receiver
}

func (w *world) newStack(t *testing.T, cfg stackConfig, behaviours ...behaviour) *stack {
	// The random tail of the id: two stacks made in the same millisecond
	// must not share task queues.
	suffix := strings.ReplaceAll(models.NewID(), "-", "")[20:]
	apiAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := &stack{t: t, w: w, cfg: cfg, base: "http://" + apiAddr, workerOps: fmt.Sprintf("127.0.0.1:%d", freePort(t)), db: cfg.dbURL}
	lifetime := cfg.lifetime
	if lifetime == 0 {
		lifetime = 30 * time.Minute
	}
	s.env = envWith([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()},
		// The embedded profile with explicit settings: PostgreSQL, a fixed
		// secret, and the loopback allowance for the suite's receivers.
		"PAYGATE_PROFILE=embedded",
		"PAYGATE_SECRET_KEY="+chaosSecret,
		"PAYGATE_DATA_DIR="+t.TempDir(),
		"DATABASE_URL="+cfg.dbURL,
		"TEMPORAL_ADDRESS="+cfg.temporal,
		"TEMPORAL_NAMESPACE=default",
		"TEMPORAL_TASK_QUEUE_CHECKOUT=checkout-"+suffix,
		"TEMPORAL_TASK_QUEUE_WEBHOOKS=webhooks-"+suffix,
		"PAYGATE_ADDR="+apiAddr,
		"PAYGATE_METRICS_ADDR=off",
		"WORKER_METRICS_ADDR="+s.workerOps,
		"WEBHOOK_ALLOW_LOOPBACK=true",
		"RATE_LIMIT_EXEMPT_LOOPBACK=true",
		"CHECKOUT_LIFETIME="+lifetime.String(),
		"CHECKOUT_UPDATE_TIMEOUT=5s",
		"RPC_URL_BASE_SEPOLIA="+w.chain.RPCURL(),
		fmt.Sprintf("CHAIN_ID_BASE_SEPOLIA=%d", w.chain.ChainID()),
		"USDC_BASE_SEPOLIA="+w.chain.USDC().Hex(),
		"USDC_NAME_BASE_SEPOLIA="+devchain.TestUSDCName,
		"USDC_VERSION_BASE_SEPOLIA="+devchain.DomainVersion,
		"CONFIRMATIONS_BASE_SEPOLIA=2",
		"POLL_INTERVAL_BASE_SEPOLIA=250ms",
		"LOG_LEVEL=warn",
	)
	s.env = envWith(s.env, cfg.env...)
	mig := execEnv(s.w.bin, s.env, "migrate")
	if out, err := mig.CombinedOutput(); err != nil {
		t.Fatalf("%s: paygate migrate: %v\n%s", cfg.name, err, out)
	}
	s.api = startProc(t, cfg.name+" api", w.bin, s.env, "api")
	s.startWorker()
	s.client = &client{base: s.base}
	s.waitReady(s.base, s.api, 60*time.Second)
	s.waitReady("http://"+s.workerOps, s.worker, 60*time.Second)
	s.setupMerchant(behaviours)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- %s api output (tail) ---\n%s", cfg.name, s.api.out.String())
			t.Logf("--- %s worker output (tail) ---\n%s", cfg.name, s.worker.out.String())
		}
	})
	return s
}

func (s *stack) startWorker() {
	s.worker = startProc(s.t, s.cfg.name+" worker", s.w.bin, s.env, "worker")
}

// killWorker SIGKILLs the worker; restartWorker starts a new one.
func (s *stack) killWorker() { s.worker.kill() }

func (s *stack) restartWorker() {
	s.startWorker()
	s.waitReady("http://"+s.workerOps, s.worker, 60*time.Second)
}

func (s *stack) waitReady(base string, p *proc, within time.Duration) {
	t := s.t
	deadline := time.Now().Add(within)
	for {
		res, err := http.Get(base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		if p.exited() {
			t.Fatalf("%s exited: %v\n%s", p.name, p.err, p.out.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %s", p.name, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// setupMerchant signs up, sets the wallet, makes a link, registers one
// endpoint per behaviour and gets a quote every session reuses.
func (s *stack) setupMerchant(behaviours []behaviour) {
	t := s.t
	c := s.client
	email := "chaos-" + strings.ReplaceAll(models.NewID(), "-", "")[16:] + "@example.com"
	d := c.must(t, "POST", "/api/auth/signup", "", merchantIP, map[string]any{"email": email,
		"password": "correct horse battery", "businessName": "Chaos Shop " + s.cfg.name}, 201)
	s.key = d["testKey"].(map[string]any)["fullKey"].(string)
	s.session = d["sessionToken"].(string)
	c.must(t, "PATCH", "/api/merchant", s.session, merchantIP, map[string]any{"wallets": map[string]any{"evm": merchantWallet(s.cfg.name)}}, 200)
	s.link = c.must(t, "POST", "/api/payment-links", s.key, merchantIP, map[string]any{"name": "Mug", "amount": "12.00", "network": "base_sepolia"}, 201)["id"].(string)
	if len(behaviours) == 0 {
		behaviours = []behaviour{behaveOK}
	}
	for _, b := range behaviours {
		r := newReceiver(t, b)
		ep := c.must(t, "POST", "/api/webhooks", s.session, merchantIP, map[string]any{"url": r.URL() + "/hooks", "mode": "test",
			"events": []string{"checkout.completed", "checkout.failed", "checkout.cancelled", "checkout.expired", "payment.completed", "payment.failed"}}, 201)
		r.setSecret(ep["secret"].(string))
		s.receivers = append(s.receivers, r)
	}
	s.quote = c.must(t, "POST", "/api/checkout/quote", "", merchantIP, map[string]any{"linkId": s.link, "network": "base_sepolia",
		"customer": map[string]any{"country": "DE", "address": "Berlin"}}, 200)
}

// merchantIP is the address the merchant's own calls come from (rate
// limits apply per address when loopback is not exempt).
const merchantIP = "192.0.2.1"

// createSession opens a session for the dev chain's customer; ip is the
// customer's address (X-Forwarded-For).
func (s *stack) createSession(ip string) (id string, units *big.Int, err error) {
	q := s.quote
	d, err := s.client.call("POST", "/api/checkout/session", "", ip, map[string]any{
		"linkId": s.link, "quoteToken": q["quoteToken"], "walletAddress": s.w.chain.Customer().Hex(),
		"walletType": "evm", "network": "base_sepolia",
		"customer": map[string]any{"name": "Ann", "email": "ann@example.com", "address": "Berlin", "country": "DE"},
		"totalsSnapshot": map[string]any{"subtotalCents": q["subtotalCents"], "taxCents": q["taxCents"],
			"totalCents": q["totalCents"], "calculationId": q["calculationId"]},
	}, 201)
	if err != nil {
		return "", nil, err
	}
	u, ok := new(big.Int).SetString(fmt.Sprint(d["amountUnits"]), 10)
	if !ok {
		return "", nil, fmt.Errorf("amountUnits %v", d["amountUnits"])
	}
	return d["id"].(string), u, nil
}

// createSessions opens n sessions with a few requests in flight.
func (s *stack) createSessions(n int, ipOf func(i int) string) []string {
	t := s.t
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 6)
	var mu sync.Mutex
	var errs []error
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ip := "198.18.0.1"
			if ipOf != nil {
				ip = ipOf(i)
			}
			id, _, err := s.createSession(ip)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%s: %d sessions not created: %v", s.cfg.name, len(errs), errs[0])
	}
	return ids
}

// pay signs the session's EIP-3009 authorization (bound to the session by
// its payment reference) from the dev customer and broadcasts it.
func (s *stack) pay(id string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		p, err := devchain.Pay(ctx, devchain.PayOptions{APIBase: s.base, SessionID: id, RPCURL: s.w.chain.RPCURL(), NoSubmit: true})
		if err == nil {
			return p.TxHash, nil
		}
		last = err
		time.Sleep(500 * time.Millisecond)
	}
	return "", last
}

// submit attaches the hash; a retried submit whose first try was applied
// meanwhile may answer 409: then the session must carry this hash.
func (s *stack) submit(id, hash, ip string) error {
	_, err := s.client.call("POST", "/api/checkout/submit", "", ip, map[string]any{"sessionId": id, "txHash": hash}, 200)
	var se *statusError
	if errors.As(err, &se) && se.status == http.StatusConflict {
		st, h, qerr := s.sessionState(id)
		if qerr == nil && strings.EqualFold(h, hash) {
			_ = st
			return nil
		}
	}
	return err
}

// cancel cancels a session as its customer.
func (s *stack) cancel(id, ip string) error {
	_, err := s.client.call("POST", "/api/checkout/session/"+id+"/cancel", "", ip, nil, 200)
	var se *statusError
	if errors.As(err, &se) && se.status == http.StatusConflict {
		if st, _, qerr := s.sessionState(id); qerr == nil && st == models.StatusCancelled {
			return nil
		}
	}
	return err
}

func (s *stack) sessionState(id string) (status, txHash string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.db)
	if err != nil {
		return "", "", err
	}
	defer conn.Close(ctx)
	var h *string
	err = conn.QueryRow(ctx, "SELECT status, tx_hash FROM checkout_sessions WHERE id = $1", id).Scan(&status, &h)
	if h != nil {
		txHash = *h
	}
	return status, txHash, err
}

func execEnv(bin string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	return cmd
}

// --- the client: retries what may be retried, counts what it saw ----------

// client calls the API over HTTP. Transport errors and 500, 502, 503 and
// 504 answers are retried (as SPEC.md tells integrators: retry after 1 to 2
// seconds) for up to a minute; every 5xx seen is counted, and one that is
// still the answer when the retries run out is counted as unresolved.
type client struct {
	base       string
	fiveXX     atomic.Int64
	transport  atomic.Int64
	unresolved atomic.Int64
	limited    atomic.Int64
	codes      sync.Map // status -> *atomic.Int64
}

type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string { return fmt.Sprintf("status %d: %s", e.status, e.body) }

var httpClient = &http.Client{Timeout: 30 * time.Second}

func (c *client) count(status int) {
	v, _ := c.codes.LoadOrStore(status, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// call sends the request until it gets a non-5xx answer or a minute passes;
// a status other than want is an error (a *statusError).
func (c *client) call(method, path, token, ip string, body any, want int) (map[string]any, error) {
	deadline := time.Now().Add(60 * time.Second)
	backoff := 250 * time.Millisecond
	for {
		status, raw, err := c.once(method, path, token, ip, body)
		retryable := err != nil || status == 500 || status == 502 || status == 503 || status == 504
		if err != nil {
			c.transport.Add(1)
		} else {
			c.count(status)
			if status >= 500 {
				c.fiveXX.Add(1)
			}
			if status == http.StatusTooManyRequests {
				c.limited.Add(1)
			}
		}
		if retryable && time.Now().Before(deadline) {
			time.Sleep(backoff)
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		if retryable {
			if status >= 500 {
				c.unresolved.Add(1)
			}
			if err != nil {
				return nil, err
			}
		}
		if status != want {
			return nil, &statusError{status: status, body: string(raw)}
		}
		var env map[string]any
		if err := json.Unmarshal(raw, &env); err != nil {
			return nil, fmt.Errorf("%s %s: not JSON: %.200s", method, path, raw)
		}
		d, _ := env["data"].(map[string]any)
		return d, nil
	}
}

func (c *client) once(method, path, token, ip string, body any) (int, []byte, error) {
	var rdr io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rdr = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rdr)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ip != "" {
		req.Header.Set("X-Forwarded-For", ip)
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw, nil
}

func (c *client) must(t *testing.T, method, path, token, ip string, body any, want int) map[string]any {
	t.Helper()
	d, err := c.call(method, path, token, ip, body, want)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return d
}

// --- webhook receivers with faults ---------------------------------------

type behaviour string

const (
	behaveOK      behaviour = "ok"
	behaveHang    behaviour = "hang"     // the first request of each delivery never gets an answer (the sender times out)
	behaveReset   behaviour = "reset"    // the first request of each delivery has its connection reset
	behaveFailure behaviour = "500->200" // 500 to the first request of each delivery, 2xx after
	behaveSlow    behaviour = "slow"     // every answer after 3 s
)

// receipt is one request a receiver got.
type receipt struct {
	id, event, sessionID string
	ok                   bool // answered 2xx
	sigOK                bool
}

type receiver struct {
	b      behaviour
	srv    *httptest.Server
	secret atomic.Value
	mu     sync.Mutex
	got    []receipt
	seen   map[string]bool
}

func newReceiver(t *testing.T, b behaviour) *receiver {
	r := &receiver{b: b, seen: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) URL() string             { return r.srv.URL }
func (r *receiver) setSecret(secret string) { r.secret.Store(secret) }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	id := req.Header.Get(webhook.HeaderID)
	var env struct {
		Event string `json:"event"`
		Data  struct {
			SessionID string `json:"sessionId"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &env)
	secret, _ := r.secret.Load().(string)
	sigOK := webhook.Verify(secret, req.Header, body, webhook.DefaultTolerance, time.Now()) == nil
	r.mu.Lock()
	first := !r.seen[id]
	r.seen[id] = true
	r.mu.Unlock()
	rec := receipt{id: id, event: env.Event, sessionID: env.Data.SessionID, sigOK: sigOK}
	record := func(ok bool) {
		rec.ok = ok
		r.mu.Lock()
		r.got = append(r.got, rec)
		r.mu.Unlock()
	}
	switch {
	case r.b == behaveHang && first:
		record(false)
		<-req.Context().Done() // until the sender gives up
		return
	case r.b == behaveReset && first:
		record(false)
		if hj, ok := w.(http.Hijacker); ok {
			conn, _, err := hj.Hijack()
			if err == nil {
				if tc, ok := conn.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // RST, not FIN
				}
				_ = conn.Close()
				return
			}
		}
		w.WriteHeader(http.StatusInternalServerError)
		return
	case r.b == behaveFailure && first:
		record(false)
		w.WriteHeader(http.StatusInternalServerError)
		return
	case r.b == behaveSlow:
		time.Sleep(3 * time.Second)
	}
	record(true)
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) receipts() []receipt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receipt(nil), r.got...)
}

// --- outcome ---------------------------------------------------------------

// row is one line of the report.
type row struct {
	fault                                 string
	sessions, deliveries, lost, dup       int
	wrong, splitIDs, dupRows, badSig      int
	fiveXX, unresolved, limited, requests int64
	took                                  time.Duration
	notes                                 []string
}

func (r row) ok() bool {
	return r.lost == 0 && r.wrong == 0 && r.splitIDs == 0 && r.dupRows == 0 && r.badSig == 0 && r.unresolved == 0
}

// eventsFor are the events a session's outcome emits.
func eventsFor(status string) []string {
	switch status {
	case models.StatusComplete:
		return []string{"checkout.completed", "payment.completed"}
	case models.StatusExpired:
		return []string{"checkout.expired"}
	case models.StatusCancelled:
		return []string{"checkout.cancelled"}
	case models.StatusFailed:
		return []string{"checkout.failed", "payment.failed"}
	}
	return nil
}

// converge waits (up to within) until every session has its expected status
// and every expected event reached every receiver with a 2xx, then measures
// the row.
func (s *stack) converge(fault string, expected map[string]string, started time.Time, within time.Duration) row {
	t := s.t
	deadline := time.Now().Add(within)
	var r row
	for {
		r = s.measure(fault, expected)
		if (r.wrong == 0 && r.lost == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	// Let late duplicates (a retried attempt in flight) land before the
	// final count.
	time.Sleep(500 * time.Millisecond)
	r = s.measure(fault, expected)
	r.took = time.Since(started)
	if r.wrong > 0 || r.lost > 0 {
		t.Logf("%s: did not converge within %s: %v", fault, within, r.notes)
	}
	return r
}

func (s *stack) measure(fault string, expected map[string]string) row {
	r := row{fault: fault, sessions: len(expected)}
	r.fiveXX, r.unresolved, r.limited = s.client.fiveXX.Load(), s.client.unresolved.Load(), s.client.limited.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.db)
	if err != nil {
		r.wrong, r.lost = len(expected), -1
		r.notes = append(r.notes, "store unreachable: "+err.Error())
		return r
	}
	defer conn.Close(ctx)
	got, why := map[string]string{}, map[string]string{}
	rows, err := conn.Query(ctx, "SELECT id, status, COALESCE(failure_reason, ''), COALESCE(failure_message, '') FROM checkout_sessions")
	if err == nil {
		for rows.Next() {
			var id, st, reason, msg string
			if rows.Scan(&id, &st, &reason, &msg) == nil {
				got[id] = st
				if reason != "" {
					why[id] = " (" + reason + ": " + msg + ")"
				}
			}
		}
		rows.Close()
	}
	for id, want := range expected {
		if got[id] != want {
			r.wrong++
			if len(r.notes) < 5 {
				r.notes = append(r.notes, fmt.Sprintf("session %s is %q%s, want %q", id, got[id], why[id], want))
			}
		}
	}
	// Deliveries, seen from each receiver: an event is delivered when a
	// request for it was answered 2xx; split when it came under more than
	// one webhook-id.
	for ri, rc := range s.receivers {
		type key struct{ sessionID, event string }
		oks := map[key]int{}
		ids := map[key]map[string]bool{}
		for _, rec := range rc.receipts() {
			k := key{rec.sessionID, rec.event}
			if ids[k] == nil {
				ids[k] = map[string]bool{}
			}
			ids[k][rec.id] = true
			if rec.ok {
				oks[k]++
			}
			if !rec.sigOK {
				r.badSig++
			}
		}
		for id, want := range expected {
			for _, ev := range eventsFor(want) {
				r.deliveries++
				k := key{id, ev}
				switch {
				case oks[k] == 0:
					r.lost++
					if len(r.notes) < 8 {
						r.notes = append(r.notes, fmt.Sprintf("receiver %d (%s): %s of %s not delivered", ri, rc.b, ev, id))
					}
				case oks[k] > 1:
					r.dup++
				}
				if len(ids[k]) > 1 {
					r.splitIDs++
				}
			}
		}
	}
	// Rows that must exist once: a transaction per chain payment, a
	// customer per e-mail (whose counters match its transactions).
	var n int
	_ = conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM transactions GROUP BY merchant_id, network, tx_hash HAVING count(*) > 1) d`).Scan(&n)
	r.dupRows += n
	n = 0
	_ = conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM customers GROUP BY merchant_id, mode, lower(email) HAVING count(*) > 1) d`).Scan(&n)
	r.dupRows += n
	n = 0
	_ = conn.QueryRow(ctx, `SELECT count(*) FROM customers c WHERE c.transaction_count <>
		(SELECT count(*) FROM transactions x WHERE x.customer_id = c.id)
		OR c.total_spent <> (SELECT COALESCE(sum(x.amount), 0) FROM transactions x WHERE x.customer_id = c.id)`).Scan(&n)
	r.dupRows += n
	n = 0
	_ = conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM transactions WHERE session_id IS NOT NULL GROUP BY session_id HAVING count(*) > 1) d`).Scan(&n)
	r.dupRows += n
	// Every paid session has its transaction.
	n = 0
	_ = conn.QueryRow(ctx, `SELECT count(*) FROM checkout_sessions s WHERE s.status = 'complete'
		AND NOT EXISTS (SELECT 1 FROM transactions x WHERE x.session_id = s.id)`).Scan(&n)
	r.wrong += n
	return r
}

// wait for a condition on the store (e.g. the first expiries).
func (s *stack) waitFor(what string, within time.Duration, cond func(conn *pgx.Conn) bool) {
	t := s.t
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.Connect(ctx, s.db)
		if err == nil {
			ok := cond(conn)
			conn.Close(ctx)
			cancel()
			if ok {
				return
			}
		} else {
			cancel()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not reached within %s", s.cfg.name, what, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func countStatus(conn *pgx.Conn, status string) int {
	var n int
	_ = conn.QueryRow(context.Background(), "SELECT count(*) FROM checkout_sessions WHERE status = $1", status).Scan(&n)
	return n
}

// printTable writes the report.
func printTable(w io.Writer, rows []row) {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	fmt.Fprintf(bw, "\n%-44s %8s %10s %5s %10s %12s %9s %8s %7s %11s %9s\n", "fault", "sessions", "deliveries", "lost",
		"duplicated", "wrong states", "split ids", "dup rows", "5xx", "unresolved", "time")
	for _, r := range rows {
		fmt.Fprintf(bw, "%-44s %8d %10d %5d %10d %12d %9d %8d %7d %11d %9s\n", r.fault, r.sessions, r.deliveries, r.lost,
			r.dup, r.wrong, r.splitIDs, r.dupRows, r.fiveXX, r.unresolved, r.took.Round(time.Second))
	}
	for _, r := range rows {
		if r.ok() {
			for _, n := range r.notes {
				fmt.Fprintf(bw, "  %s: %s\n", r.fault, n)
			}
		}
	}
	fmt.Fprintln(bw, "duplicated: events a receiver acknowledged more than once, always under one webhook-id (at-least-once);")
	fmt.Fprintln(bw, "split ids: events that came under two webhook-ids (must be 0); dup rows: duplicate transaction or customer")
	fmt.Fprintln(bw, "rows or customer counters that disagree with the transactions (must be 0); 5xx: answers the client retried;")
	fmt.Fprintln(bw, "unresolved: 5xx still answered when its retries ran out (must be 0).")
}
