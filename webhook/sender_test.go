package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// devPolicy is the embedded default: loopback allowed, over http too.
func devPolicy(res Resolver) Policy { return Policy{AllowLoopbackHTTP: true, Resolver: res} }

// forbidDial makes any dial past the guard fail the test: refused addresses
// must never reach the socket layer.
func forbidDial(t *testing.T, s *Sender) {
	t.Helper()
	for _, l := range []*lane{s.test, s.live} {
		l.dial = func(_ context.Context, _, address string) (net.Conn, error) {
			t.Errorf("dialled %s, which the policy should have refused", address)
			return nil, errors.New("test: dial forbidden")
		}
	}
}

func testRequest(rawURL, secret string) Request {
	return Request{
		URL:       rawURL,
		Secret:    secret,
		MessageID: "dlv_0192f3a4-test",
		Timestamp: time.Now(),
		Body:      []byte(`{"event":"checkout.completed","data":{"amount":"32.61","livemode":false},"webhookDeliveryId":"dlv_0192f3a4-test","timestamp":"2026-11-22T03:00:00.000Z"}`),
	}
}

func TestSenderSignsAndPosts(t *testing.T) {
	secret, _ := NewSecret()
	req := testRequest("", secret)
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var problems []string
		if r.Method != http.MethodPost {
			problems = append(problems, "method "+r.Method)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			problems = append(problems, "content-type "+ct)
		}
		if ua := r.Header.Get("User-Agent"); ua != DefaultUserAgent {
			problems = append(problems, "user-agent "+ua)
		}
		if id := r.Header.Get(HeaderID); id != req.MessageID {
			problems = append(problems, "id "+id)
		}
		if string(body) != string(req.Body) {
			problems = append(problems, "body differs")
		}
		if err := Verify(secret, r.Header, body, DefaultTolerance, time.Now()); err != nil {
			problems = append(problems, err.Error())
		}
		got.Store(strings.Join(problems, "; "))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	req.URL = srv.URL + "/hooks?tenant=1"

	res := NewSender(devPolicy(nil)).Send(context.Background(), req)
	if !res.Delivered || res.StatusCode != 204 || res.Error != "" {
		t.Fatalf("result %+v, want delivered 204", res)
	}
	if p := got.Load(); p != "" {
		t.Fatalf("receiver saw: %v", p)
	}
	if res.Duration <= 0 {
		t.Fatalf("duration %v", res.Duration)
	}
}

func TestSenderClassifiesStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var code int
		fmt.Sscanf(r.URL.Query().Get("code"), "%d", &code)
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(code)
	}))
	defer srv.Close()
	secret, _ := NewSecret()
	s := NewSender(devPolicy(nil))
	for _, code := range []int{200, 201, 202, 204, 299, 300, 301, 302, 303, 304, 307, 308, 400, 401, 404, 410, 429, 500, 502, 503} {
		res := s.Send(context.Background(), testRequest(fmt.Sprintf("%s/?code=%d", srv.URL, code), secret))
		want := code >= 200 && code < 300
		if res.Delivered != want || res.StatusCode != code {
			t.Errorf("status %d: %+v, want delivered=%v", code, res, want)
		}
		if !want && res.Error == "" {
			t.Errorf("status %d: failure without a reason", code)
		}
	}
}

func TestSenderDoesNotFollowRedirects(t *testing.T) {
	var followed atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		followed.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer target.Close()
	for _, loc := range []string{
		"http://10.0.0.1/hook",                    // private address
		"http://169.254.169.254/latest/meta-data", // metadata
		"http://internal.example/hook",            // name resolving to a private address
		target.URL + "/hook",                      // a loopback receiver that would answer 200
	} {
		redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, loc, http.StatusTemporaryRedirect)
		}))
		secret, _ := NewSecret()
		s := NewSender(devPolicy(fakeResolver{"127.0.0.1": {"127.0.0.1"}, "internal.example": {"10.1.2.3"}}))
		res := s.Send(context.Background(), testRequest(redirector.URL, secret))
		redirector.Close()
		if res.Delivered || res.StatusCode != http.StatusTemporaryRedirect || !strings.Contains(res.Error, "redirect") {
			t.Errorf("redirect to %s: %+v, want failed 307", loc, res)
		}
	}
	if n := followed.Load(); n != 0 {
		t.Fatalf("redirect target was hit %d times", n)
	}
}

