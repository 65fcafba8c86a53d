package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"syscall"
	"time"
)

// Defaults of a Sender.
const (
	// DefaultTimeout bounds one attempt, from dial to the last byte read.
	DefaultTimeout = 15 * time.Second
	// MaxResponseBytes is how much of a receiver's answer is read at most.
	MaxResponseBytes = 64 << 10
	// DefaultUserAgent identifies deliveries to receivers.
	DefaultUserAgent = "paygate-webhooks/1"
)

// Request is one delivery attempt.
type Request struct {
	// URL is the endpoint URL.
	URL string
	// Secret is the endpoint's whsec_ secret.
	Secret string
	// PreviousSecret, when set, is a secret being rotated out: the
	// webhook-signature header then carries a signature under each, the
	// current one first, space separated (Standard Webhooks), so a receiver
	// holding either verifies the attempt.
	PreviousSecret string
	// MessageID is the delivery id, sent as webhook-id; the same on every attempt.
	MessageID string
	// Timestamp is the attempt time, signed and sent as webhook-timestamp.
	Timestamp time.Time
	// Body is the exact JSON envelope to send and sign.
	Body []byte
	// Live marks a live-mode endpoint: it is held to the strict policy
	// (https to public addresses only) at dial time, whatever policy the
	// Sender was built with. Only test-mode endpoints get the loopback
	// allowance of a development setup.
	Live bool
}

// Result is the outcome of one attempt. A failed attempt is a Result, never
// a Go error: the caller's retry schedule decides what happens next.
type Result struct {
	// StatusCode is the receiver's HTTP status, 0 when no answer arrived.
	StatusCode int
	// Delivered is true for a 2xx answer within the timeout.
	Delivered bool
	// Error says why the attempt failed ("" when delivered).
	Error string
	// Duration is the time the attempt took.
	Duration time.Duration
	// ResponseBytes is how much of the answer was read (at most MaxResponseBytes).
	ResponseBytes int64
}

// Sender posts signed deliveries. It refuses, at dial time, every address
// the policy does not allow, never follows redirects, ignores proxy
// environment variables (a proxy would dial on our behalf, past the guard)
// and reads at most MaxResponseBytes of an answer. Live endpoints
// (Request.Live) always go through the strict policy, on their own
// connection pool, so that a connection opened under the loopback
// allowance of a test endpoint is never reused for a live one. It is safe
// for concurrent use.
type Sender struct {
	timeout   time.Duration
	userAgent string
	// test carries test-mode deliveries under the policy given to
	// NewSender; live carries live-mode deliveries under the strict one.
	test, live *lane
}

// lane is one policy with its own transport.
type lane struct {
	policy Policy
	client *http.Client
	// dial connects to an address that already passed the policy; tests
	// replace it to prove that refused addresses are never dialled.
	dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Option configures a Sender.
type Option func(*Sender)

// WithTimeout sets the per-attempt timeout (default DefaultTimeout).
func WithTimeout(d time.Duration) Option {
	return func(s *Sender) {
		if d > 0 {
			s.timeout = d
		}
	}
}

// WithUserAgent sets the User-Agent header (default DefaultUserAgent).
func WithUserAgent(ua string) Option {
	return func(s *Sender) {
		if ua != "" {
			s.userAgent = ua
		}
	}
}

// NewSender returns a Sender that enforces p for test-mode endpoints and
// p.Strict() for live ones.
func NewSender(p Policy, opts ...Option) *Sender {
	s := &Sender{timeout: DefaultTimeout, userAgent: DefaultUserAgent}
	for _, o := range opts {
		o(s)
	}
	s.test = s.newLane(p)
	s.live = s.newLane(p.Strict())
	return s
}

func (s *Sender) newLane(p Policy) *lane {
	l := &lane{policy: p}
	dialer := &net.Dialer{
		Timeout: s.timeout,
		// Last line of defence: whatever resolved the name, the address the
		// socket is about to connect to is checked once more.
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("webhook: unexpected dial address %q", address)
			}
			return p.CheckAddr(ap.Addr())
		},
	}
	l.dial = dialer.DialContext
	transport := &http.Transport{
		Proxy:                  nil,
		DialContext:            l.dialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    s.timeout,
		ResponseHeaderTimeout:  s.timeout,
		MaxResponseHeaderBytes: MaxResponseBytes,
	}
	l.client = &http.Client{
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return l
}

