//go:build !linux

package temporaldev

import "syscall"

// sysProcAttr has no parent-death signal outside Linux: there a crashed parent
// can leave the server running, and Stop is the only way it ends.
func sysProcAttr() *syscall.SysProcAttr { return nil }