func TestSenderReadsAtMost64KiB(t *testing.T) {
	chunk := strings.Repeat("x", 32<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		// An endless answer: only the cap makes Send return.
		for {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			default:
			}
		}
	}))
	defer srv.Close()
	secret, _ := NewSecret()
	res := NewSender(devPolicy(nil), WithTimeout(5*time.Second)).Send(context.Background(), testRequest(srv.URL, secret))
	if !res.Delivered || res.ResponseBytes != MaxResponseBytes {
		t.Fatalf("%+v, want delivered with %d bytes read", res, MaxResponseBytes)
	}
	if res.Duration > 3*time.Second {
		t.Fatalf("took %v: the answer was not cut at the cap", res.Duration)
	}
}

func TestSenderTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	defer close(release)
	secret, _ := NewSecret()
	res := NewSender(devPolicy(nil), WithTimeout(300*time.Millisecond)).Send(context.Background(), testRequest(srv.URL, secret))
	if res.Delivered || res.StatusCode != 0 || res.Error != "timeout" {
		t.Fatalf("%+v, want a timeout", res)
	}
	if res.Duration < 300*time.Millisecond || res.Duration > 3*time.Second {
		t.Fatalf("duration %v", res.Duration)
	}
}

func TestSenderTimeoutWhileReadingBody(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	secret, _ := NewSecret()
	res := NewSender(devPolicy(nil), WithTimeout(300*time.Millisecond)).Send(context.Background(), testRequest(srv.URL, secret))
	if res.Delivered || !strings.Contains(res.Error, "timeout") {
		t.Fatalf("%+v, want a timeout", res)
	}
}

func TestSenderConnectionFailureIsAResult(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more
	secret, _ := NewSecret()
	res := NewSender(devPolicy(nil)).Send(context.Background(), testRequest("http://"+addr+"/", secret))
	if res.Delivered || res.StatusCode != 0 || !strings.HasPrefix(res.Error, "connection failed") {
		t.Fatalf("%+v, want a connection failure", res)
	}
}

func TestSenderRefusesBlockedAddressesAtDial(t *testing.T) {
	res := fakeResolver{}
	for i, s := range blockedAddrs {
		res[fmt.Sprintf("h%d.example.com", i)] = []string{s}
	}
	res["mixed.example.com"] = []string{"127.0.0.1", "10.0.0.1"}
	secret, _ := NewSecret()
	for _, p := range []Policy{{Resolver: res}, devPolicy(res)} {
		s := NewSender(p)
		forbidDial(t, s)
		var urls []string
		for i, a := range blockedAddrs {
			urls = append(urls,
				fmt.Sprintf("https://h%d.example.com/hook", i),
				"https://"+urlHost(a)+"/hook")
		}
		urls = append(urls, "https://mixed.example.com/hook")
		for _, u := range urls {
			r := s.Send(context.Background(), testRequest(u, secret))
			if r.Delivered || !strings.HasPrefix(r.Error, "blocked:") {
				t.Errorf("loopback=%v %s: %+v, want blocked", p.AllowLoopbackHTTP, u, r)
			}
		}
	}
}

