package main

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/gagliardetto/solana-go"
	"golang.org/x/sync/errgroup"

	"github.com/paygate/paygate/chain/devchain"
	"github.com/paygate/paygate/chain/soldev"
	"github.com/paygate/paygate/refund"
	"github.com/paygate/paygate/temporaldev"
)

// runDev runs the embedded profile from one command: the Temporal dev
// server (Web UI on :8233, state in .data/), the dev chain, the API and the
// workers. Ctrl-C stops everything; a second run finds the earlier sessions
// and workflows still there.
func runDev(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "pay" {
		return runDevPay(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "refund" {
		return runDevRefund(ctx, args[1:])
	}
	if len(args) > 0 {
		return usageError("unknown dev command " + args[0])
	}
	a, err := newApp()
	if err != nil {
		return err
	}
	defer a.close()
	if !a.cfg.Embedded() {
		return errors.New("PAYGATE_PROFILE: `paygate dev` runs the embedded profile only; use `paygate api` and `paygate worker`")
	}
	if err := a.store.Migrate(); err != nil {
		return err
	}
	host, portStr, _ := net.SplitHostPort(a.cfg.Temporal.Address)
	port, _ := strconv.Atoi(portStr)
	uiPort := temporaldev.DefaultUIPort
	if v := os.Getenv("TEMPORAL_UI_PORT"); v != "" {
		if uiPort, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("TEMPORAL_UI_PORT: %w", err)
		}
	}
	a.log.Info("starting the Temporal dev server", "address", a.cfg.Temporal.Address)
	ts, err := temporaldev.Start(ctx, temporaldev.Options{DataDir: a.cfg.DataDir, Host: host, Port: port, UIPort: uiPort,
		Namespace: a.cfg.Temporal.Namespace, SearchAttributes: temporaldev.PaygateSearchAttributes(), Log: untilDone(ctx, os.Stderr)})
	if err != nil {
		return fmt.Errorf("temporal dev server: %w (build it with `make temporal-cli`)", err)
	}
	defer func() { _ = ts.Stop() }()

	ports, err := devchain.PortsFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	chains, err := devchain.StartNetworks(ctx, devchain.NetworksConfig{Ports: ports})
	if err != nil {
		return fmt.Errorf("dev chain: %w", err)
	}
	defer func() { _ = chains.Close() }()
	devchain.DevNetworks(chains, a.networks)
	// The dev chains' funded relayer broadcasts customers' signed
	// authorizations (RELAYER_KEY_<NETWORK> overrides it).
	a.devRelayers = map[string]*ecdsa.PrivateKey{}
	for _, c := range chains.All() {
		a.devRelayers[c.Network()] = devchain.RelayerKey()
	}

	// The Solana dev chain is optional: without Node.js or its npm packages
	// solana_devnet keeps its configured RPC and the EVM side runs alone.
	solBanner := ""
	if sc, err := soldev.StartDev(ctx, soldev.Config{Log: untilDone(ctx, os.Stderr)}); err != nil {
		a.log.Warn("running without the Solana dev chain", "err", err.Error())
	} else {
		defer func() { _ = sc.Close() }()
		soldev.DevNetwork(sc, a.networks)
		solBanner = fmt.Sprintf("  Solana dev RPC   %s (solana_devnet, test USDC mint %s)\n  Solana customer  %s (funded with SOL and test USDC)\n"+
			"  Solana merchant  %s (set it as your Solana wallet; it pays refunds: paygate dev refund)\n",
			sc.RPCURL(), soldev.USDCMintAddress, soldev.CustomerAddress, soldev.MerchantAddress)
	}

	c, err := a.dialTemporal(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	srv, err := a.apiWithCheckout(c)
	if err != nil {
		return err
	}
	if err := a.serveOpsOn(ctx, c, a.cfg.MetricsAddr, "PAYGATE_METRICS_ADDR"); err != nil {
		return err
	}
	metricsURL := "off (PAYGATE_METRICS_ADDR)"
	if a.cfg.MetricsAddr != "" {
		metricsURL = "http://" + a.cfg.MetricsAddr + "/metrics"
	}
	fmt.Fprintf(os.Stderr, `
paygate is running (embedded profile, state in %s)
  API              http://%s/api
  Dashboard        http://%s/dashboard
  Metrics          %s
  Temporal Web UI  %s
%s  Pay a session    paygate dev pay SESSION_ID   (paygate help: --plain, --from, --via router, --relay, ...)
  Pay a refund     PAYGATE_API_KEY=svc_test_sk_... paygate dev refund REFUND_ID   (the merchant's EVM wallet must be
                   the dev merchant's %s: PATCH /api/merchant before the payment)
%sPress Ctrl-C to stop.

`, a.cfg.DataDir, a.cfg.Addr, a.cfg.Addr, metricsURL, ts.UIURL(), devBanner(chains), devchain.MerchantAddress().Hex(), solBanner)
	g, gctx := errgroup.WithContext(ctx)
	a.followSessionChanges(gctx)
	g.Go(func() error { return a.runWorkers(gctx, c) })
	g.Go(func() error { return serveHTTP(gctx, a.log, a.cfg.Addr, srv.Handler(), srv.Drain) })
	return g.Wait()
}

// devBanner lists the dev chains and the funded dev accounts (their keys are
// public, fixed in chain/devchain).
func devBanner(chains *devchain.Chains) string {
	var b strings.Builder
	for _, c := range chains.All() {
		fmt.Fprintf(&b, "  Dev chain        %-13s %s (chain id %d)\n", c.Network(), c.RPCURL(), c.ChainID())
	}
	fmt.Fprintf(&b, "  Test USDC        %s, Router %s (on every dev chain)\n", devchain.USDCAddress.Hex(), devchain.RouterAddress.Hex())
	fmt.Fprintf(&b, "  Dev accounts     (funded on every dev chain; the keys are public, never use them elsewhere)\n")
	for _, a := range devchain.DevAccounts() {
		usdc := "ETH only"
		if a.USDCUnits != nil {
			usdc = "ETH + " + new(big.Int).Div(a.USDCUnits, big.NewInt(1_000_000)).String() + " USDC"
		}
		fmt.Fprintf(&b, "    %-9s %s  %s: %s\n              key %s\n", a.Name, a.Address().Hex(), usdc, a.Role, a.KeyHex)
	}
	return b.String()
}

// devPayUsage is the help of `paygate dev pay`.
const devPayUsage = `usage: paygate dev pay [flags] SESSION_ID [UNITS]
Pays a checkout session on its network's dev chain (base_sepolia: DEVCHAIN_PORT,
default 8545; eth_sepolia: DEVCHAIN_PORT_ETH_SEPOLIA, default 8546; DEVCHAIN_RPC_URL
overrides both) and submits the hash (PAYGATE_URL, default http://127.0.0.1:8080).
By default the payer signs an EIP-3009 TransferWithAuthorization whose nonce is the
session's paymentReference and broadcasts transferWithAuthorization itself.
UNITS pays another amount in USDC base units (6 decimals), e.g. to watch a short
payment fail. Flags go before or after the arguments:
  --plain              a plain ERC-20 transfer, no authorization (nothing binds it)
  --from WHO           payer: customer (default), stranger, exchange, relayer or 0x<private key hex>
  --via router         pay through the dev chain's Router (the merchant's Transfer comes from it)
  --relay              POST the signed authorization to /api/checkout/session/{id}/authorization
                       for the API's relayer to broadcast, and print the answer
  --no-submit          broadcast only; print the hash
  --submit-to SESSION  submit the hash to another session (the attack)
  --speed-up           a wallet's speed-up: submit the hash, then broadcast in its place the
                       same call at twice the tip (the submitted hash is never mined)
`

// runDevPay pays a checkout session as a customer would, from a funded dev
// account (devchain.Pay), or a solana_devnet session on the Solana dev chain
// the Solana Pay way (soldev.PaySession: its reference in the transfer).
func runDevPay(ctx context.Context, args []string) error {
	opts, err := parseDevPay(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Print(devPayUsage)
		return nil
	}
	if err != nil {
		return err
	}
	base := os.Getenv("PAYGATE_URL")
	if base == "" {
		base = "http://127.0.0.1:8080"
	}
	opts.APIBase, opts.Getenv = base, os.Getenv
	solRPC := soldevRPCURL()
	payer := soldev.CustomerKey()
	if opts.Key != nil && crypto.PubkeyToAddress(opts.Key.PublicKey) == crypto.PubkeyToAddress(devchain.StrangerKey().PublicKey) {
		payer = soldev.StrangerKey()
	}
	sp, err := soldev.PaySession(ctx, base, solRPC, payer, opts.SessionID, opts.Units,
		soldev.PayOptions{NoReference: opts.Plain, NoSubmit: opts.NoSubmit})
	if !errors.Is(err, soldev.ErrNotSolanaSession) {
		if err != nil {
			return err
		}
		ref := sp.Reference
		if ref == "" {
			ref = "none"
		}
		fmt.Printf("paid %s USDC units to %s on %s (reference %s)\ntx %s; watch it: curl %s/api/checkout/session/%s\n",
			sp.Units, sp.Merchant, sp.Network, ref, sp.Signature, base, sp.SessionID)
		return nil
	}
	p, err := devchain.Pay(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Printf("paid %s USDC units from %s to %s on %s (%s), method %s\n", p.Units, p.From, p.To, p.Network, p.RPCURL, p.Method)
	if p.Authorization != nil {
		fmt.Printf("authorization nonce %s, validBefore %s, signature %s\n", hexutil.Encode(p.Authorization.Nonce[:]), p.Authorization.ValidBefore, hexutil.Encode(p.Signature))
	}
	switch {
	case p.RelayAnswer != nil:
		fmt.Printf("relayed; the API answered: %s\n", p.RelayAnswer)
	case p.Replaced != "":
		fmt.Printf("tx %s submitted to %s, then replaced by tx %s (sped up); watch it: curl %s/api/checkout/session/%s\n",
			p.Replaced, p.SubmittedTo, p.TxHash, base, p.SubmittedTo)
	case p.SubmittedTo == "":
		fmt.Printf("tx %s (not submitted)\n", p.TxHash)
	default:
		fmt.Printf("tx %s submitted to %s; watch it: curl %s/api/checkout/session/%s\n", p.TxHash, p.SubmittedTo, base, p.SubmittedTo)
	}
	return nil
}

// parseDevPay reads `dev pay` flags and arguments, flags anywhere.
func parseDevPay(args []string) (devchain.PayOptions, error) {
	var opts devchain.PayOptions
	fs := flag.NewFlagSet("dev pay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.BoolVar(&opts.Plain, "plain", false, "")
	fs.BoolVar(&opts.Relay, "relay", false, "")
	fs.BoolVar(&opts.NoSubmit, "no-submit", false, "")
	fs.StringVar(&opts.SubmitTo, "submit-to", "", "")
	fs.BoolVar(&opts.SpeedUp, "speed-up", false, "")
	from := fs.String("from", devchain.AccountCustomer, "")
	via := fs.String("via", "", "")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return opts, err
			}
			return opts, usageError("dev pay: " + err.Error())
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if len(pos) < 1 || len(pos) > 2 {
		return opts, usageError("dev pay needs SESSION_ID [UNITS]")
	}
	opts.SessionID = pos[0]
	if len(pos) == 2 {
		v, ok := new(big.Int).SetString(pos[1], 10)
		if !ok || v.Sign() <= 0 {
			return opts, usageError("UNITS must be a positive integer (USDC base units, 6 decimals)")
		}
		opts.Units = v
	}
	switch *via {
	case "":
	case "router":
		opts.ViaRouter = true
	default:
		return opts, usageError("--via takes router")
	}
	if acct, ok := devchain.LookupAccount(*from); ok {
		opts.Key = acct.Key()
	} else if strings.HasPrefix(*from, "0x") {
		key, err := crypto.HexToECDSA(strings.TrimPrefix(*from, "0x"))
		if err != nil {
			return opts, usageError("--from 0x…: not a private key: " + err.Error())
		}
		opts.Key = key
	} else {
		return opts, usageError("--from takes customer, stranger, exchange, relayer or 0x<private key hex>")
	}
	return opts, nil
}

// devRefundUsage is the help of `paygate dev refund`.
const devRefundUsage = `usage: paygate dev refund [flags] REFUND_ID
Pays a refund on its network's dev chain as the merchant's wallet would: reads the refund
through the API (PAYGATE_URL, default http://127.0.0.1:8080) with the merchant's API key,
sends a plain USDC transfer of its amount (amountUnits) from the dev merchant wallet
(devchain account "merchant") to its destinationWallet, and submits the hash
(POST /api/refunds/{id}/submit). The refund's workflow verifies the transfer and the
refund succeeds (payment.refunded). The refund must be paid from the wallet that received
the payment: to try refunds on make run, set the dev merchant's address as the merchant's
EVM wallet (PATCH /api/merchant {"wallets":{"evm":"<address>"}}) before taking a payment.
A solana_devnet refund is paid on the Solana dev chain (SOLDEV_RPC_URL, default
http://127.0.0.1:8899) from the Solana dev merchant wallet ` + soldev.MerchantAddress + `
(set it as the merchant's Solana wallet: {"wallets":{"solana":"<address>"}}); the dev
chain's mint authority pays its fee while it holds no SOL.
Flags go before or after the argument:
  --api-key KEY        the merchant's API key (default: $PAYGATE_API_KEY)
  --from WHO           payer: merchant (default), customer, stranger, exchange or 0x<private key hex>
                       (another wallet than the refund's sourceWallet: the refund fails, wrong sender;
                       on Solana: merchant, customer or stranger)
  --units N            send another amount in USDC base units (a short one fails the refund)
  --no-submit          broadcast only; print the hash (the worker's refund watcher finds the
                       transfer on chain and the refund succeeds all the same, as for a merchant
                       paying from a wallet app); a refund that expired (REFUND_EXPIRED) can be
                       paid late, with or without its hash submitted, and is recorded
`

// runDevRefund pays a refund from the dev chain's merchant wallet
// (devchain.PayRefund), or a Solana refund from the Solana dev chain's
// (soldev.PayRefund).
func runDevRefund(ctx context.Context, args []string) error {
	opts, err := parseDevRefund(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Print(devRefundUsage)
		return nil
	}
	if err != nil {
		return err
	}
	base := os.Getenv("PAYGATE_URL")
	if base == "" {
		base = "http://127.0.0.1:8080"
	}
	opts.APIBase, opts.Getenv = base, os.Getenv
	solRPC := soldevRPCURL()
	onSolana, err := soldev.IsSolanaRefund(ctx, base, opts.APIKey, opts.RefundID)
	if err != nil {
		return err
	}
	if onSolana {
		key, ok := solanaDevKey(opts)
		if !ok {
			return usageError("a Solana refund's --from takes merchant, customer or stranger")
		}
		sp, err := soldev.PayRefund(ctx, soldev.RefundPayOptions{APIBase: base, APIKey: opts.APIKey, RefundID: opts.RefundID,
			RPCURL: solRPC, Key: key, AnyWallet: opts.AnyWallet, Units: opts.Units, NoSubmit: opts.NoSubmit})
		if err != nil {
			return err
		}
		fee := ""
		if sp.FeeSponsored {
			fee = " (its fee paid by the dev chain's mint authority: the wallet holds no SOL)"
		}
		fmt.Printf("paid %s USDC units from %s to %s on %s%s\n", sp.Units, sp.From, sp.To, sp.Network, fee)
		printRefundTx(base, sp.RefundID, sp.Signature, sp.Submitted, sp.Late, sp.Status)
		return nil
	}
	p, err := devchain.PayRefund(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Printf("paid %s USDC units from %s to %s on %s (%s)\n", p.Units, p.From, p.To, p.Network, p.RPCURL)
	printRefundTx(base, p.RefundID, p.TxHash, p.Submitted, p.Late, p.Status)
	return nil
}

// printRefundTx says what became of a refund's transfer (late: paid after
// the refund expired).
func printRefundTx(base, refundID, hash string, submitted, late bool, status string) {
	switch {
	case late && !submitted:
		fmt.Printf("tx %s (the refund had expired: the worker finds the transfer on chain and records it, about %s after it reads it); watch it: curl -H 'Authorization: Bearer $PAYGATE_API_KEY' %s/api/refunds/%s\n",
			hash, refund.DefaultLateOfferDelay, base, refundID)
		return
	case !submitted:
		fmt.Printf("tx %s (not submitted: the worker finds it on chain once confirmed); watch it: curl -H 'Authorization: Bearer $PAYGATE_API_KEY' %s/api/refunds/%s\n",
			hash, base, refundID)
		return
	}
	fmt.Printf("tx %s submitted; refund %s is %s; watch it: curl -H 'Authorization: Bearer $PAYGATE_API_KEY' %s/api/refunds/%s\n",
		hash, refundID, status, base, refundID)
}

// soldevRPCURL is the Solana dev chain's RPC: $SOLDEV_RPC_URL, or the
// port `paygate dev` serves it on.
func soldevRPCURL() string {
	if u := os.Getenv("SOLDEV_RPC_URL"); u != "" {
		return u
	}
	return fmt.Sprintf("http://%s:%d", soldev.DefaultHost, soldev.DefaultPort)
}

// solanaDevKey is the Solana dev wallet named as the EVM dev account
// opts.Key is (--from merchant, customer or stranger); false for any other.
func solanaDevKey(opts devchain.RefundPayOptions) (solana.PrivateKey, bool) {
	if opts.Key == nil {
		return soldev.MerchantKey(), true
	}
	from := crypto.PubkeyToAddress(opts.Key.PublicKey)
	for name, key := range map[string]func() solana.PrivateKey{
		devchain.AccountMerchant: soldev.MerchantKey, devchain.AccountCustomer: soldev.CustomerKey, devchain.AccountStranger: soldev.StrangerKey,
	} {
		if acct, ok := devchain.LookupAccount(name); ok && acct.Address() == from {
			return key(), true
		}
	}
	return nil, false
}

// parseDevRefund reads `dev refund` flags and its argument, flags anywhere.
func parseDevRefund(args []string, getenv func(string) string) (devchain.RefundPayOptions, error) {
	var opts devchain.RefundPayOptions
	fs := flag.NewFlagSet("dev refund", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&opts.APIKey, "api-key", getenv("PAYGATE_API_KEY"), "")
	fs.BoolVar(&opts.NoSubmit, "no-submit", false, "")
	from := fs.String("from", devchain.AccountMerchant, "")
	units := fs.String("units", "", "")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return opts, err
			}
			return opts, usageError("dev refund: " + err.Error())
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if len(pos) != 1 {
		return opts, usageError("dev refund needs REFUND_ID")
	}
	opts.RefundID = pos[0]
	if opts.APIKey == "" {
		return opts, usageError("dev refund needs the merchant's API key: --api-key or PAYGATE_API_KEY")
	}
	if *units != "" {
		v, ok := new(big.Int).SetString(*units, 10)
		if !ok || v.Sign() <= 0 {
			return opts, usageError("--units must be a positive integer (USDC base units, 6 decimals)")
		}
		opts.Units = v
	}
	if acct, ok := devchain.LookupAccount(*from); ok {
		opts.Key = acct.Key()
	} else if strings.HasPrefix(*from, "0x") {
		key, err := crypto.HexToECDSA(strings.TrimPrefix(*from, "0x"))
		if err != nil {
			return opts, usageError("--from 0x…: not a private key: " + err.Error())
		}
		opts.Key = key
	} else {
		return opts, usageError("--from takes merchant, customer, stranger, exchange or 0x<private key hex>")
	}
	// Another wallet than the dev merchant's is the caller's explicit choice.
	opts.AnyWallet = *from != devchain.AccountMerchant
	return opts, nil
}

// untilDone passes writes to w until ctx ends, then drops them: the dev
// server's complaints while everything shuts down after Ctrl-C are noise.
func untilDone(ctx context.Context, w io.Writer) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		if ctx.Err() != nil {
			return len(p), nil
		}
		return w.Write(p)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
