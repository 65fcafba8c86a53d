package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/gagliardetto/solana-go"

	"github.com/paygate/paygate/e2e/browser"
)

// TestDashboardWalletProofInBrowser: on the settings page a merchant proves
// its receiving wallets in Chromium. The EVM wallet is signed by the
// browser wallet (EIP-6963, personal_sign); declining it says so and
// records nothing. For the Solana wallet a wrong pasted signature is
// refused beside it, then the browser's Solana wallet signs (signMessage).
// Once both are proven, the page says so; a proof withdrawn, the wallet is
// proven again with a signature made elsewhere and pasted. Another merchant
// that named the EVM wallet first is told on its settings page that another
// account proved it, and cannot name either (screenshot
// dash-wallet-proven-elsewhere). A proven wallet that is no longer a default stays
// listed and is withdrawn from the page (then it is free).
// Screenshots dash-wallet-proof and dash-wallet-proven.
func TestDashboardWalletProofInBrowser(t *testing.T) {
	needBrowser(t)
	ctx := context.Background()
	st, hs := pagesServer(t)

	evmKey, _ := crypto.GenerateKey()
	w := browser.NewWallet(browser.WalletConfig{Key: evmKey, RPC: map[uint64]string{84532: "http://127.0.0.1:9"}, NoWindowEthereum: true,
		Reject: []string{"personal_sign"}})
	sol := solana.NewWallet().PrivateKey
	b := browser.Start(t, browser.Timeout(3*time.Minute), browser.ActionTimeout(30*time.Second))
	tab := b.NewTab(browser.Desktop, browser.WithWallet(w), browser.WithScript(injectedSolanaWallet(t, sol)))
	// Another merchant named the EVM wallet first (a typo, or a stranger).
	s := &stack{t: t, http: hs}
	other := s.call("POST", "/api/auth/signup", "", map[string]any{"email": "other@proof.example",
		"password": "correct horse battery staple", "businessName": "Other"}, 201)
	session, otherKey := other["sessionToken"].(string), other["testKey"].(map[string]any)["fullKey"].(string)
	s.call("PATCH", "/api/merchant", session, map[string]any{"wallets": map[string]any{"evm": w.Address().Hex()}}, 200)

	signUpInBrowser(tab, hs.URL, "Blue Bottle Roasters", "owner@proof.example", "correct horse battery staple")
	tab.Navigate(hs.URL + "/dashboard/test/settings")
	tab.SetValue("#evm", strings.ToLower(w.Address().Hex()))
	tab.SetValue("#solana", sol.PublicKey().String())
	tab.Click("#settings-form button[type=submit]")
	tab.WaitText(".notice", "Settings saved")
	for _, sel := range []string{"#proof-evm", "#proof-solana"} {
		if got := pageText(tab, sel); !strings.Contains(got, "Not proven yet") || !strings.Contains(got, "paygate wallet proof") {
			t.Fatalf("%s before: %q", sel, got)
		}
	}
	if got := pageText(tab, "#proof-evm"); !strings.Contains(got, w.Address().Hex()) {
		t.Fatalf("the EVM wallet is shown in its checksummed form: %q", got)
	}
	tab.Screenshot("dash-wallet-proof")

	// Declined in the wallet: said, nothing recorded.
	tab.Click("#proof-evm [data-sign]")
	tab.WaitText("#proof-evm .sign-status", "You declined to sign")
	owner, err := st.MerchantByEmail(ctx, "owner@proof.example")
	if err != nil {
		t.Fatal(err)
	}
	if proofs, err := st.WalletProofs(ctx, owner.ID); err != nil || len(proofs) != 0 {
		t.Fatalf("proofs after the refusal: %v %v", proofs, err)
	}
	// Signed in the browser wallet.
	w.Accept("personal_sign")
	tab.Click("#proof-evm [data-sign]")
	tab.WaitText(".notice", "Wallet proven")
	if got := pageText(tab, "#proof-evm"); !strings.Contains(got, "Proven") || strings.Contains(got, "Not proven") {
		t.Fatalf("the EVM wallet after its proof: %q", got)
	}
	if reqs := w.RequestsFor("personal_sign"); len(reqs) != 2 {
		t.Fatalf("personal_sign asked %d times, want 2", len(reqs))
	}
	tab.AssertNoConsoleErrors()

	// The Solana wallet, signed elsewhere: a wrong signature first.
	var message string
	tab.Eval(`document.querySelector("#proof-solana form").dataset.message`, &message)
	if !strings.Contains(message, "Wallet: "+sol.PublicKey().String()) {
		t.Fatalf("the Solana message: %q", message)
	}
	wrong, err := solana.NewWallet().PrivateKey.Sign([]byte(message))
	if err != nil {
		t.Fatal(err)
	}
	tab.SetValue("#signature-proof-solana", wrong.String())
	tab.Click("#proof-solana form button[type=submit]")
	tab.WaitText("#proof-solana", "not the wallet's over this message")
	// Then with the browser's Solana wallet (signMessage).
	tab.Click("#proof-solana [data-sign]")
	tab.WaitText(".notice", "Wallet proven")
	if got := pageText(tab, "#proofs"); strings.Count(got, "Proven") != 2 || strings.Contains(got, "Not proven") {
		t.Fatalf("both proven: %q", got)
	}
	var signed int
	tab.Eval(`Number(sessionStorage.getItem("solanaSigned"))`, &signed)
	if signed != 1 {
		t.Fatalf("the Solana wallet signed %d messages, want 1", signed)
	}
	tab.Screenshot("dash-wallet-proven")
	// The one error the page reported since is the refused form's 400.
	if errs := tab.ConsoleErrors(); len(errs) != 1 || !strings.Contains(errs[0].Text, "400") || !strings.Contains(errs[0].URL+errs[0].Text, "wallet-proof") {
		t.Fatalf("console errors: %v", errs)
	}

	// Withdrawn, then proven again with a signature made elsewhere and
	// pasted.
	tab.Click("#proof-solana form button[type=submit]")
	tab.WaitText(".notice", "Wallet proof withdrawn")
	if got := pageText(tab, "#proof-solana"); !strings.Contains(got, "Not proven yet") {
		t.Fatalf("the Solana wallet withdrawn: %q", got)
	}
	tab.Eval(`document.querySelector("#proof-solana form").dataset.message`, &message)
	sig, err := sol.Sign([]byte(message))
	if err != nil {
		t.Fatal(err)
	}
	tab.SetValue("#signature-proof-solana", sig.String())
	tab.Click("#proof-solana form button[type=submit]")
	tab.WaitText(".notice", "Wallet proven")
	if got := pageText(tab, "#proofs"); strings.Count(got, "Proven") != 2 {
		t.Fatalf("both proven again: %q", got)
	}

	// The other merchant, which named the EVM wallet first: its settings
	// page says another account proved it; it cannot name the Solana one,
	// nor make a link on its EVM default, nor name that again once moved.
	otherTab := b.NewTab(browser.Desktop)
	signInInBrowser(otherTab, hs.URL, "/dashboard/test/settings", "other@proof.example", "correct horse battery staple", "#proofs")
	if got := pageText(otherTab, "#proof-evm"); !strings.Contains(got, "Another merchant account proved this wallet") {
		t.Fatalf("the other merchant's settings: %q", got)
	}
	otherTab.Screenshot("dash-wallet-proven-elsewhere")
	otherTab.AssertNoConsoleErrors()
	s.call("PATCH", "/api/merchant", session, map[string]any{"wallets": map[string]any{"solana": sol.PublicKey().String()}}, 400)
	s.call("POST", "/api/payment-links", otherKey, map[string]any{"name": "T", "amount": 5, "network": "base_sepolia"}, 400)
	s.call("PATCH", "/api/merchant", session, map[string]any{"wallets": map[string]any{"evm": merchantWallet}}, 200)
	s.call("PATCH", "/api/merchant", session, map[string]any{"wallets": map[string]any{"evm": w.Address().Hex()}}, 400)

	// A proven wallet that is no longer a default is still listed, and
	// withdrawn from the page.
	tab.Navigate(hs.URL + "/dashboard/test/settings")
	tab.SetValue("#evm", merchantWallet)
	tab.Click("#settings-form button[type=submit]")
	tab.WaitText(".notice", "Settings saved")
	former := "#proof-" + w.Address().Hex()
	if got := pageText(tab, former); !strings.Contains(got, "Also proven (evm)") || !strings.Contains(got, "Proven") {
		t.Fatalf("the former default: %q", got)
	}
	tab.Click(former + " form button[type=submit]")
	tab.WaitText(".notice", "Wallet proof withdrawn")
	if n := len(tab.ConsoleErrors()); n != 1 {
		t.Fatalf("console errors after the withdrawal: %v", tab.ConsoleErrors())
	}
	s.call("PATCH", "/api/merchant", session, map[string]any{"wallets": map[string]any{"evm": w.Address().Hex()}}, 200)
}

