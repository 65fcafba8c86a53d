package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"strconv"

	"golang.org/x/sync/errgroup"

	"github.com/paygate/paygate/chain/devchain"
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

	chainPort := 8545
	if v := os.Getenv("DEVCHAIN_PORT"); v != "" {
		if chainPort, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("DEVCHAIN_PORT: %w", err)
		}
	}
	dc, err := devchain.Start(ctx, devchain.Config{Port: chainPort})
	if err != nil {
		return fmt.Errorf("dev chain: %w", err)
	}
	defer func() { _ = dc.Close() }()
	devchain.DevNetworks(dc, a.networks)

	c, err := a.dialTemporal(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	srv, err := a.apiWithCheckout(c)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, `
paygate is running (embedded profile, state in %s)
  API              http://%s/api
  Temporal Web UI  %s
  Dev chain RPC    %s (chain id %d, test USDC %s)
  Customer wallet  %s (funded with ETH and test USDC)
  Pay a session    paygate dev pay SESSION_ID
Press Ctrl-C to stop.

`, a.cfg.DataDir, a.cfg.Addr, ts.UIURL(), dc.RPCURL(), dc.ChainID(), dc.USDC().Hex(), dc.Customer().Hex())
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.runWorkers(gctx, c) })
	g.Go(func() error { return serveHTTP(gctx, a.log, a.cfg.Addr, srv.Handler()) })
	return g.Wait()
}

// runDevPay pays a checkout session as a customer would, from the dev
// chain's funded customer wallet (devchain.PaySession). UNITS pays another
// amount in USDC base units, e.g. to watch a short payment fail.
func runDevPay(ctx context.Context, args []string) error {
	if len(args) < 1 || len(args) > 2 {
		return usageError("dev pay needs SESSION_ID [UNITS]")
	}
	base := os.Getenv("PAYGATE_URL")
	if base == "" {
		base = "http://127.0.0.1:8080"
	}
	rpc := os.Getenv("DEVCHAIN_RPC_URL")
	if rpc == "" {
		rpc = "http://127.0.0.1:8545"
	}
	var units *big.Int
	if len(args) == 2 {
		v, ok := new(big.Int).SetString(args[1], 10)
		if !ok || v.Sign() <= 0 {
			return usageError("UNITS must be a positive integer (USDC base units, 6 decimals)")
		}
		units = v
	}
	p, err := devchain.PaySession(ctx, base, rpc, devchain.CustomerKey(), args[0], units)
	if err != nil {
		return err
	}
	fmt.Printf("paid %s USDC units to %s on %s\ntx %s submitted; watch it: curl %s/api/checkout/session/%s\n",
		p.Units, p.To, p.Network, p.TxHash, base, p.SessionID)
	return nil
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
