package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/models/storetest"
	"github.com/paygate/paygate/money"
)

// The event stream sends the session's status at once, then each change,
// and ends after a terminal status; a missing session is a 404.
func TestCheckoutEventStream(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		m := h.signup()
		link := h.link(m.TestKey, nil)
		ctx := context.Background()
		cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: link, Network: "base_sepolia", WalletType: "evm",
			ExpectedAmount: money.FromCents(100), MerchantWalletAddress: evmA, TokenAddress: evmB, ExpiresAt: time.Now().Add(time.Hour)}
		if err := h.store.CreateCheckoutSession(ctx, cs); err != nil {
			t.Fatal(err)
		}
		expect(t, h.do("GET", "/api/checkout/session/"+models.NewID()+"/events", "", nil), 404, "NOT_FOUND")

		res, err := http.Get(h.http.URL + "/api/checkout/session/" + cs.ID + "/events")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("stream answered %d %s", res.StatusCode, res.Header.Get("Content-Type"))
		}
		events := make(chan map[string]any, 8)
		go func() {
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				if line := sc.Text(); strings.HasPrefix(line, "data: ") {
					var v map[string]any
					_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v)
					events <- v
				}
			}
			close(events)
		}()
		next := func() map[string]any {
			select {
			case e := <-events:
				return e
			case <-time.After(10 * time.Second):
				t.Fatal("no event within 10 s")
			}
			return nil
		}
		if e := next(); e["status"] != models.StatusCreated || e["terminal"] != false {
			t.Fatalf("first event %v", e)
		}
		if _, err := h.store.FinishSession(ctx, models.Outcome{SessionID: cs.ID, EntryID: models.NewID(), Status: models.StatusExpired,
			Source: "server", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if e := next(); e["status"] != models.StatusExpired || e["terminal"] != true {
			t.Fatalf("after expiry %v", e)
		}
		if _, open := <-events; open {
			t.Fatal("the stream goes on after a terminal status")
		}
	})
}

// TestStreamsEndOnShutdown: a real http.Server's Shutdown does not wait for
// an open status stream (a customer's checkout page is the normal case
// during a deploy): Drain, registered with RegisterOnShutdown, ends it, and
// Shutdown returns at once instead of at its deadline.
func TestStreamsEndOnShutdown(t *testing.T) {
	st := storetest.Open(t, "sqlite")
	h := newHarness(t, st)
	m := h.signup()
	link := h.link(m.TestKey, nil)
	cs := &models.CheckoutSession{MerchantID: m.ID, Mode: models.ModeTest, PaymentLinkID: link, Network: "base_sepolia", WalletType: "evm",
		ExpectedAmount: money.FromCents(100), MerchantWalletAddress: evmA, TokenAddress: evmB, ExpiresAt: time.Now().Add(time.Hour)}
	if err := st.CreateCheckoutSession(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h.srv.Handler()}
	srv.RegisterOnShutdown(h.srv.Drain)
	go func() { _ = srv.Serve(ln) }()
	res, err := http.Get("http://" + ln.Addr().String() + "/api/checkout/session/" + cs.ID + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with an open stream: %v", err)
	}
}
