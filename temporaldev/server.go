// Package temporaldev runs the Temporal CLI's dev server (`temporal server
// start-dev`, built from tools/go.mod by tools/build-temporal.sh) as a child
// process for `paygate dev` and for integration tests, and holds the namespace
// set-up that production shares with it: registering paygate's custom search
// attributes and raising the retention.
//
// The dev server keeps its state in one SQLite file, so workflows survive a
// restart. Search attributes and retention given to start-dev at launch only
// apply when that file is created, which is why Start applies them at every
// boot through the API.
package temporaldev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

// Defaults applied by Start to zero Options fields.
const (
	DefaultHost      = "127.0.0.1"
	DefaultPort      = 7233
	DefaultUIPort    = 8233
	DefaultNamespace = "default"
	// DBFileName is the SQLite state file Start keeps in Options.DataDir.
	DBFileName = "temporal.db"
)

// StartTimeout bounds how long Start waits for the server to become healthy
// when its context has no deadline. A start normally takes well under a
// second (BenchmarkStartCold, BenchmarkStartWarm).
const StartTimeout = time.Minute

// StopTimeout is how long Stop waits after SIGINT before killing the server.
const StopTimeout = 10 * time.Second

// devDynamicConfig is the dynamic config the dev server runs with, on top of
// what start-dev sets itself (search attribute cache refresh on read, higher
// persistence QPS).
var devDynamicConfig = []string{
	// Do not phone home: the server otherwise polls Temporal's version
	// service, and tests must only talk to loopback.
	"frontend.enableServerVersionCheck=false",
	// One partition per task queue: with one worker per queue, tasks and
	// polls meet at once instead of being forwarded between partitions.
	"matching.numTaskqueueReadPartitions=1",
	"matching.numTaskqueueWritePartitions=1",
	// start-dev turns this on so that search attributes added at run time
	// are seen at once; it makes every start, upsert and visibility write
	// read the cluster metadata again, on the server's one SQLite
	// connection (5% of the server's CPU in an expiry storm, and a query
	// every other statement waits behind). paygate's attributes are given
	// at launch instead (--search-attribute, see args), and Start restarts
	// the server in the rare case it had to add one to an existing database.
	"system.forceSearchAttributesCacheRefreshOnRead=false",
}

// devSQLitePragmas apply to the state file. Write-ahead logging with
// synchronous=normal halves a cold start (schema creation: ~0.45s instead of
// ~0.9s) and spares every commit an fsync; a crash of the process loses
// nothing, a power cut at most the last commits of a dev database.
//
// The server runs all its persistence on one SQLite connection, so how fast
// that connection works bounds every workflow: a 64 MiB page cache (the
// default is 2 MiB, which the history and visibility tables outgrow in
// minutes), reads through a memory map instead of a system call per page,
// and checkpoints every 4,000 WAL pages instead of 1,000 (a page rewritten
// many times between checkpoints is copied back once). make bench: 1,000
// sessions due together, 44 -> 53 lifecycles/s and server CPU -10%.
//
// busy_timeout lets the server wait for a lock another connection holds
// (Start's own, pruneVisibilityIndexes) instead of failing at once.
var devSQLitePragmas = []string{"journal_mode=wal", "synchronous=normal",
	"cache_size=-65536", "mmap_size=268435456", "wal_autocheckpoint=4000", "busy_timeout=10000"}

// devGOGC is the dev server's garbage collector target (the Go default is
// 100): at 400 the collector's share of the server's CPU in an expiry storm
// falls from about 6% to under 2%, for a heap that may grow to five times
// what is live instead of twice. devGOMEMLIMIT caps that growth where much
// is live: with 10,000 open workflows the server's memory grew by 931 MB at
// GOGC=400 alone (264 MB at the default); under the limit the collector runs
// more often instead.
const (
	devGOGC       = "400"
	devGOMEMLIMIT = "512MiB"
)

// Options configures Start. The zero value runs a headless server on
// 127.0.0.1:7233 with state in memory and the default namespace; `paygate dev`
// sets DataDir and UIPort: DefaultUIPort.
type Options struct {
	// Binary is the Temporal CLI to run; empty means DefaultBinary().
	Binary string
	// DataDir holds the state file <DataDir>/temporal.db (and its -wal and
	// -shm companions), created with the directory when missing. Empty keeps
	// state in memory only.
	DataDir string
	// Host is the IP the frontend and the UI bind to; empty means 127.0.0.1.
	Host string
	// Port is the frontend gRPC port; 0 means 7233.
	Port int
	// UIPort is the Web UI's port; 0 runs headless (no UI). Callers that want
	// the usual UI set DefaultUIPort.
	UIPort int
	// Namespace is the namespace to create and configure; empty means "default".
	Namespace string
	// Retention is the minimum retention of closed workflows in Namespace;
	// 0 means DefaultRetention (720h).
	Retention time.Duration
	// SearchAttributes are registered in Namespace at every boot (see
	// RegisterSearchAttributes); usually PaygateSearchAttributes().
	SearchAttributes map[string]enumspb.IndexedValueType
	// Log receives the server's own output (warnings and errors) and a line
	// when it is ready; nil discards it. Writes are serialized.
	Log io.Writer

	// restarted marks the second start after configure added search
	// attributes to an existing database.
	restarted bool
}

