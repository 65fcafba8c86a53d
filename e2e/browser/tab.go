package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Viewport is a screen a tab emulates.
type Viewport struct {
	// Name labels the viewport ("desktop", "phone").
	Name string
	// Width and Height are the CSS pixels of the viewport.
	Width, Height int64
	// Scale is the device pixel ratio (screenshots are Width×Scale wide).
	Scale float64
	// Mobile turns on mobile emulation (meta viewport, overlay scrollbars,
	// a mobile user agent); Touch turns on touch events, and [Tab.Click]
	// then taps.
	Mobile, Touch bool
}

// The viewports of [Desktop] and [Phone].
var (
	DesktopViewport = Viewport{Name: "desktop", Width: 1280, Height: 900, Scale: 1}
	PhoneViewport   = Viewport{Name: "phone", Width: 390, Height: 844, Scale: 2, Mobile: true, Touch: true}
)

// TabOption configures [Browser.NewTab].
type TabOption func(*tabConfig)

type tabConfig struct {
	viewport Viewport
	noJS     bool
	wallet   *Wallet
	scripts  []string
}

// Tab viewport presets.
var (
	// Desktop is a 1280×900 laptop screen (the default).
	Desktop TabOption = WithViewport(DesktopViewport)
	// Phone is a 390×844 phone (an iPhone 12–15's CSS size) with mobile
	// emulation and touch.
	Phone TabOption = WithViewport(PhoneViewport)
)

// WithViewport emulates a screen.
func WithViewport(v Viewport) TabOption { return func(c *tabConfig) { c.viewport = v } }

// WithoutJavaScript disables script execution in the tab
// (Emulation.setScriptExecutionDisabled), as a customer with JavaScript off
// sees the page: noscript content shows.
func WithoutJavaScript() TabOption { return func(c *tabConfig) { c.noJS = true } }

// WithWallet injects the test wallet into every document the tab loads.
func WithWallet(w *Wallet) TabOption { return func(c *tabConfig) { c.wallet = w } }

// WithScript runs src in every document the tab loads, before the page's
// own scripts (a stand-in for what a browser extension injects).
func WithScript(src string) TabOption {
	return func(c *tabConfig) { c.scripts = append(c.scripts, src) }
}

// Tab is one page of the browser, in its own browser context (no cookies,
// storage or cache shared with other tabs). Its helpers fail the test (so
// call them from the test's goroutine), each bounded by the action timeout.
type Tab struct {
	t      testing.TB
	b      *Browser
	ctx    context.Context
	cfg    tabConfig
	wallet *Wallet
	frame  cdp.FrameID // the main frame

	mu     sync.Mutex
	errors []PageError
	net    netState
}

// PageError is a console error, an uncaught exception, a browser log error
// (a failed load, a blocked resource) or a CSP violation of the page.
type PageError struct {
	// Kind is "console.error", "exception", "log.<source>" (e.g.
	// "log.network", "log.security") or "csp".
	Kind string
	// Text is the message.
	Text string
	// URL and Line say where, when known (Line counts from 1).
	URL  string
	Line int64
}

func (e PageError) String() string {
	s := e.Kind + ": " + e.Text
	if e.URL != "" {
		s += fmt.Sprintf(" (%s:%d)", e.URL, e.Line)
	}
	return s
}

// reportBinding carries the page's securitypolicyviolation events to Go.
const reportBinding = "__paygateReport"

// cspReporterJS listens for CSP violations before the page's scripts run.
const cspReporterJS = `(function () {
  if (Object.prototype.hasOwnProperty.call(window, '__paygateReporter')) return;
  Object.defineProperty(window, '__paygateReporter', { value: true });
  window.addEventListener('securitypolicyviolation', function (e) {
    try {
      window.` + reportBinding + `(JSON.stringify({
        directive: e.effectiveDirective || e.violatedDirective, blocked: e.blockedURI,
        source: e.sourceFile, line: e.lineNumber, sample: e.sample, disposition: e.disposition }));
    } catch (_) {}
  }, true);
})();`

