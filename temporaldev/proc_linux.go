package temporaldev

import "syscall"

// sysProcAttr makes the kernel SIGKILL the server when the process that
// started it dies, even by SIGKILL or a test timeout, so no dev server is left
// holding its ports and SQLite file. SQLite keeps the file consistent.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
