package soldev

import (
	"os"
	"syscall"
)

// childAttr puts the sidecar in its own process group (so Close can signal
// node and anything it spawned) and has the kernel kill it if the thread
// that started it dies. The closed stdin pipe covers the rest: the sidecar
// exits when its parent is gone however the parent died.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func signalGroup(p *os.Process, sig syscall.Signal) {
	if p == nil {
		return
	}
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		_ = p.Signal(sig)
	}
}