// NewTab opens a tab (desktop-sized unless told otherwise), closed when the
// test ends.
func (b *Browser) NewTab(opts ...TabOption) *Tab {
	b.t.Helper()
	cfg := tabConfig{viewport: DesktopViewport}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.noJS && cfg.wallet != nil {
		b.t.Fatal("browser: a wallet needs JavaScript (WithWallet and WithoutJavaScript together)")
	}
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	b.t.Cleanup(cancel)
	tab := &Tab{t: b.t, b: b, ctx: ctx, cfg: cfg, wallet: cfg.wallet}
	if err := chromedp.Do(ctx); err != nil { // opens the tab; bound to the browser's life
		b.t.Fatalf("browser: new tab: %v", err)
	}
	tab.frame = cdp.FrameID(chromedp.FromContext(ctx).Target.TargetID)
	if err := chromedp.Listen(ctx, tab.onEvent); err != nil {
		b.t.Fatalf("browser: listen: %v", err)
	}
	sctx, scancel := context.WithTimeout(ctx, b.actionTimeout)
	defer scancel()
	if err := tab.setup(sctx); err != nil {
		b.t.Fatalf("browser: set up tab: %v", err)
	}
	if cfg.wallet != nil {
		cfg.wallet.attach(tab)
	}
	return tab
}

func (tab *Tab) setup(ctx context.Context) error {
	v := tab.cfg.viewport
	vopts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(v.Scale)}
	if v.Mobile {
		vopts = append(vopts, chromedp.EmulateMobile, chromedp.EmulatePortrait)
	}
	if v.Touch {
		vopts = append(vopts, chromedp.EmulateTouch)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(v.Width, v.Height, vopts...)); err != nil {
		return err
	}
	if v.Mobile {
		ver, err := chromedp.CallBrowser(ctx, cdpbrowser.GetVersion, cdp.Empty{})
		if err != nil {
			return err
		}
		if _, err := chromedp.Call(ctx, emulation.SetUserAgentOverride, emulation.SetUserAgentOverrideParams{
			UserAgent: mobileUserAgent(ver.Product), Platform: "Linux armv8l",
		}); err != nil {
			return err
		}
	}
	if tab.cfg.noJS {
		_, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return err
	}
	scripts := []string{cspReporterJS}
	bindings := []string{reportBinding}
	if tab.wallet != nil {
		scripts = append(scripts, tab.wallet.script())
		bindings = append(bindings, walletBinding)
	}
	scripts = append(scripts, tab.cfg.scripts...)
	for _, name := range bindings {
		if _, err := chromedp.Call(ctx, runtime.AddBinding, runtime.AddBindingParams{Name: name}); err != nil {
			return err
		}
	}
	for _, src := range scripts {
		if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: src}); err != nil {
			return err
		}
	}
	return nil
}

// mobileUserAgent is Chrome on an Android phone, of the running version.
func mobileUserAgent(product string) string {
	version := "0.0.0.0"
	if _, v, ok := strings.Cut(product, "/"); ok {
		version = v
	}
	return "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/" + version + " Mobile Safari/537.36"
}

// Context is the tab's chromedp context, for what the helpers do not cover
// (chromedp.Run(tab.Context(), ...)).
func (tab *Tab) Context() context.Context { return tab.ctx }

// Viewport is the screen the tab emulates.
func (tab *Tab) Viewport() Viewport { return tab.cfg.viewport }