// ErrPortInUse is returned (wrapped) by Start when the frontend or UI port is
// already taken, typically by another dev server.
var ErrPortInUse = errors.New("port in use")

// errExitedEarly marks a server that exited before it became healthy.
var errExitedEarly = errors.New("exited before becoming healthy")

// Server is a running dev server child process.
type Server struct {
	opts Options
	cmd  *exec.Cmd
	out  *output // the child's output and our messages, tail kept for errors

	done             chan struct{} // closed when the child has exited
	waitErr          error         // cmd.Wait's result, set before done closes
	exitedOnOwn      bool          // the child exited without Stop asking; set before done closes
	stopRequested    atomic.Bool
	killRequested    atomic.Bool // stopped by kill, not Stop
	killedAfterGrace atomic.Bool // Stop's SIGINT was not enough
	stopOnce         sync.Once
}

// Start launches `temporal server start-dev` with opts, waits until its
// frontend answers a health check, registers opts.SearchAttributes, raises the
// retention of opts.Namespace, and waits for the Web UI if there is one. ctx
// bounds that start-up (StartTimeout when it has no deadline); it does not
// stop the server later: call Stop.
//
// The child gets SIGKILL if the calling process dies (Linux), so it never
// outlives it. Start fails at once, without launching anything, when the
// binary is missing (ErrBinaryNotFound) or a port is already taken.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := opts.checkPorts(); err != nil {
		return nil, err
	}
	if opts.DataDir != "" {
		if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("temporaldev: data dir: %w", err)
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, StartTimeout)
		defer cancel()
	}

	began := time.Now()
	var (
		s *Server
		c client.Client
	)
	for attempt := 1; ; attempt++ {
		s = &Server{opts: opts, out: &output{log: opts.Log, max: 16 << 10}, done: make(chan struct{})}
		s.cmd = exec.Command(opts.Binary, opts.args()...)
		s.cmd.Stdout, s.cmd.Stderr = s.out, s.out // the same writer: one copier at a time
		s.cmd.SysProcAttr = sysProcAttr()
		// The last value of a name wins: this replaces a GOGC meant for paygate.
		s.cmd.Env = append(os.Environ(), "GOGC="+devGOGC, "GOMEMLIMIT="+devGOMEMLIMIT)
		if attempt > 1 {
			fmt.Fprintf(s.out, "temporaldev: launch %d: the one before lost a port it had picked to another process\n", attempt)
		}
		if err := s.launch(); err != nil {
			return nil, fmt.Errorf("temporaldev: starting %s: %w", opts.Binary, err)
		}
		c, err = s.waitHealthy(ctx)
		if err == nil || attempt == maxLaunches || !errors.Is(err, errExitedEarly) ||
			!strings.Contains(s.out.String(), "address already in use") {
			break
		}
		// start-dev picks the ports of its internal services (HTTP API,
		// history, matching, ...) itself, and another process can take one
		// before it binds it: launch again, unless the port lost was ours.
		if err := opts.checkPorts(); err != nil {
			return nil, err
		}
	}
	var added bool
	if err == nil {
		added, err = s.configure(ctx, c)
		c.Close()
	}
	if err == nil && added && !opts.restarted {
		// A database from before an attribute existed: the server's services
		// cache search attributes for a minute (see devDynamicConfig), so
		// start it again, once, for all of them to load the new ones.
		if err := s.Stop(); err != nil {
			return nil, fmt.Errorf("temporaldev: restart after adding search attributes: %w", err)
		}
		opts.restarted = true
		again, err := Start(ctx, opts)
		if err == nil {
			fmt.Fprintf(again.out, "temporaldev: restarted the server to load the search attributes added to its existing database\n")
		}
		return again, err
	}
	if err == nil && opts.UIPort > 0 {
		err = s.waitUI(ctx)
	}
	if err != nil {
		_ = s.Stop()
		return nil, err
	}
	fmt.Fprintf(s.out, "temporaldev: Temporal dev server ready in %s at %s (namespace %s%s)\n",
		time.Since(began).Round(time.Millisecond), s.Address(), opts.Namespace, uiNote(s.UIURL()))
	return s, nil
}

