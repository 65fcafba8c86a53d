//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/temporaldev"
)

// temporalServer is a dev server the suite may SIGKILL and start again on
// the same state file and port.
type temporalServer struct {
	dir  string
	port int
	srv  *temporaldev.Server
}

func startTemporal(t *testing.T) *temporalServer {
	t.Helper()
	ts := &temporalServer{dir: t.TempDir(), port: freePort(t)}
	ts.start(t)
	t.Cleanup(func() { _ = ts.srv.Kill() })
	return ts
}

func (ts *temporalServer) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := temporaldev.Start(ctx, temporaldev.Options{DataDir: ts.dir, Port: ts.port,
		SearchAttributes: temporaldev.PaygateSearchAttributes()})
	if err != nil {
		t.Fatalf("temporal dev server: %v", err)
	}
	ts.srv = srv
}

func (ts *temporalServer) address() string { return fmt.Sprintf("127.0.0.1:%d", ts.port) }

// TestChaos runs every fault and prints the table. Each fault has its own
// processes, task queues and database; the Temporal and PostgreSQL faults
// have a server of their own, so no fault reaches another's figures, and
// the faults run in two lanes side by side (the receiver faults mostly wait
// for the schedule's one-minute retry).
func TestChaos(t *testing.T) {
	suiteStart := time.Now()
	w := &world{t: t, bin: buildPaygate(t, t.TempDir())}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One-second blocks keep the chain's clock on the wall clock's, so the
	// EIP-3009 validBefore (the session's expiry) means what it says.
	dc, err := devchain.Start(ctx, devchain.Config{Port: devchain.AnyPort, BlockInterval: time.Second})
	if err != nil {
		t.Fatalf("dev chain: %v", err)
	}
	t.Cleanup(func() { _ = dc.Close() })
	w.chain = dc
	pg := startPostgres(t)
	shared := startTemporal(t)
	t.Logf("infrastructure up in %s", time.Since(suiteStart).Round(time.Millisecond))

	var (
		mu   sync.Mutex
		rows []row
	)
	add := func(r row) {
		mu.Lock()
		rows = append(rows, r)
		mu.Unlock()
	}
	t.Run("faults", func(t *testing.T) {
		// Two lanes of about equal length; the receiver faults mostly wait.
		t.Run("lane1", func(t *testing.T) {
			t.Parallel()
			add(receiverFaults(t, w, shared, pg))
			add(postgresCrash(t, w, shared))
			add(redisDown(t, w, shared, pg))
		})
		t.Run("lane2", func(t *testing.T) {
			t.Parallel()
			add(expiryStormWorkerKill(t, w, shared, pg))
			add(paymentsWorkerKill(t, w, shared, pg))
			add(temporalKill(t, w, pg))
		})
	})
	printTable(os.Stdout, rows)
	fmt.Printf("suite: %s\n", time.Since(suiteStart).Round(time.Second))
	for _, r := range rows {
		if !r.ok() {
			t.Errorf("%s: lost %d, wrong states %d, split ids %d, dup rows %d, bad signatures %d, unresolved 5xx %d: %v",
				r.fault, r.lost, r.wrong, r.splitIDs, r.dupRows, r.badSig, r.unresolved, r.notes)
		}
	}
}

func allStatus(ids []string, status string, into map[string]string) map[string]string {
	if into == nil {
		into = map[string]string{}
	}
	for _, id := range ids {
		into[id] = status
	}
	return into
}

// expiryStormWorkerKill: 300 sessions that expire within seconds of each
// other (the figure); the worker is SIGKILLed once the first have
// expired and a new one started three seconds later.
func expiryStormWorkerKill(t *testing.T, w *world, ts *temporalServer, pg *pgCluster) row {
	const n = 300
	s := w.newStack(t, stackConfig{name: "expiry", temporal: ts.address(), dbURL: pg.createDB(t, "expiry"), lifetime: 25 * time.Second})
	started := time.Now()
	ids := s.createSessions(n, nil)
	expected := allStatus(ids, models.StatusExpired, nil)
	var atKill int
	s.waitFor("the first expiries", 90*time.Second, func(c *pgx.Conn) bool {
		atKill = countStatus(c, models.StatusExpired)
		return atKill >= 10
	})
	s.killWorker()
	time.Sleep(3 * time.Second)
	s.restartWorker()
	r := s.converge("SIGKILL worker during an expiry storm", expected, started, 150*time.Second)
	r.notes = append(r.notes, fmt.Sprintf("worker killed with %d of %d expired", atKill, n))
	t.Logf("expiry storm: %s", r.notes[len(r.notes)-1])
	return r
}

