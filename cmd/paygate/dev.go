package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/ethereum/go-ethereum/common"
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
		Namespace: a.cfg.Temporal.Namespace, SearchAttributes: temporaldev.PaygateSearchAttributes(), Log: os.Stderr})
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
	svc, err := a.checkoutService(c)
	if err != nil {
		return err
	}
	srv, err := a.apiServer(svc)
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

// runDevPay pays a checkout session as a customer would: it reads what the
// session expects, signs and broadcasts the USDC transfer from the dev
// chain's customer wallet, then submits the hash. UNITS pays another amount
// (in USDC base units), e.g. to watch a short payment fail.
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
	var poll struct {
		Data struct {
			Session struct {
				ID, Network, Status, MerchantWalletAddress, TokenAddress, AmountUnits string
			} `json:"session"`
		} `json:"data"`
	}
	if err := getJSON(ctx, base+"/api/checkout/session/"+args[0], &poll); err != nil {
		return err
	}
	s := poll.Data.Session
	units, ok := new(big.Int).SetString(s.AmountUnits, 10)
	if len(args) == 2 {
		units, ok = new(big.Int).SetString(args[1], 10)
	}
	if !ok || !common.IsHexAddress(s.TokenAddress) || !common.IsHexAddress(s.MerchantWalletAddress) {
		return fmt.Errorf("session %s cannot be paid on the dev chain (network %s)", s.ID, s.Network)
	}
	hash, err := devchain.PayUSDC(ctx, rpc, devchain.CustomerKey(), common.HexToAddress(s.TokenAddress), common.HexToAddress(s.MerchantWalletAddress), units)
	if err != nil {
		return fmt.Errorf("broadcast: %w", err)
	}
	fmt.Printf("broadcast %s units of USDC to %s: %s\n", units, s.MerchantWalletAddress, hash)
	body, _ := json.Marshal(map[string]string{"sessionId": s.ID, "txHash": hash})
	var out map[string]any
	if err := postJSON(ctx, base+"/api/checkout/submit", body, &out); err != nil {
		return err
	}
	fmt.Printf("submitted: %v\nwatch it: curl %s/api/checkout/session/%s\n", out["data"], base, s.ID)
	return nil
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

func getJSON(ctx context.Context, url string, out any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	return doJSON(req, out)
}

func postJSON(ctx context.Context, url string, body []byte, out any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return doJSON(req, out)
}

func doJSON(req *http.Request, out any) error {
	res, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL, res.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}