// maxLaunches bounds the launches of one Start that lost one of start-dev's
// own ports to another process.
const maxLaunches = 3

// checkPorts fails with ErrPortInUse when the frontend port or the UI's (if
// any) is taken.
func (o Options) checkPorts() error {
	if err := checkPortFree(o.Host, o.Port); err != nil {
		return fmt.Errorf("temporaldev: frontend port: %w", err)
	}
	if o.UIPort > 0 {
		if err := checkPortFree(o.Host, o.UIPort); err != nil {
			return fmt.Errorf("temporaldev: UI port: %w", err)
		}
	}
	return nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Binary == "" {
		bin, err := DefaultBinary()
		if err != nil {
			return o, fmt.Errorf("temporaldev: %w", err)
		}
		o.Binary = bin
	} else if _, err := checkBinary(o.Binary); err != nil {
		return o, fmt.Errorf("temporaldev: %w", err)
	}
	if o.Host == "" {
		o.Host = DefaultHost
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.Retention < 0 || o.Port < 0 || o.UIPort < 0 {
		return o, errors.New("temporaldev: negative Retention, Port or UIPort")
	}
	return o, nil
}

// args are start-dev's command line for o (defaults applied).
func (o Options) args() []string {
	args := []string{"server", "start-dev",
		"--ip", o.Host,
		"--port", strconv.Itoa(o.Port),
		"--log-level", "warn",
	}
	if o.DataDir != "" {
		args = append(args, "--db-filename", filepath.Join(o.DataDir, DBFileName))
		for _, p := range devSQLitePragmas {
			args = append(args, "--sqlite-pragma", p)
		}
	}
	if o.UIPort > 0 {
		args = append(args, "--ui-port", strconv.Itoa(o.UIPort))
	} else {
		args = append(args, "--headless")
	}
	// start-dev always creates "default"; naming it again would duplicate it.
	if o.Namespace != DefaultNamespace {
		args = append(args, "--namespace", o.Namespace)
	}
	// Applied when the state file is created, before any service caches
	// the namespace's attributes; configure adds them to older files.
	for _, name := range slices.Sorted(maps.Keys(o.SearchAttributes)) {
		args = append(args, "--search-attribute", name+"="+o.SearchAttributes[name].String())
	}
	for _, kv := range devDynamicConfig {
		args = append(args, "--dynamic-config-value", kv)
	}
	return args
}

// launch starts the child and a goroutine that reaps it. That goroutine stays
// locked to the OS thread that forked the child for the child's whole life:
// Linux delivers Pdeathsig when the forking thread exits, not the process, and
// the thread must not end before the child does.
func (s *Server) launch() error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := s.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.waitErr = s.cmd.Wait()
		s.exitedOnOwn = !s.stopRequested.Load()
		close(s.done)
	}()
	return <-started
}

// waitHealthy polls until the frontend accepts connections and reports
// SERVING, and returns a client connected to it.
func (s *Server) waitHealthy(ctx context.Context) (client.Client, error) {
	var c client.Client
	err := s.poll(ctx, "frontend at "+s.Address(), func() (err error) {
		// A plain TCP probe first: dialing gRPC before the port is open would
		// put the connection into its reconnect backoff.
		if err := probeTCP(s.Address()); err != nil {
			return err
		}
		c, err = s.dialHealthy(ctx)
		return err
	})
	return c, err
}

// waitUI waits until the Web UI, which start-dev starts in the background,
// accepts connections, so UIURL works as soon as Start returns.
func (s *Server) waitUI(ctx context.Context) error {
	addr := net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.UIPort))
	return s.poll(ctx, "Web UI at "+addr, func() error { return probeTCP(addr) })
}

// poll calls probe every 25ms until it succeeds, the server exits or ctx ends.
func (s *Server) poll(ctx context.Context, what string, probe func() error) error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		select {
		case <-s.done:
			return fmt.Errorf("temporaldev: %s %w (%v); its output:\n%s",
				s.opts.Binary, errExitedEarly, s.waitErr, s.out)
		case <-ctx.Done():
			return fmt.Errorf("temporaldev: %s not ready: %w (last error: %v); its output:\n%s",
				what, ctx.Err(), lastErr, s.out)
		case <-tick.C:
		}
		if lastErr = probe(); lastErr == nil {
			return nil
		}
	}
}