// payWithRetry pays a session (the chain and the API's session read may be
// unavailable for a while during a fault).
func payWithRetry(s *stack, id string, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		h, err := s.pay(id)
		if err == nil || time.Now().After(deadline) {
			return h, err
		}
		time.Sleep(time.Second)
	}
}

// payAndSubmit pays and submits each session concurrently (payments from one
// wallet are serialised for their nonces) and reports the first error.
func payAndSubmit(s *stack, ids []string, within time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		var wg sync.WaitGroup
		var first error
		var mu sync.Mutex
		for _, id := range ids {
			h, err := payWithRetry(s, id, within)
			if err != nil {
				done <- fmt.Errorf("pay %s: %w", id, err)
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.submit(id, h, "198.18.0.2"); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("submit %s: %w", id, err)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		done <- first
	}()
	return done
}

// cancelAll cancels each session from its own client address: the cancels
// are not what a scenario rate-limits, and fifteen from one address would sit
// at the checkout tier's 10 a minute, where one retried request or one count
// taken by the rate limiter's in-memory fallback during a Redis outage (it
// mirrors every event, so it holds the earlier phases' cancels too) is a 429.
func cancelAll(s *stack, ids []string) <-chan error {
	done := make(chan error, 1)
	go func() {
		var wg sync.WaitGroup
		var first error
		var mu sync.Mutex
		for i, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.cancel(id, fmt.Sprintf("198.18.%d.%d", 3+i/250, 1+i%250)); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("cancel %s: %w", id, err)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		done <- first
	}()
	return done
}

// paymentsWorkerKill: sessions paid on the dev chain; the worker is
// SIGKILLed half-way through the submits (the rest wait on 503s) and a new
// one started three seconds later. All sessions pay one customer e-mail, so
// its counters prove each payment was counted once.
func paymentsWorkerKill(t *testing.T, w *world, ts *temporalServer, pg *pgCluster) row {
	s := w.newStack(t, stackConfig{name: "payments", temporal: ts.address(), dbURL: pg.createDB(t, "payments")})
	started := time.Now()
	ids := s.createSessions(16, nil)
	if err := <-payAndSubmit(s, ids[:8], time.Minute); err != nil {
		t.Fatal(err)
	}
	s.killWorker()
	rest := payAndSubmit(s, ids[8:], time.Minute)
	time.Sleep(3 * time.Second)
	s.restartWorker()
	if err := <-rest; err != nil {
		t.Fatal(err)
	}
	return s.converge("SIGKILL worker during payments (dev chain)", allStatus(ids, models.StatusComplete, nil), started, 120*time.Second)
}

// temporalKill: the Temporal server is SIGKILLed with sessions paid,
// paying, expiring and being cancelled, and started again on its state file
// five seconds later; API and worker stay up and reconnect.
func temporalKill(t *testing.T, w *world, pg *pgCluster) row {
	own := startTemporal(t)
	s := w.newStack(t, stackConfig{name: "temporal", temporal: own.address(), dbURL: pg.createDB(t, "temporal"), lifetime: 45 * time.Second})
	started := time.Now()
	paid, expiring, cancelled := s.createSessions(8, nil), s.createSessions(8, nil), s.createSessions(6, nil)
	if err := <-payAndSubmit(s, paid[:4], time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := own.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	pays, cancels := payAndSubmit(s, paid[4:], 90*time.Second), cancelAll(s, cancelled)
	time.Sleep(5 * time.Second)
	own.start(t)
	for _, ch := range []<-chan error{pays, cancels} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	expected := allStatus(paid, models.StatusComplete, nil)
	allStatus(expiring, models.StatusExpired, expected)
	allStatus(cancelled, models.StatusCancelled, expected)
	return s.converge("SIGKILL + restart Temporal mid-flow", expected, started, 150*time.Second)
}

// postgresCrash: the store's PostgreSQL (a cluster of this scenario's own)
// is stopped in immediate mode with sessions paid, paying, expiring and
// being cancelled, and started again eight seconds later.
func postgresCrash(t *testing.T, w *world, ts *temporalServer) row {
	own := startPostgres(t)
	s := w.newStack(t, stackConfig{name: "postgres", temporal: ts.address(), dbURL: own.createDB(t, "store"), lifetime: 45 * time.Second})
	started := time.Now()
	paid, expiring, cancelled := s.createSessions(8, nil), s.createSessions(8, nil), s.createSessions(5, nil)
	if err := <-payAndSubmit(s, paid[:4], time.Minute); err != nil {
		t.Fatal(err)
	}
	own.crash(t)
	pays, cancels := payAndSubmit(s, paid[4:], 90*time.Second), cancelAll(s, cancelled)
	time.Sleep(8 * time.Second)
	own.start(t)
	for _, ch := range []<-chan error{pays, cancels} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	expected := allStatus(paid, models.StatusComplete, nil)
	allStatus(expiring, models.StatusExpired, expected)
	allStatus(cancelled, models.StatusCancelled, expected)
	return s.converge("PostgreSQL (store) stopped + restarted mid-flow", expected, started, 150*time.Second)
}

// receiverFaults: four endpoints per merchant, one receiver each: one that
// hangs (the sender gives up after 15 s), one that resets the connection,
// one that answers 500 then 200, one that answers after 3 s. The first
// three are delivered by the attempt the schedule makes a minute later.
func receiverFaults(t *testing.T, w *world, ts *temporalServer, pg *pgCluster) row {
	s := w.newStack(t, stackConfig{name: "receivers", temporal: ts.address(), dbURL: pg.createDB(t, "receivers")},
		behaveHang, behaveReset, behaveFailure, behaveSlow)
	started := time.Now()
	ids := s.createSessions(6, nil)
	if err := <-cancelAll(s, ids); err != nil {
		t.Fatal(err)
	}
	return s.converge("webhook receivers: hang, reset, 500->200, slow", allStatus(ids, models.StatusCancelled, nil), started, 150*time.Second)
}

// redisDown: the rate limiter's Redis is SIGKILLed under traffic (limits on
// for loopback, clients told apart by X-Forwarded-For) and started again: no
// request fails, and the limits still hold meanwhile (per process).
func redisDown(t *testing.T, w *world, ts *temporalServer, pg *pgCluster) row {
	rd := startRedis(t)
	s := w.newStack(t, stackConfig{name: "redis", temporal: ts.address(), dbURL: pg.createDB(t, "redis"),
		env: []string{"REDIS_URL=" + rd.URL(), "RATE_LIMIT_EXEMPT_LOOPBACK=false", "TRUSTED_PROXIES=127.0.0.1"}})
	started := time.Now()
	var ids []string
	phase := func(n, base int) {
		batch := s.createSessions(n, func(i int) string { return fmt.Sprintf("198.19.%d.%d", base, i+1) })
		if err := <-cancelAll(s, batch); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, batch...)
	}
	// burst sends 12 checkout mutations from one address: the tier allows 10 a minute.
	burst := func(ip string) (limited int) {
		for i := 0; i < 12; i++ {
			status, _, err := s.client.once("POST", "/api/checkout/quote", "", ip, map[string]any{"linkId": s.link,
				"network": "base_sepolia", "customer": map[string]any{"country": "DE", "address": "Berlin"}})
			if err == nil && status == http.StatusTooManyRequests {
				limited++
			}
		}
		return limited
	}
	phase(5, 1)
	before := burst("198.19.100.1")
	rd.p.kill()
	phase(5, 2)
	during := burst("198.19.100.2")
	rd.start()
	time.Sleep(1500 * time.Millisecond) // the store probes Redis again at most once a second
	phase(5, 3)
	after := burst("198.19.100.3")
	r := s.converge("Redis (rate limiter) stopped + restarted", allStatus(ids, models.StatusCancelled, nil), started, 90*time.Second)
	r.notes = append(r.notes, fmt.Sprintf("429s of 12-request bursts: before %d, during %d, after %d", before, during, after))
	if before != 2 || during != 2 || after != 2 {
		t.Errorf("redis: the checkout tier must refuse 2 of 12 requests before, during and after the outage: %d, %d, %d", before, during, after)
	}
	t.Logf("redis: %s", r.notes[len(r.notes)-1])
	return r
}