// onEvent runs in the tab's event loop, in the order Chrome sent the events:
// it only records, and hands wallet requests to goroutines.
func (tab *Tab) onEvent(ev any) {
	switch ev := ev.(type) {
	case *runtime.EventBindingCalled:
		switch ev.Name {
		case walletBinding:
			if tab.wallet != nil {
				tab.onWalletCall(ev)
			}
		case reportBinding:
			tab.onCSPReport(ev.Payload)
		}
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			pe := PageError{Kind: "console." + string(ev.Type), Text: argsText(ev.Args)}
			if ev.StackTrace != nil && len(ev.StackTrace.CallFrames) > 0 {
				f := ev.StackTrace.CallFrames[0]
				pe.URL, pe.Line = f.URL, f.LineNumber+1
			}
			tab.addError(pe)
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text += " " + d.Exception.Description
		}
		tab.addError(PageError{Kind: "exception", Text: text, URL: d.URL, Line: d.LineNumber + 1})
	case *log.EventEntryAdded:
		if e := ev.Entry; e != nil && e.Level == log.EntryLevelError {
			tab.addError(PageError{Kind: "log." + string(e.Source), Text: e.Text, URL: e.URL, Line: e.LineNumber + 1})
		}
	case *network.EventRequestWillBeSent:
		tab.onRequest(ev)
	case *network.EventResponseReceived:
		tab.mu.Lock()
		if r := tab.net.reqs[ev.RequestID]; r != nil && ev.Type != "" {
			r.typ = ev.Type
		}
		tab.mu.Unlock()
	case *network.EventLoadingFinished:
		tab.mu.Lock()
		if r := tab.net.reqs[ev.RequestID]; r != nil {
			r.bytes, r.done = int64(ev.EncodedDataLength), true
		}
		tab.mu.Unlock()
	case *network.EventLoadingFailed:
		tab.mu.Lock()
		if r := tab.net.reqs[ev.RequestID]; r != nil {
			r.done = true
		}
		tab.mu.Unlock()
	}
}

func argsText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		switch {
		case a == nil:
		case a.Type == runtime.RemoteObjectTypeString:
			var s string
			if json.Unmarshal(a.Value, &s) == nil {
				parts = append(parts, s)
			}
		case len(a.Value) > 0:
			parts = append(parts, string(a.Value))
		case a.UnserializableValue != "":
			parts = append(parts, string(a.UnserializableValue))
		default:
			parts = append(parts, a.Description)
		}
	}
	return strings.Join(parts, " ")
}

func (tab *Tab) addError(e PageError) {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	tab.errors = append(tab.errors, e)
}

func (tab *Tab) onCSPReport(payload string) {
	var r struct {
		Directive, Blocked, Source, Sample, Disposition string
		Line                                            int64
	}
	if err := json.Unmarshal([]byte(payload), &r); err != nil {
		tab.addError(PageError{Kind: "csp", Text: "unreadable report: " + payload})
		return
	}
	text := fmt.Sprintf("%s blocked by %q", r.Blocked, r.Directive)
	if r.Sample != "" {
		text += fmt.Sprintf(" (sample %q)", r.Sample)
	}
	if r.Disposition == "report" {
		text += " [report-only]"
	}
	tab.addError(PageError{Kind: "csp", Text: text, URL: r.Source, Line: r.Line})
}

