package e2e

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/chain"
	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/e2e/browser"
	"github.com/paygate/paygate/models"
)

// TestDashboardContractWalletProofInBrowser: a merchant whose receiving
// wallet is a smart contract wallet (EIP-1271; a Safe's stand-in deployed on
// a dev chain) proves it on the settings page in Chromium: the signature
// its owner gave, pasted without naming a network, is refused beside the
// wallet with what to do; pasted again with "a contract wallet on Base
// Sepolia" chosen, the API asks the wallet on the dev chain and the page
// says where the proof holds. Screenshot dash-wallet-proven-contract.
func TestDashboardContractWalletProofInBrowser(t *testing.T) {
	needBrowser(t)
	ctx := context.Background()
	dev, err := devchain.Start(ctx, devchain.Config{Port: devchain.AnyPort, BlockInterval: 50 * time.Millisecond, Network: "base_sepolia"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	owner, _ := crypto.GenerateKey()
	wallet, err := dev.DeploySmartWallet(ctx, crypto.PubkeyToAddress(owner.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	reg := chain.DefaultRegistry()
	// Both testnets are the one dev chain here: the wallet is deployed on
	// each (as a Safe deployed on two chains at one address).
	devchain.DevNetwork(dev, "base_sepolia", reg)
	devchain.DevNetwork(dev, "eth_sepolia", reg)
	st, hs := pagesServerMailing(t, nil, func(d *api.Deps) { d.Networks = reg })

	b := browser.Start(t, browser.Timeout(2*time.Minute), browser.ActionTimeout(30*time.Second))
	tab := b.NewTab(browser.Desktop)
	signUpInBrowser(tab, hs.URL, "Treasury Works", "safe@proof.example", "correct horse battery staple")
	tab.Navigate(hs.URL + "/dashboard/test/settings")
	tab.SetValue("#evm", wallet.Hex())
	tab.Click("#settings-form button[type=submit]")
	tab.WaitText(".notice", "Settings saved")
	// newLink submits a link taking both EVM networks, to the default
	// wallet. One made before any proof takes them both.
	newLink := func() {
		tab.Navigate(hs.URL + "/dashboard/test/links")
		tab.SetValue("#name", "Beans")
		tab.SetValue("#amount", "12.00")
		tab.Eval(`document.querySelectorAll("input[name=networks]").forEach(c => { c.checked = c.value !== "solana_devnet" }); true`, nil)
		tab.Click("#link-form button[type=submit]")
	}
	newLink()
	tab.WaitText(".notice", "Payment link created")
	tab.Navigate(hs.URL + "/dashboard/test/settings")
	// paste signs the message the page shows with the owner's key, pastes
	// it as signed on network ("" for the wallet's own key) and submits.
	paste := func(network string) {
		t.Helper()
		var message string
		tab.Eval(`document.querySelector("#proof-evm form.proof-form").dataset.message`, &message)
		sig, err := crypto.Sign(accounts.TextHash([]byte(message)), owner)
		if err != nil {
			t.Fatal(err)
		}
		sig[64] += 27
		tab.SetValue("#signature-proof-evm", "0x"+hex.EncodeToString(sig))
		tab.SetValue("#network-proof-evm", network)
		tab.Click("#proof-evm form.proof-form button[type=submit]")
	}

	// Pasted as a key's signature: refused, with what to do.
	paste("")
	tab.WaitText("#proof-evm", "name the network it is deployed on")
	m, err := st.MerchantByEmail(ctx, "safe@proof.example")
	if err != nil {
		t.Fatal(err)
	}
	if proofs, err := st.WalletProofs(ctx, m.ID); err != nil || len(proofs) != 0 {
		t.Fatalf("proofs after the refusal: %v %v", proofs, err)
	}

	// As the contract wallet's, on Base Sepolia (the message issued anew
	// with the refusal is signed again).
	paste("base_sepolia")
	tab.WaitText(".notice", "Contract wallet proven on that network")
	// The link made before names it on Ethereum Sepolia, where it is not
	// proven: the page says that network takes no payment now.
	if got := pageText(tab, "#proof-evm"); !strings.Contains(got, "as a contract wallet on Base Sepolia (test) only") || strings.Contains(got, "Not proven") ||
		!strings.Contains(got, "also name this wallet on Ethereum Sepolia (test), where it is not proven") {
		t.Fatalf("the contract wallet after its proof: %q", got)
	}
	if proofs, err := st.WalletProofs(ctx, m.ID); err != nil || len(proofs) != 1 || proofs[0].Network != "base_sepolia" {
		t.Fatalf("proofs: %+v %v", proofs, err)
	}

	// A link taking Ethereum Sepolia too, where the contract wallet is not
	// proven yet, is refused: the address there may be no wallet of the
	// merchant's.
	newLink()
	tab.WaitVisible("#new-link .error")
	if got := pageText(tab, "#new-link .error"); !strings.Contains(got, "is a contract wallet proven on base_sepolia only: on eth_sepolia") {
		t.Fatalf("a link on eth_sepolia: %q", got)
	}
	if links, err := st.PaymentLinks(ctx, models.Scope{MerchantID: m.ID, Mode: models.ModeTest}, ""); err != nil || len(links) != 1 {
		t.Fatalf("links stored: %d %v", len(links), err)
	}
	tab.Navigate(hs.URL + "/dashboard/test/settings")

	// Deployed on Ethereum Sepolia too: proven there from the same page.
	paste("eth_sepolia")
	// (The notice reads as the first proof's: wait for the page's own line.)
	tab.WaitText("#proof-evm", "Ethereum Sepolia (test) only")
	if got := pageText(tab, "#proof-evm"); !strings.Contains(got, "on Base Sepolia (test), Ethereum Sepolia (test) only") || strings.Contains(got, "where it is not proven") {
		t.Fatalf("proven on both networks: %q", got)
	}
	tab.Screenshot("dash-wallet-proven-contract")
	// Now the link takes both networks.
	newLink()
	tab.WaitText(".notice", "Payment link created")
	if links, err := st.PaymentLinks(ctx, models.Scope{MerchantID: m.ID, Mode: models.ModeTest}, ""); err != nil || len(links) != 2 ||
		strings.Join(links[0].Networks, ",") != "base_sepolia,eth_sepolia" {
		t.Fatalf("links stored: %+v %v", links, err)
	}
	// The errors the page reported are the refused forms' 400s.
	if errs := tab.ConsoleErrors(); len(errs) != 2 || !strings.Contains(errs[0].Text, "400") || !strings.Contains(errs[1].Text, "400") {
		t.Fatalf("console errors: %v", errs)
	}

	// Another merchant naming the address is told where the proofs stand.
	s := &stack{t: t, http: hs}
	other := s.call("POST", "/api/auth/signup", "", map[string]any{"email": "other@safe.example",
		"password": "correct horse battery staple", "businessName": "Other"}, 201)
	s.call("PATCH", "/api/merchant", other["sessionToken"].(string), map[string]any{"wallets": map[string]any{"evm": wallet.Hex()}}, 200)
	otherTab := b.NewTab(browser.Desktop)
	signInInBrowser(otherTab, hs.URL, "/dashboard/test/settings", "other@safe.example", "correct horse battery staple", "#proofs")
	if got := pageText(otherTab, "#proof-evm"); !strings.Contains(got, "proved this wallet as a contract wallet on Base Sepolia (test), Ethereum Sepolia (test)") {
		t.Fatalf("the other merchant's settings: %q", got)
	}

	// No longer the default: still listed, and still offered the next
	// network with its own message to sign.
	tab.Navigate(hs.URL + "/dashboard/test/settings")
	tab.SetValue("#evm", merchantWallet)
	tab.Click("#settings-form button[type=submit]")
	tab.WaitText(".notice", "Settings saved")
	if got := pageText(tab, "#proof-"+wallet.Hex()); !strings.Contains(got, "Also proven (evm)") ||
		!strings.Contains(got, "Deployed on another network too?") || !strings.Contains(got, "Wallet: "+wallet.Hex()) {
		t.Fatalf("the former default: %q", got)
	}
}
