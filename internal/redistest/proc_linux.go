//go:build linux

package redistest

import "syscall"

// sysProcAttr makes the kernel SIGKILL the redis-server processes when the
// test binary dies, even if Main never gets to stop them.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