// onWalletCall records the request now, in arrival order, and answers it
// from a goroutine (it may wait on the chain).
func (tab *Tab) onWalletCall(ev *runtime.EventBindingCalled) {
	var req struct {
		ID     int64           `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal([]byte(ev.Payload), &req); err != nil {
		tab.addError(PageError{Kind: "wallet", Text: "unreadable request: " + ev.Payload})
		return
	}
	rec := tab.wallet.record(req.Method, req.Params)
	go func() {
		res, pe, events := tab.wallet.answer(tab.ctx, rec)
		errJSON := []byte("null")
		if pe != nil {
			errJSON, _ = json.Marshal(pe)
		}
		if res == nil {
			res = json.RawMessage("null")
		}
		tab.evalQuiet(ev.ExecutionContextID, fmt.Sprintf("window.%s(%d, %s, %s)", walletSettle, req.ID, res, errJSON))
		tab.wallet.emit(events...)
	}()
}

// evalQuiet runs an expression in a context of the page (0: the main
// frame's), ignoring failures: the page may have navigated away.
func (tab *Tab) evalQuiet(contextID runtime.ExecutionContextID, expr string) {
	if tab.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(tab.ctx, 10*time.Second)
	defer cancel()
	_, _ = chromedp.Call(ctx, runtime.Evaluate, runtime.EvaluateParams{Expression: expr, ContextID: contextID})
}

// ConsoleErrors returns the page errors seen so far in this tab: console
// errors, uncaught exceptions, browser log errors (failed loads) and CSP
// violations, in order.
func (tab *Tab) ConsoleErrors() []PageError {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	return slices.Clone(tab.errors)
}

// AssertNoConsoleErrors fails the test (without stopping it) if the page
// reported any error or CSP violation.
func (tab *Tab) AssertNoConsoleErrors() {
	tab.t.Helper()
	if errs := tab.ConsoleErrors(); len(errs) > 0 {
		lines := make([]string, len(errs))
		for i, e := range errs {
			lines[i] = "  " + e.String()
		}
		tab.t.Errorf("browser: the page reported %d error(s):\n%s", len(errs), strings.Join(lines, "\n"))
	}
}

// action runs steps under the action timeout; failures stop the test with
// the page's state.
func (tab *Tab) action(what string, steps ...chromedp.Action[chromedp.Void]) {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, tab.b.actionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tab.fail(what, err)
	}
}

func (tab *Tab) fail(what string, err error) {
	tab.t.Helper()
	tab.t.Fatalf("browser: %s: %v%s", what, err, tab.diagnostics())
}

// diagnostics describes the page for a failure message: where it is, what it
// shows, what it complained about.
func (tab *Tab) diagnostics() string {
	var sb strings.Builder
	if tab.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(tab.ctx, 3*time.Second)
		defer cancel()
		var st struct {
			URL  string `json:"url"`
			Text string `json:"text"`
		}
		if raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](`({url: location.href, text: document.body ? document.body.innerText : ""})`)); err == nil && json.Unmarshal(raw, &st) == nil {
			text := strings.TrimSpace(st.Text)
			if len(text) > 1500 {
				text = text[:1500] + "…"
			}
			fmt.Fprintf(&sb, "\npage %s shows:\n%s", st.URL, text)
		}
	}
	for _, e := range tab.ConsoleErrors() {
		fmt.Fprintf(&sb, "\npage error: %s", e)
	}
	if tab.wallet != nil {
		fmt.Fprintf(&sb, "\nwallet requests: %v", tab.wallet.Methods())
	}
	return sb.String()
}

// Navigate loads url and waits for its load event; it returns the HTTP
// status of the document.
func (tab *Tab) Navigate(url string) int {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, tab.b.actionTimeout)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(url))
	if err != nil {
		tab.fail("Navigate("+url+")", err)
	}
	if resp == nil {
		return 0
	}
	return int(resp.Status)
}

// WaitVisible waits until the first element matching the CSS selector is
// visible.
func (tab *Tab) WaitVisible(sel string) {
	tab.t.Helper()
	tab.action(fmt.Sprintf("WaitVisible(%q)", sel), chromedp.WaitVisible(chromedp.CSS(sel)))
}

// WaitNotVisible waits until the first element matching the CSS selector is
// hidden or gone.
func (tab *Tab) WaitNotVisible(sel string) {
	tab.t.Helper()
	tab.action(fmt.Sprintf("WaitNotVisible(%q)", sel), chromedp.WaitNotVisible(chromedp.CSS(sel)))
}

// Click clicks the first element matching the CSS selector once it is
// visible; on a touch viewport ([Phone]) it taps it.
func (tab *Tab) Click(sel string) {
	tab.t.Helper()
	if tab.cfg.viewport.Touch {
		tab.action(fmt.Sprintf("Tap(%q)", sel), chromedp.Tap(chromedp.CSS(sel), chromedp.NodeVisible))
		return
	}
	tab.action(fmt.Sprintf("Click(%q)", sel), chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// SetValue sets the value of a form field (input, textarea, select) once it
// is visible and fires its input and change events, as a user's edit does.
func (tab *Tab) SetValue(sel, v string) {
	tab.t.Helper()
	selJSON, _ := json.Marshal(sel)
	vJSON, _ := json.Marshal(v)
	tab.action(fmt.Sprintf("SetValue(%q)", sel),
		chromedp.WaitVisible(chromedp.CSS(sel)),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
			const e = document.querySelector(%s);
			const d = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(e), 'value');
			if (d && d.set) d.set.call(e, %s); else e.value = %s;
			e.dispatchEvent(new Event('input', { bubbles: true }));
			e.dispatchEvent(new Event('change', { bubbles: true }));
		})()`, selJSON, vJSON, vJSON)),
	)
}

