package temporaldev

import (
	"testing"
	"time"
)

// Start-up time to healthy, search attributes registered and retention set,
// with state on disk:
//
//	go test -run '^$' -bench Start -benchtime 5x ./temporaldev
//
// Cold is a fresh data dir (schema created), warm an existing one. ns/op
// counts Start only; Stop is excluded.
func BenchmarkStartCold(b *testing.B) { benchmarkStart(b, false) }

// BenchmarkStartWarm restarts on the same data dir each iteration.
func BenchmarkStartWarm(b *testing.B) { benchmarkStart(b, true) }

func benchmarkStart(b *testing.B, warm bool) {
	opts := Options{Binary: binaryForTest(b), Port: freePort(b), SearchAttributes: PaygateSearchAttributes()}
	if warm {
		opts.DataDir = b.TempDir()
		stopOrFatal(b, startForBench(b, &opts)) // creates the database
	}
	var stopping time.Duration
	b.ResetTimer()
	for range b.N {
		if !warm {
			b.StopTimer()
			opts.DataDir = b.TempDir()
			b.StartTimer()
		}
		srv := startForBench(b, &opts)
		b.StopTimer()
		began := time.Now()
		stopOrFatal(b, srv)
		stopping += time.Since(began)
		b.StartTimer()
	}
	b.ReportMetric(float64(stopping.Milliseconds())/float64(b.N), "stop-ms/op")
}

// startForBench starts the server of opts, on another free port (kept in
// opts for the next iteration) when its port was taken in the meantime:
// make bench runs the packages' benchmarks side by side, and any of their
// outgoing connections may get the port as its ephemeral source port. A
// failed attempt's time counts in ns/op (it is rare).
func startForBench(b *testing.B, opts *Options) *Server {
	srv, err := startRetrying(b, time.Minute, opts)
	if err != nil {
		b.Fatal(err)
	}
	return srv
}

func stopOrFatal(b *testing.B, srv *Server) {
	if err := srv.Stop(); err != nil {
		b.Fatal(err)
	}
}
