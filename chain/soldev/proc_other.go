//go:build !linux

package soldev

import (
	"os"
	"syscall"
)

// childAttr: outside Linux there is no parent-death signal; the sidecar
// still exits when its stdin pipe closes.
func childAttr() *syscall.SysProcAttr { return nil }

func signalGroup(p *os.Process, sig syscall.Signal) {
	if p != nil {
		_ = p.Signal(sig)
	}
}