type loopbackOnlyKey struct{}

// dialContext resolves the host with the policy's resolver, refuses the dial
// if any resolved address is not allowed (a name with one private address
// among public ones is suspicious enough), then connects to the allowed
// addresses in order.
func (l *lane) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		addrs, err = l.policy.resolver().LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
	}
	for _, a := range addrs {
		if err := l.policy.CheckAddr(a); err != nil {
			return nil, err
		}
	}
	if ctx.Value(loopbackOnlyKey{}) != nil && !allLoopback(addrs) {
		return nil, fmt.Errorf("%w: plain http is only allowed to loopback", ErrBlockedAddress)
	}
	var firstErr error
	for _, a := range addrs {
		conn, err := l.dial(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return conn, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

// Send makes one signed POST of req.Body to req.URL and reports the outcome.
// 2xx is delivered; any other status (3xx included: redirects are never
// followed), a timeout, a refused address or a connection failure is a
// failed attempt described in Result.Error.
func (s *Sender) Send(ctx context.Context, req Request) Result {
	start := time.Now()
	res := s.send(ctx, req)
	res.Duration = time.Since(start)
	return res
}

func (s *Sender) send(ctx context.Context, req Request) Result {
	l := s.test
	if req.Live {
		l = s.live
	}
	u, _, err := parseEndpointURL(req.URL, l.policy)
	if err != nil {
		return Result{Error: "url: " + err.Error()}
	}
	sig, err := Sign(req.Secret, req.MessageID, req.Timestamp, req.Body)
	if err != nil {
		return Result{Error: err.Error()}
	}
	if req.PreviousSecret != "" {
		previous, err := Sign(req.PreviousSecret, req.MessageID, req.Timestamp, req.Body)
		if err != nil {
			return Result{Error: "previous secret: " + err.Error()}
		}
		sig += " " + previous
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if u.Scheme == "http" {
		ctx = context.WithValue(ctx, loopbackOnlyKey{}, true)
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(req.Body))
	if err != nil {
		return Result{Error: "build request: " + err.Error()}
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("User-Agent", s.userAgent)
	httpReq.Header.Set(HeaderID, req.MessageID)
	httpReq.Header.Set(HeaderTimestamp, strconv.FormatInt(req.Timestamp.Unix(), 10))
	httpReq.Header.Set(HeaderSignature, sig)

	resp, err := l.client.Do(httpReq)
	if err != nil {
		return Result{Error: describeError(ctx, err)}
	}
	defer resp.Body.Close()
	n, readErr := io.Copy(io.Discard, io.LimitReader(resp.Body, MaxResponseBytes))
	res := Result{StatusCode: resp.StatusCode, ResponseBytes: n}
	switch {
	case readErr != nil && ctx.Err() != nil:
		// A 2xx whose body does not arrive in time is still a timeout: the
		// receiver did not answer within the bound.
		res.Error = "timeout reading response"
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		res.Delivered = true
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		res.Error = fmt.Sprintf("redirect not followed (status %d)", resp.StatusCode)
	default:
		res.Error = fmt.Sprintf("status %d", resp.StatusCode)
	}
	return res
}

// describeError turns a transport error into a short reason without the
// request URL (which may carry tokens in its query).
func describeError(ctx context.Context, err error) string {
	var blocked *BlockedAddressError
	switch {
	case errors.As(err, &blocked):
		return "blocked: " + blocked.Error()
	case errors.Is(err, ErrBlockedAddress):
		return "blocked: " + ErrBlockedAddress.Error()
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case ctx.Err() != nil:
		return "canceled"
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return "connection failed: " + err.Error()
}