// injectedSolanaWallet is a Solana wallet as a browser extension injects
// one (window.solana: connect, publicKey, signMessage), holding key and
// signing with the browser's own Ed25519 (WebCrypto); it counts its
// signatures in the tab's sessionStorage ("solanaSigned": the page moves on
// after each).
func injectedSolanaWallet(t *testing.T, key solana.PrivateKey) string {
	t.Helper()
	pkcs8, err := x509.MarshalPKCS8PrivateKey(ed25519.PrivateKey(key))
	if err != nil {
		t.Fatal(err)
	}
	return `(() => {
  const pkcs8 = Uint8Array.from(atob("` + base64.StdEncoding.EncodeToString(pkcs8) + `"), (c) => c.charCodeAt(0));
  const key = crypto.subtle.importKey("pkcs8", pkcs8, { name: "Ed25519" }, false, ["sign"]);
  const publicKey = { toString: () => "` + key.PublicKey().String() + `" };
  window.solana = {
    isPhantom: true,
    publicKey: null,
    connect() { this.publicKey = publicKey; return Promise.resolve({ publicKey }); },
    signMessage(bytes) {
      sessionStorage.setItem("solanaSigned", String(Number(sessionStorage.getItem("solanaSigned")) + 1));
      return key.then((k) => crypto.subtle.sign({ name: "Ed25519" }, k, bytes)).then((s) => ({ signature: new Uint8Array(s), publicKey }));
    },
  };
})();`
}
