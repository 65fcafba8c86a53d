// Package browser is the test harness of paygate's pages: a real headless
// Chromium (Debian's chromium package) driven by chromedp, tabs at desktop and
// phone sizes with helpers that fail the test with the page's state, console
// errors and CSP violations collected, load time and transferred weight, full
// page screenshots, and a test wallet ([Wallet]) injected into the page as an
// EIP-1193 provider announced by EIP-6963, backed by real keys and real EVM
// JSON-RPC endpoints (a dev chain).
//
// A page test reads:
//
//	b := browser.Start(t)
//	w := browser.NewWallet(browser.WalletConfig{Key: devchain.CustomerKey(), RPC: map[uint64]string{chain.ChainID(): chain.RPCURL()}})
//	tab := b.NewTab(browser.Phone, browser.WithWallet(w))
//	tab.Navigate(srv.URL + "/checkout/" + sessionID)
//	tab.Click("#connect")
//	tab.WaitText("#status", "Paid")
//	tab.Screenshot("checkout-paid-phone")
//	tab.AssertNoConsoleErrors()
//
// Without chromium the tests skip, saying how to install it (make chromium);
// under CI=true they fail instead.
package browser

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// ExecPath is the Chromium the tests drive: Debian's package. When it is
// missing, "chromium" on PATH is tried.
var ExecPath = "/usr/bin/chromium"

// Defaults of [Start].
const (
	// DefaultTimeout bounds one test's browser, tabs included (and is cut to
	// the go test deadline).
	DefaultTimeout = 2 * time.Minute
	// DefaultActionTimeout bounds one helper (a navigation, a wait, a click).
	DefaultActionTimeout = 15 * time.Second
)

// Browser is one headless Chromium for one test; it is closed when the test
// ends.
type Browser struct {
	t             testing.TB
	ctx           context.Context
	actionTimeout time.Duration
	log           *safeLog
	output        *lockedBuffer
}

// Option configures [Start].
type Option func(*startConfig)

type startConfig struct {
	timeout, actionTimeout time.Duration
}

// Timeout bounds the browser's whole life in the test (default
// [DefaultTimeout]).
func Timeout(d time.Duration) Option { return func(c *startConfig) { c.timeout = d } }

// ActionTimeout bounds each helper of the tabs (default
// [DefaultActionTimeout]).
func ActionTimeout(d time.Duration) Option { return func(c *startConfig) { c.actionTimeout = d } }

// chromiumPath finds the browser: [ExecPath], else chromium on PATH.
func chromiumPath() string {
	if st, err := os.Stat(ExecPath); err == nil && !st.IsDir() {
		return ExecPath
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	return ""
}

// Available says whether a Chromium is installed, for a test that wants to
// decide by itself.
func Available() bool { return chromiumPath() != "" }

// Start launches a headless Chromium for the test: skipped when none is
// installed, failed instead under CI=true. The browser runs as root in a
// container (no sandbox, no GPU, no /dev/shm), and is closed on t.Cleanup.
func Start(t testing.TB, opts ...Option) *Browser {
	t.Helper()
	cfg := startConfig{timeout: DefaultTimeout, actionTimeout: DefaultActionTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	path := chromiumPath()
	if path == "" {
		msg := fmt.Sprintf("chromium not found (%s, or on PATH): run `make chromium`, or as root `apt-get update && apt-get install -y --no-install-recommends chromium`", ExecPath)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: the browser tests must run)")
		}
		t.Skip(msg + " (the browser tests are skipped; under CI=true they fail)")
	}

	deadline := time.Now().Add(cfg.timeout)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if td, ok := d.Deadline(); ok && td.Add(-5*time.Second).Before(deadline) {
			deadline = td.Add(-5 * time.Second)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)

	b := &Browser{t: t, actionTimeout: cfg.actionTimeout, log: &safeLog{t: t}, output: &lockedBuffer{}}
	allocOpts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.Flag("headless", "new"),
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.Flag("font-render-hinting", "none"),
		chromedp.WindowSize(int(DesktopViewport.Width), int(DesktopViewport.Height)),
		chromedp.Env("LANG=en_US.UTF-8", "TZ=UTC"),
		chromedp.CombinedOutput(b.output),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, allocOpts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithErrorf(b.log.printf))
	t.Cleanup(func() {
		b.log.stop()
		cancelBrowser()
		cancelAlloc()
		cancel()
	})
	started := time.Now()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("browser: start %s: %v\n%s", path, err, b.output.tail(4000))
	}
	t.Logf("browser: %s started in %s", path, time.Since(started).Round(time.Millisecond))
	b.ctx = bctx
	return b
}

// safeLog forwards chromedp's complaints to the test log until the test
// ends (logging after that panics).
type safeLog struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (l *safeLog) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.t.Logf("chromedp: "+format, args...)
	}
}

func (l *safeLog) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
}

// lockedBuffer keeps the browser's output for a failed start.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 {
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}
