//go:build !linux

package redistest

import "syscall"

// sysProcAttr: Pdeathsig only exists on Linux; elsewhere the servers are
// stopped by Main only.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{}
}