func TestSenderRefusesLoopbackUnlessAllowed(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	res := fakeResolver{"receiver.example.com": {"127.0.0.1"}, "v6loop.example.com": {"::ffff:127.0.0.1"}}
	secret, _ := NewSecret()

	strict := NewSender(Policy{Resolver: res})
	forbidDial(t, strict)
	for _, raw := range []string{
		srv.URL,
		"https://receiver.example.com:" + u.Port(),
		"https://v6loop.example.com:" + u.Port(),
		"https://[::ffff:127.0.0.1]:" + u.Port(),
	} {
		r := strict.Send(context.Background(), testRequest(raw, secret))
		if r.Delivered || !strings.HasPrefix(r.Error, "blocked:") {
			t.Errorf("strict %s: %+v, want blocked", raw, r)
		}
	}
	// Plain http is refused outright by a strict policy.
	if r := strict.Send(context.Background(), testRequest("http://127.0.0.1:1/", secret)); r.Error != "url: must use https" {
		t.Errorf("strict http: %+v", r)
	}
	if hits.Load() != 0 {
		t.Fatalf("strict sender reached the loopback receiver")
	}

	// The dev policy reaches the same receiver (TLS verification aside, which
	// is the transport's business, so use the test server's trusted client config).
	dev := NewSender(devPolicy(res))
	dev.test.client.Transport.(*http.Transport).TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
	r := dev.Send(context.Background(), testRequest(srv.URL, secret))
	if !r.Delivered {
		t.Fatalf("dev: %+v, want delivered", r)
	}
}

func TestSenderPlainHTTPOnlyToLoopback(t *testing.T) {
	res := fakeResolver{"public.example.com": {"93.184.216.34"}}
	s := NewSender(devPolicy(res))
	forbidDial(t, s)
	secret, _ := NewSecret()
	r := s.Send(context.Background(), testRequest("http://public.example.com/hook", secret))
	if r.Delivered || !strings.HasPrefix(r.Error, "blocked:") {
		t.Fatalf("%+v, want blocked", r)
	}
}

// The socket-level Control hook refuses a disallowed address even if the
// resolver step were bypassed.
func TestSenderDialControlRefuses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := NewSender(Policy{})
	conn, err := s.test.dial(context.Background(), "tcp", ln.Addr().String())
	if err == nil {
		conn.Close()
		t.Fatal("strict dialer connected to loopback")
	}
	if !errors.Is(err, ErrBlockedAddress) {
		t.Fatalf("err = %v, want ErrBlockedAddress", err)
	}
	dev := NewSender(devPolicy(nil))
	conn, err = dev.test.dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dev dialer: %v", err)
	}
	conn.Close()
}

func TestSenderBadSecretIsAResult(t *testing.T) {
	s := NewSender(devPolicy(nil))
	forbidDial(t, s)
	r := s.Send(context.Background(), testRequest("http://127.0.0.1:1/", "whsec_%%%"))
	if r.Delivered || r.Error == "" {
		t.Fatalf("%+v", r)
	}
}

// TestSenderHoldsLiveEndpointsToStrictPolicy: a Sender built with the
// loopback allowance (an embedded setup, or a deployment that forgot its
// profile) still refuses a live endpoint on loopback at dial time, over
// https as over http, even right after a test endpoint on the same receiver
// left a pooled connection behind; the test endpoint is delivered.
func TestSenderHoldsLiveEndpointsToStrictPolicy(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer plain.Close()
	u, _ := url.Parse(srv.URL)
	res := fakeResolver{"receiver.example.com": {"127.0.0.1"}}
	s := NewSender(devPolicy(res))
	tlsConfig := srv.Client().Transport.(*http.Transport).TLSClientConfig
	for _, l := range []*lane{s.test, s.live} {
		// Both lanes trust the test server, so only the policy can refuse.
		l.client.Transport.(*http.Transport).TLSClientConfig = tlsConfig
	}
	secret, _ := NewSecret()
	test := testRequest(srv.URL, secret)
	if r := s.Send(context.Background(), test); !r.Delivered {
		t.Fatalf("test endpoint on loopback: %+v, want delivered", r)
	}
	for _, raw := range []string{srv.URL, "https://receiver.example.com:" + u.Port(), plain.URL} {
		live := testRequest(raw, secret)
		live.Live = true
		r := s.Send(context.Background(), live)
		if r.Delivered || !(strings.HasPrefix(r.Error, "blocked:") || r.Error == "url: must use https") {
			t.Errorf("live %s: %+v, want refused", raw, r)
		}
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("the receiver saw %d requests, want only the test endpoint's", n)
	}
}
