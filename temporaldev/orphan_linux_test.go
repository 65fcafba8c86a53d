package temporaldev

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a process that starts a server,
// prints the server's pid and then waits to be killed.
const helperEnv = "TEMPORALDEV_TEST_PARENT"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		srv, err := Start(context.Background(), Options{Binary: os.Getenv(helperEnv), Port: mustFreePort()})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		// Let start-up logging finish: a server that writes after its parent
		// died gets SIGPIPE anyway, which would hide a missing Pdeathsig.
		time.Sleep(time.Second)
		fmt.Println("pid", srv.cmd.Process.Pid)
		select {}
	}
	os.Exit(m.Run())
}

// TestServerDiesWithItsParent kills (SIGKILL, no cleanup) a process that
// started a server: Pdeathsig must take the server down with it.
func TestServerDiesWithItsParent(t *testing.T) {
	bin := binaryForTest(t)
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), helperEnv+"="+bin)
	stdout, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	defer parent.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the helper's output: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	if !alive(pid) {
		t.Fatalf("server %d is not running while its parent is", pid)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	deadline := time.Now().Add(2 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("server %d outlived its parent by 2s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid runs: not gone and not a zombie awaiting reaping.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesized command name: "pid (comm) S ...".
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

func mustFreePort() int {
	port, err := pickFreePort()
	if err != nil {
		panic(err)
	}
	return port
}
