package temporaldev

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestServerRunsWithItsGCSettings reads the running server's environment:
// the collector settings it was given replace whatever the calling process
// had for itself.
func TestServerRunsWithItsGCSettings(t *testing.T) {
	t.Setenv("GOGC", "50")
	srv := StartForTest(t)
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(srv.PID()) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(string(raw), "\x00")
	for _, want := range []string{"GOGC=" + devGOGC, "GOMEMLIMIT=" + devGOMEMLIMIT} {
		if !slices.Contains(env, want) {
			t.Errorf("server environment lacks %s", want)
		}
	}
	if slices.Contains(env, "GOGC=50") {
		t.Error("the caller's GOGC reached the server")
	}
}