func probeTCP(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

func (s *Server) dialHealthy(ctx context.Context) (client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{
		HostPort:  s.Address(),
		Namespace: s.opts.Namespace,
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(s.out, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	})
	if err != nil {
		return nil, err
	}
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// configure applies what start-dev only applies to a new database. It
// reports whether it had to add search attributes.
func (s *Server) configure(ctx context.Context, c client.Client) (bool, error) {
	added, err := registerSearchAttributes(ctx, c, s.opts.Namespace, s.opts.SearchAttributes)
	if err != nil {
		return false, fmt.Errorf("temporaldev: %w", err)
	}
	if err := EnsureRetention(ctx, c, s.opts.Namespace, s.opts.Retention); err != nil {
		return false, fmt.Errorf("temporaldev: %w", err)
	}
	if added && !s.opts.restarted {
		return added, nil // the start after the restart prunes, with the new attributes' slots
	}
	// Only a cost: a server whose indexes could not be pruned works as
	// start-dev made it, so say so and go on.
	before, after, err := s.pruneVisibilityIndexes(ctx, c)
	switch {
	case err != nil:
		fmt.Fprintf(s.out, "temporaldev: visibility indexes left as they were: %v\n", err)
	case before != after:
		fmt.Fprintf(s.out, "temporaldev: visibility store indexed %d times, now %d (see pruneVisibilityIndexes)\n", before, after)
	}
	return added, nil
}

// Address is the frontend's host:port, for client.Options.HostPort.
func (s *Server) Address() string {
	return net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port))
}

// Namespace is the namespace Start created and configured.
// PID is the dev server's process id (0 before it started).
func (s *Server) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) Namespace() string { return s.opts.Namespace }

// UIURL is the Web UI's base URL, or "" when the server runs headless.
func (s *Server) UIURL() string {
	if s.opts.UIPort == 0 {
		return ""
	}
	return "http://" + net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.UIPort))
}

// Stop shuts the server down gracefully (SIGINT: it stops its services and
// finishes in-flight requests), kills it if it has not exited after
// StopTimeout, and returns what Wait returns. It may be called more than once.
// A graceful stop takes one to three seconds, most of it the frontend's fixed
// one-second drain and matching's membership wait.
func (s *Server) Stop() error {
	return s.stop(os.Interrupt, StopTimeout)
}

// kill ends the server at once (SIGKILL), for state that is thrown away.
func (s *Server) kill() error {
	return s.stop(os.Kill, 0)
}

// Kill ends the server at once with SIGKILL, as a crash would (fault
// injection: the chaos suite then starts a new server on the same DataDir
// and port, which finds the workflows where the crash left them). It waits
// for the process to exit and returns nil once it has.
func (s *Server) Kill() error { return s.kill() }

// Pid is the server process's id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

func (s *Server) stop(sig os.Signal, grace time.Duration) error {
	s.stopOnce.Do(func() {
		s.stopRequested.Store(true)
		s.killRequested.Store(sig == os.Kill)
		if err := s.cmd.Process.Signal(sig); err != nil {
			// Already exited, or no such signal on this platform.
			_ = s.cmd.Process.Kill()
		}
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-s.done:
		case <-timer.C:
			if !s.killRequested.Load() {
				s.killedAfterGrace.Store(true)
				_ = s.cmd.Process.Kill()
			}
			<-s.done
		}
	})
	return s.Wait()
}

// Wait blocks until the server process exits. It returns nil after a clean
// Stop, and an error (with the end of the server's output) when the server
// exited on its own or had to be killed.
func (s *Server) Wait() error {
	<-s.done
	switch {
	case s.exitedOnOwn:
		return fmt.Errorf("temporaldev: server exited unexpectedly (%v); its output:\n%s", exitStatus(s.waitErr), s.out)
	case s.killedAfterGrace.Load():
		return fmt.Errorf("temporaldev: server did not stop within %s of SIGINT and was killed", StopTimeout)
	case s.waitErr != nil && !s.killRequested.Load():
		return fmt.Errorf("temporaldev: server failed while stopping (%v); its output:\n%s", s.waitErr, s.out)
	}
	return nil
}

func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func uiNote(url string) string {
	if url == "" {
		return ", headless"
	}
	return ", UI " + url
}

// checkPortFree fails when host:port is taken. start-dev checks too, but a
// health probe could then reach whichever server already listens there.
func checkPortFree(host string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("%w: %s:%d (another Temporal server running?): %v", ErrPortInUse, host, port, err)
	}
	return l.Close()
}

// output receives the child's stdout and stderr and our own messages. It
// forwards them to log, serialized, and keeps the last max bytes for error
// messages. It never fails: an error from log must not stop os/exec copying
// the child's output, or the child would block on a full pipe.
type output struct {
	mu   sync.Mutex
	log  io.Writer
	max  int
	tail []byte
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.log != nil {
		_, _ = o.log.Write(p)
	}
	o.tail = append(o.tail, p...)
	if over := len(o.tail) - o.max; over > 0 {
		o.tail = append(o.tail[:0], o.tail[over:]...)
	}
	return len(p), nil
}

// String returns the last output kept.
func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(o.tail)
}
