//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// repoRoot is the module's root folder.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// buildPaygate compiles cmd/paygate once for the suite.
func buildPaygate(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "paygate")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/paygate")
	cmd.Dir = repoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// tail keeps the last bytes a child wrote.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (b *tail) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append([]byte(nil), b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tail) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// proc is a child process the suite can SIGKILL.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *tail
	done chan struct{}
	err  error
}

// startProc runs bin with args and env; it dies with the test process
// (Pdeathsig) and is killed at cleanup.
func startProc(t testing.TB, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &tail{max: 64 << 10}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig follows the forking thread: keep it for the child's life.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { p.kill() })
	return p
}

// kill sends SIGKILL (a crash: no shutdown code runs) and waits for the exit.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// missing skips the suite when a piece of infrastructure is not installed,
// or fails it under CI, so CI never passes by skipping.
func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("chaos: %s (CI is set)", why)
	}
	t.Skipf("chaos: %s; skipping (set CI to make this a failure)", why)
}

// --- PostgreSQL: a throwaway cluster ------------------------------------

// pgCluster is a PostgreSQL server of the suite's own: initdb into a
// temporary folder, pg_ctl on a free loopback port. It can be stopped (as a
// crash: immediate mode) and started again on the same data.
type pgCluster struct {
	bin    string // folder of initdb, pg_ctl
	dir    string
	port   int
	runAs  []string // runuser prefix when the suite runs as root
	logOut string
}

// pgBinDir finds PostgreSQL's binaries (Debian keeps them out of PATH).
func pgBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(matches) == 0 {
		return "", errors.New("pg_ctl not found (install postgresql)")
	}
	return filepath.Dir(matches[len(matches)-1]), nil
}

func startPostgres(t testing.TB) *pgCluster {
	t.Helper()
	bin, err := pgBinDir()
	if err != nil {
		missing(t, err.Error())
	}
	dir, err := os.MkdirTemp("", "paygate-chaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	c := &pgCluster{bin: bin, dir: dir, port: freePort(t)}
	if os.Geteuid() == 0 {
		// initdb refuses to run as root: run the cluster as postgres.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root without a postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		c.runAs = []string{"runuser", "-u", "postgres", "--"}
	}
	data := filepath.Join(dir, "data")
	if out, err := c.run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	c.start(t)
	t.Cleanup(func() { _, _ = c.run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop") })
	return c
}

func (c *pgCluster) run(tool string, args ...string) (string, error) {
	argv := append(append([]string{}, c.runAs...), append([]string{filepath.Join(c.bin, tool)}, args...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// start starts the server on its port (the socket folder is the data dir).
func (c *pgCluster) start(t testing.TB) {
	t.Helper()
	data := filepath.Join(c.dir, "data")
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -F -c max_connections=200", c.port, data)
	if out, err := c.run("pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "60", "start"); err != nil {
		t.Fatalf("pg_ctl start: %v\n%s", err, out)
	}
}

// crash stops the server at once, as a crash would (immediate mode: no
// checkpoint, every connection cut).
func (c *pgCluster) crash(t testing.TB) {
	t.Helper()
	if out, err := c.run("pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop"); err != nil {
		t.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
}

// URL is a connection URL for database name.
func (c *pgCluster) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, name)
}

// createDB makes a fresh database.
func (c *pgCluster) createDB(t testing.TB, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	return c.URL(name)
}

// --- Redis: a throwaway server ------------------------------------------

type redisServer struct {
	port int
	p    *proc
	t    testing.TB
}

func startRedis(t testing.TB) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		missing(t, "redis-server not found: `make redis` installs it (apt-get install redis-server)")
	}
	r := &redisServer{port: freePort(t), t: t}
	r.start()
	return r
}

func (r *redisServer) start() {
	r.p = startProc(r.t, "redis", "redis-server", os.Environ(), "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	waitTCP(r.t, fmt.Sprintf("127.0.0.1:%d", r.port), 10*time.Second)
}

func (r *redisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

func waitTCP(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening after %s: %v", addr, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// envWith returns base with the given variables replaced or added.
func envWith(base []string, kv ...string) []string {
	out := make([]string, 0, len(base)+len(kv))
	set := map[string]bool{}
	for _, v := range kv {
		k, _, _ := strings.Cut(v, "=")
		set[k] = true
	}
	for _, v := range base {
		k, _, _ := strings.Cut(v, "=")
		if !set[k] {
			out = append(out, v)
		}
	}
	return append(out, kv...)
}
