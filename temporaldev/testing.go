package temporaldev

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// StartForTest starts a headless dev server for an integration test: loopback
// on a free port, state in t.TempDir(), paygate's search attributes
// registered, default namespace, 720h retention. Dial it with
// client.Options{HostPort: s.Address()}. t.Cleanup kills it (its state is
// thrown away, and a graceful stop would cost the test two seconds) and, if
// the test failed, logs the server's output.
//
// When the Temporal CLI binary is missing the test is skipped with a hint to
// run tools/build-temporal.sh, unless the CI environment variable is set: then
// it fails, so CI never passes by skipping.
func StartForTest(t testing.TB) *Server {
	t.Helper()
	opts := Options{
		Binary:           binaryForTest(t),
		DataDir:          t.TempDir(),
		Host:             DefaultHost,
		Port:             freePort(t),
		SearchAttributes: PaygateSearchAttributes(),
	}
	srv, err := startRetrying(t, 30*time.Second, &opts)
	if err != nil {
		t.Fatalf("temporaldev: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.kill(); err != nil {
			t.Errorf("temporaldev: %v", err)
		}
		if t.Failed() {
			t.Logf("temporaldev: dev server output:\n%s", srv.out)
		}
	})
	return srv
}

// startRetrying starts a server with opts, and again (twice at most) on other
// free ports (the frontend's, and the UI's if it has one) when the start
// failed on a port: a port found free can be taken before the server binds
// it (Start itself launches again when start-dev lost one of its own).
// Each attempt has timeout; opts ends with the last attempt's ports. The
// state in opts.DataDir is kept between attempts (starting on existing state
// is the restart path).
func startRetrying(t testing.TB, timeout time.Duration, opts *Options) (*Server, error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		srv, err := Start(ctx, *opts)
		cancel()
		if err == nil || attempt == 3 || !(errors.Is(err, ErrPortInUse) || errors.Is(err, errExitedEarly)) {
			return srv, err
		}
		t.Logf("temporaldev: start attempt %d: %v", attempt, err)
		opts.Port = freePort(t)
		if opts.UIPort != 0 {
			opts.UIPort = freePort(t)
		}
	}
}

// binaryForTest returns DefaultBinary(), or skips t (fails it under CI) when
// the binary is missing.
func binaryForTest(t testing.TB) string {
	t.Helper()
	bin, err := DefaultBinary()
	switch {
	case err == nil:
		return bin
	case errors.Is(err, ErrBinaryNotFound) && os.Getenv("CI") == "":
		t.Skipf("temporaldev: %v", err)
	default:
		t.Fatalf("temporaldev: %v", err)
	}
	return ""
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	port, err := pickFreePort()
	if err != nil {
		t.Fatalf("temporaldev: finding a free port: %v", err)
	}
	return port
}

func pickFreePort() (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(DefaultHost, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
