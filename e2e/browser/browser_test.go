package browser_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/paygate/paygate/chain/contracts"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/e2e/browser"
)

// The self-test's chains: the wallet starts on the first, the page wants the
// second, which the wallet does not know.
const (
	walletChainID = devchain.DefaultChainID
	pageChainID   = 84532 // base_sepolia's
)

func startChain(t *testing.T, chainID uint64) *devchain.Chain {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c, err := devchain.Start(ctx, devchain.Config{Port: devchain.AnyPort, ChainID: chainID, BlockInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// strictCSP is the checkout page's policy: nothing but what the page names.
func strictCSP(nonce string) string {
	return "default-src 'none'; script-src 'nonce-" + nonce + "'; style-src 'nonce-" + nonce + "'; " +
		"img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
}

func newNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

var selftest = template.Must(template.ParseFiles("testdata/selftest.html"))

// payPage is what the self-test page is rendered with.
type payPage struct {
	Nonce, ChainHex, RPC, Token, To, Units, Amount, TypedData string
}

// serve serves the self-test page under a strict CSP header, a favicon, and
// whatever extra handlers the test adds.
func serve(t *testing.T, page payPage, extra map[string]http.HandlerFunc) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		p := page
		p.Nonce = newNonce()
		w.Header().Set("Content-Security-Policy", strictCSP(p.Nonce))
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := selftest.Execute(w, p); err != nil {
			t.Error(err)
		}
	})
	mux.HandleFunc("GET /favicon.svg", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/svg+xml")
		_, _ = w.Write([]byte(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><circle cx="8" cy="8" r="8" fill="#1f6feb"/></svg>`))
	})
	for path, h := range extra {
		mux.HandleFunc(path, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestWalletPaysOnDevChain drives the self-test page as a customer would:
// the page finds the wallet by EIP-6963 only, connects, is told 4902 for
// its chain and adds it, signs a TransferWithAuthorization and sends a USDC
// transfer, at desktop size; then at phone size, the customer first rejects
// the signature and the page shows the error, then pays.
func TestWalletPaysOnDevChain(t *testing.T) {
	walletChain := startChain(t, walletChainID)
	payChain := startChain(t, pageChainID)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	customer := crypto.PubkeyToAddress(devchain.CustomerKey().PublicKey)
	merchant := common.HexToAddress("0x00000000000000000000000000000000000b0b01")
	domain, err := devchain.ReadTokenDomain(ctx, payChain.Client(), devchain.USDCAddress)
	if err != nil {
		t.Fatal(err)
	}
	var reference [32]byte
	_, _ = rand.Read(reference[:])
	units := big.NewInt(1_500_000)
	auth := devchain.Authorization{
		From: customer, To: merchant, Value: units,
		ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(time.Now().Add(24 * time.Hour).Unix()),
		Nonce: reference,
	}
	typed, err := json.Marshal(devchain.AuthorizationTypedData(domain, auth))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, payPage{
		ChainHex: hexutil.EncodeUint64(pageChainID), RPC: payChain.RPCURL(),
		Token: devchain.USDCAddress.Hex(), To: merchant.Hex(), Units: units.String(), Amount: "1.50",
		TypedData: string(typed),
	}, nil)

	b := browser.Start(t)

	// Desktop: EIP-6963 only, the happy path.
	w := browser.NewWallet(browser.WalletConfig{
		Key:              devchain.CustomerKey(),
		RPC:              map[uint64]string{walletChainID: walletChain.RPCURL()},
		NoWindowEthereum: true,
	})
	desk := b.NewTab(browser.Desktop, browser.WithWallet(w))
	if status := desk.Navigate(srv.URL); status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	if got := desk.WaitText("#wallet-name", browser.WalletName); !strings.Contains(got, "window.ethereum unset") {
		t.Errorf("wallet line %q: window.ethereum should be unset", got)
	}
	desk.Click("#pay")
	desk.WaitText("#status", "Paid")
	desk.Screenshot("selftest-wallet-desktop")

	wantMethods := []string{"eth_requestAccounts", "eth_chainId", "wallet_switchEthereumChain", "wallet_addEthereumChain",
		"eth_chainId", "eth_signTypedData_v4", "eth_sendTransaction", "eth_getTransactionReceipt"}
	if got := w.Methods(); len(got) < len(wantMethods) || strings.Join(got[:len(wantMethods)], ",") != strings.Join(wantMethods, ",") {
		t.Errorf("wallet requests %v, want them to start %v", got, wantMethods)
	}
	if sw := w.RequestsFor("wallet_switchEthereumChain"); len(sw) != 1 || sw[0].Err == nil || sw[0].Err.Code != browser.CodeUnrecognizedChain {
		t.Errorf("switch to an unknown chain: %+v, want a 4902", sw)
	}
	if w.ChainID() != pageChainID {
		t.Errorf("wallet on chain %d after wallet_addEthereumChain, want %d", w.ChainID(), pageChainID)
	}
	if ev := desk.Text("#events"); !strings.Contains(ev, "accountsChanged:1") || !strings.Contains(ev, "chainChanged:"+hexutil.EncodeUint64(pageChainID)) {
		t.Errorf("page saw events %q, want accountsChanged and chainChanged", ev)
	}

	// The page asked to sign the session's authorization: its nonce is the
	// reference, and the signature recovers to the customer and moves the
	// token (simulated).
	signs := w.RequestsFor("eth_signTypedData_v4")
	if len(signs) != 1 {
		t.Fatalf("%d signature requests", len(signs))
	}
	td, err := signs[0].TypedData()
	if err != nil {
		t.Fatal(err)
	}
	if got := td.Message["nonce"]; got != hexutil.Encode(reference[:]) {
		t.Errorf("signed nonce %v, want the reference %s", got, hexutil.Encode(reference[:]))
	}
	sig := hexutil.MustDecode(desk.Text("#signature"))
	if len(sig) != 65 || (sig[64] != 27 && sig[64] != 28) {
		t.Fatalf("signature %x: want 65 bytes with v 27/28", sig)
	}
	digest := devchain.AuthorizationDigest(domain, auth)
	rsv := bytes.Clone(sig)
	rsv[64] -= 27
	pub, err := crypto.SigToPub(digest[:], rsv)
	if err != nil || crypto.PubkeyToAddress(*pub) != customer {
		t.Errorf("signature recovers to %v (%v), want the customer %s", pub, err, customer)
	}
	if err := devchain.SimulateAuthorization(ctx, payChain.Client(), devchain.USDCAddress, auth, sig); err != nil {
		t.Errorf("the token refuses the signed authorization: %v", err)
	}

	// The transfer is mined on the page's chain.
	hash := common.HexToHash(desk.Text("#tx"))
	receipt, err := payChain.Client().TransactionReceipt(ctx, hash)
	if err != nil || receipt.Status != 1 {
		t.Fatalf("receipt of %s: %+v, %v", hash, receipt, err)
	}
	if got := balanceOf(t, ctx, payChain, merchant); got.Cmp(units) != 0 {
		t.Errorf("merchant holds %s units, want %s", got, units)
	}
	desk.AssertNoConsoleErrors()

	// Phone: window.ethereum set too; the customer rejects the signature,
	// then accepts.
	pw := browser.NewWallet(browser.WalletConfig{
		Key:    devchain.CustomerKey(),
		RPC:    map[uint64]string{walletChainID: walletChain.RPCURL()},
		Reject: []string{"eth_signTypedData_v4"},
	})
	phone := b.NewTab(browser.Phone, browser.WithWallet(pw))
	phone.Navigate(srv.URL)
	if got := phone.WaitText("#wallet-name", browser.WalletName); !strings.Contains(got, "window.ethereum set") {
		t.Errorf("wallet line %q: window.ethereum should be set", got)
	}
	var ua string
	phone.Eval(`navigator.userAgent`, &ua)
	phone.Eval(`void 0`, nil) // a statement's undefined is no error
	if !strings.Contains(ua, "Mobile") {
		t.Errorf("phone user agent %q", ua)
	}
	phone.Click("#pay")
	phone.WaitText("#status", "Error 4001")
	phone.Screenshot("selftest-wallet-phone-rejected")
	if n := len(pw.RequestsFor("eth_sendTransaction")); n != 0 {
		t.Errorf("%d transactions sent after a rejected signature", n)
	}
	pw.Accept("eth_signTypedData_v4")
	phone.Click("#pay")
	phone.WaitText("#status", "Paid")
	phone.Screenshot("selftest-wallet-phone")
	if got := balanceOf(t, ctx, payChain, merchant); got.Cmp(new(big.Int).Mul(units, big.NewInt(2))) != 0 {
		t.Errorf("merchant holds %s units after two payments", got)
	}
	phone.AssertNoConsoleErrors()
}

func balanceOf(t *testing.T, ctx context.Context, c *devchain.Chain, who common.Address) *big.Int {
	t.Helper()
	out, err := contracts.Call(ctx, c.Client(), contracts.MustLoad(contracts.TestUSDC), devchain.USDCAddress, "balanceOf", who)
	if err != nil {
		t.Fatal(err)
	}
	return out[0].(*big.Int)
}

// TestWithoutJavaScript shows the noscript message and runs no script.
func TestWithoutJavaScript(t *testing.T) {
	srv := serve(t, payPage{ChainHex: "0x1", Units: "1", Amount: "1.00", TypedData: "{}"}, nil)
	b := browser.Start(t)
	tab := b.NewTab(browser.Phone, browser.WithoutJavaScript())
	tab.Navigate(srv.URL)
	tab.WaitVisible("#noscript")
	if got := tab.Text("#noscript"); !strings.Contains(got, "JavaScript is off") {
		t.Errorf("noscript says %q", got)
	}
	if got := tab.Text("#wallet-name"); got != "Looking for a wallet…" {
		t.Errorf("a script ran: wallet line %q", got)
	}
	tab.Screenshot("selftest-nojs-phone")
	tab.AssertNoConsoleErrors()

	js := b.NewTab()
	js.Navigate(srv.URL)
	js.WaitText("#wallet-name", "Looking for a wallet")
	var noscriptShown bool
	js.Eval(`!!document.getElementById('noscript')`, &noscriptShown)
	if noscriptShown {
		t.Error("noscript content rendered with JavaScript on")
	}
}

// TestConsoleErrorsCatchCSPViolations proves the assertion of the page tests
// means something: an inline script without the nonce, an image from another
// origin, a console.error and an exception are all reported.
func TestConsoleErrorsCatchCSPViolations(t *testing.T) {
	nonce := newNonce()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Security-Policy", strictCSP(nonce))
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><html><head><link rel="icon" href="data:,"></head><body><p id="done">ok</p>
<script>document.title = 'no nonce: blocked';</script>
<img src="http://127.0.0.2:9/x.png" alt="">
<script nonce="` + nonce + `">console.error('boom', 42); setTimeout(function () { throw new Error('kaput'); }, 0);</script>
</body></html>`))
	}))
	defer srv.Close()

	b := browser.Start(t)
	tab := b.NewTab()
	tab.Navigate(srv.URL)
	tab.WaitVisible("#done")
	deadline := time.Now().Add(5 * time.Second)
	want := []string{"csp:script-src", "csp:img-src", "console.error:boom 42", "exception:kaput"}
	var missing []string
	for {
		missing = missing[:0]
		errs := tab.ConsoleErrors()
		for _, w := range want {
			kind, text, _ := strings.Cut(w, ":")
			found := false
			for _, e := range errs {
				if e.Kind == kind && strings.Contains(e.Text, text) {
					found = true
				}
			}
			if !found {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(missing) > 0 {
		t.Errorf("not reported: %v; reported: %v", missing, tab.ConsoleErrors())
	}
	for _, e := range tab.ConsoleErrors() {
		t.Logf("reported: %s", e)
	}
}

// TestMetrics loads a page with a gzipped script, a stylesheet and an image:
// the load time is measured and the weight counts the script compressed.
func TestMetrics(t *testing.T) {
	script := []byte("/* " + strings.Repeat("paygate ", 8000) + "*/\ndocument.getElementById('js').textContent = 'ran';\n")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(script)
	_ = zw.Close()
	nonce := newNonce()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><html><head><link rel="icon" href="data:,"><link rel="stylesheet" href="/app.css"></head>
<body><p id="js">no script</p><img src="/logo.svg" alt="logo" width="32" height="32"><script src="/app.js" nonce="` + nonce + `"></script></body></html>`))
	})
	mux.HandleFunc("GET /app.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(gz.Bytes())
	})
	mux.HandleFunc("GET /app.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css")
		_, _ = w.Write([]byte("body { font-family: sans-serif; }\n"))
	})
	mux.HandleFunc("GET /logo.svg", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/svg+xml")
		_, _ = w.Write([]byte(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 8 8"><rect width="8" height="8"/></svg>`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	b := browser.Start(t)
	tab := b.NewTab()
	tab.Navigate(srv.URL)
	tab.WaitText("#js", "ran")
	m := tab.Metrics()
	t.Logf("metrics: %s", m)
	if m.Load <= 0 || m.DOMContentLoaded <= 0 || m.DOMContentLoaded > m.Load {
		t.Errorf("load %s, DOMContentLoaded %s", m.Load, m.DOMContentLoaded)
	}
	for _, typ := range []string{"document", "script", "stylesheet", "image"} {
		if m.ByType[typ] <= 0 {
			t.Errorf("no %s bytes: %s", typ, m)
		}
	}
	if m.Requests != 4 {
		t.Errorf("%d requests, want 4: %s", m.Requests, m)
	}
	if s := m.ByType["script"]; s < int64(gz.Len()) || s > int64(gz.Len())+1024 {
		t.Errorf("script weighs %d B on the wire; gzipped body is %d B, plain %d B", s, gz.Len(), len(script))
	}
	var sum int64
	for _, v := range m.ByType {
		sum += v
	}
	if sum != m.Bytes {
		t.Errorf("types add up to %d, total %d", sum, m.Bytes)
	}
	tab.AssertNoConsoleErrors()
}

// TestScreenshotDir writes where ScreenshotDir says.
func TestScreenshotDir(t *testing.T) {
	dir := t.TempDir()
	old := browser.ScreenshotDir
	browser.ScreenshotDir = filepath.Join(dir, "shots")
	defer func() { browser.ScreenshotDir = old }()
	srv := serve(t, payPage{ChainHex: "0x1", Units: "1", Amount: "1.00", TypedData: "{}"}, nil)
	b := browser.Start(t)
	tab := b.NewTab()
	tab.Navigate(srv.URL)
	path := tab.Screenshot("a b/c")
	if path != filepath.Join(dir, "shots", "a-b-c.png") {
		t.Errorf("saved to %s", path)
	}
	png, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("not a PNG: %v", err)
	}
}

// stopTB stands in for the test in [browser.Start] to see whether it skips
// or fails; both stop the caller, as the real ones do.
type stopTB struct {
	testing.TB
	skipped, failed string
}

type stopped struct{}

func (s *stopTB) Helper()           {}
func (s *stopTB) Skip(args ...any)  { s.skipped = fmt.Sprint(args...); panic(stopped{}) }
func (s *stopTB) Fatal(args ...any) { s.failed = fmt.Sprint(args...); panic(stopped{}) }

func (s *stopTB) start() {
	defer func() {
		if r := recover(); r != nil && r != (stopped{}) {
			panic(r)
		}
	}()
	browser.Start(s)
}

// TestWithoutChromium: no browser skips the test and says how to install
// one; under CI=true it fails.
func TestWithoutChromium(t *testing.T) {
	old := browser.ExecPath
	browser.ExecPath = filepath.Join(t.TempDir(), "chromium")
	defer func() { browser.ExecPath = old }()
	t.Setenv("PATH", t.TempDir())
	if browser.Available() {
		t.Fatal("a chromium is available")
	}

	t.Setenv("CI", "")
	s := &stopTB{TB: t}
	s.start()
	if s.failed != "" || !strings.Contains(s.skipped, "make chromium") {
		t.Errorf("outside CI: skipped %q, failed %q", s.skipped, s.failed)
	}

	t.Setenv("CI", "true")
	s = &stopTB{TB: t}
	s.start()
	if s.skipped != "" || !strings.Contains(s.failed, "apt-get install -y --no-install-recommends chromium") {
		t.Errorf("under CI: skipped %q, failed %q", s.skipped, s.failed)
	}
}