// Type types text into the first element matching the CSS selector, key by
// key.
func (tab *Tab) Type(sel, text string) {
	tab.t.Helper()
	tab.action(fmt.Sprintf("Type(%q)", sel), chromedp.SendKeys(chromedp.CSS(sel), text))
}

// Text returns the visible text of the first element matching the CSS
// selector, once it is visible.
func (tab *Tab) Text(sel string) string {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, tab.b.actionTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
	if err != nil {
		tab.fail(fmt.Sprintf("Text(%q)", sel), err)
	}
	return strings.TrimSpace(s)
}

// WaitText waits until the text of the first element matching the CSS
// selector contains want, and returns the text.
func (tab *Tab) WaitText(sel, want string) string {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, tab.b.actionTimeout)
	defer cancel()
	selJSON, _ := json.Marshal(sel)
	last := ""
	for {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.textContent : "" })()`, selJSON)))
		if err == nil {
			last = strings.TrimSpace(s)
			if strings.Contains(last, want) {
				return last
			}
		}
		select {
		case <-ctx.Done():
			tab.fail(fmt.Sprintf("WaitText(%q, %q): last text %q", sel, want, last), ctx.Err())
			return ""
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Eval evaluates a JavaScript expression in the page (awaiting a promise)
// and decodes its JSON value into out (nil to ignore it). The page's CSP
// does not apply to it.
func (tab *Tab) Eval(expr string, out any) {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, tab.b.actionTimeout)
	defer cancel()
	if out == nil {
		if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](expr, chromedp.EvalAwaitPromise)); err != nil {
			tab.fail("Eval("+expr+")", err)
		}
		return
	}
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		tab.fail("Eval("+expr+")", err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		tab.fail("Eval("+expr+"): decode", err)
	}
}

// ScreenshotDir is where [Tab.Screenshot] writes; empty means
// $SCREENSHOT_DIR, else .cache/screenshots at the repository root (found by
// walking up to go.mod), so a test run leaves the tree clean. The README's
// pictures in docs/screenshots are refreshed with `make screenshots`
// (SCREENSHOT_DIR=docs/screenshots).
var ScreenshotDir = ""

// screenshotDir resolves [ScreenshotDir] and creates it.
func screenshotDir() (string, error) {
	dir := ScreenshotDir
	if dir == "" {
		dir = os.Getenv("SCREENSHOT_DIR")
	}
	if dir == "" || !filepath.IsAbs(dir) {
		root, err := repoRoot()
		if err != nil {
			return "", err
		}
		if dir == "" {
			dir = filepath.Join(".cache", "screenshots")
		}
		dir = filepath.Join(root, dir)
	}
	return dir, os.MkdirAll(dir, 0o755)
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Screenshot saves a full-page PNG as <ScreenshotDir>/<name>.png and returns
// its path.
func (tab *Tab) Screenshot(name string) string {
	tab.t.Helper()
	dir, err := screenshotDir()
	if err != nil {
		tab.fail("Screenshot("+name+")", err)
	}
	ctx, cancel := context.WithTimeout(tab.ctx, tab.b.actionTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tab.fail("Screenshot("+name+")", err)
	}
	file := filepath.Join(dir, unsafeName.ReplaceAllString(strings.TrimSuffix(name, ".png"), "-")+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		tab.fail("Screenshot("+name+")", err)
	}
	return file
}

// netState follows the requests of the current document: a main-frame
// navigation starts afresh.
type netState struct {
	loader cdp.LoaderID
	reqs   map[network.RequestID]*request
}

type request struct {
	url   string
	typ   network.ResourceType
	bytes int64
	done  bool
}

func (tab *Tab) onRequest(ev *network.EventRequestWillBeSent) {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	if ev.Type == network.ResourceTypeDocument && ev.FrameID == tab.frame && string(ev.RequestID) == string(ev.LoaderID) {
		if ev.LoaderID != tab.net.loader {
			tab.net = netState{loader: ev.LoaderID, reqs: map[network.RequestID]*request{}}
		}
	}
	if tab.net.reqs == nil || ev.LoaderID != tab.net.loader {
		return
	}
	if r := tab.net.reqs[ev.RequestID]; r != nil { // a redirect: same request
		r.url = ev.Request.URL
		return
	}
	tab.net.reqs[ev.RequestID] = &request{url: ev.Request.URL, typ: ev.Type}
}

// Metrics are what loading the current document cost.
type Metrics struct {
	// URL is the document's.
	URL string
	// Load is Navigation Timing's loadEventEnd − startTime;
	// DOMContentLoaded is domContentLoadedEventEnd − startTime.
	Load, DOMContentLoaded time.Duration
	// Bytes is the transferred weight: the sum of encodedDataLength of every
	// finished response of the document (headers included, bodies as the
	// wire carried them, gzip counted compressed); cached responses count
	// what they transferred.
	Bytes int64
	// Requests counts the document's requests.
	Requests int
	// ByType breaks Bytes down by resource type: "document", "script",
	// "stylesheet" and "image" are always there, others ("font", "fetch",
	// "other"…) when seen.
	ByType map[string]int64
}

func (m Metrics) String() string {
	keys := make([]string, 0, len(m.ByType))
	for k := range m.ByType {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d B", k, m.ByType[k])
	}
	return fmt.Sprintf("load %s, DOMContentLoaded %s, %d B in %d requests (%s)",
		m.Load.Round(time.Microsecond*100), m.DOMContentLoaded.Round(time.Microsecond*100), m.Bytes, m.Requests, strings.Join(parts, ", "))
}

// Metrics waits for the document's load event and for its requests to
// settle (at most 3 s more, for a page that keeps polling), then reports
// its load time and transferred weight.
func (tab *Tab) Metrics() Metrics {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, tab.b.actionTimeout)
	defer cancel()
	var nav struct {
		URL  string  `json:"url"`
		Load float64 `json:"load"`
		DCL  float64 `json:"dcl"`
	}
	for {
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](`(() => {
			const n = performance.getEntriesByType('navigation')[0];
			return n ? {url: n.name, load: n.loadEventEnd - n.startTime, dcl: n.domContentLoadedEventEnd - n.startTime, done: n.loadEventEnd > 0} : {done: false};
		})()`))
		var done struct {
			Done bool `json:"done"`
		}
		if err == nil && json.Unmarshal(raw, &done) == nil && done.Done {
			if err := json.Unmarshal(raw, &nav); err != nil {
				tab.fail("Metrics", err)
			}
			break
		}
		select {
		case <-ctx.Done():
			tab.fail("Metrics: the load event never ended", errors.Join(ctx.Err(), err))
		case <-time.After(50 * time.Millisecond):
		}
	}
	settle := time.Now().Add(3 * time.Second)
	for time.Now().Before(settle) && tab.pending() > 0 {
		time.Sleep(20 * time.Millisecond)
	}
	m := Metrics{
		URL:              nav.URL,
		Load:             time.Duration(nav.Load * float64(time.Millisecond)),
		DOMContentLoaded: time.Duration(nav.DCL * float64(time.Millisecond)),
		ByType:           map[string]int64{"document": 0, "script": 0, "stylesheet": 0, "image": 0},
	}
	tab.mu.Lock()
	defer tab.mu.Unlock()
	for _, r := range tab.net.reqs {
		m.Requests++
		m.Bytes += r.bytes
		typ := strings.ToLower(string(r.typ))
		if typ == "" {
			typ = "other"
		}
		m.ByType[typ] += r.bytes
	}
	return m
}

func (tab *Tab) pending() int {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	n := 0
	for _, r := range tab.net.reqs {
		if !r.done {
			n++
		}
	}
	return n
}
