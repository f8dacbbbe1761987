//go:build unix

package redistest

import (
	"fmt"
	"syscall"
)

// freeze stops the process with SIGSTOP; thaw resumes it with SIGCONT.
func (p *proc) freeze() error { return p.signal(syscall.SIGSTOP) }

func (p *proc) thaw() error { return p.signal(syscall.SIGCONT) }

func (p *proc) signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%v to redis-server %s: %w", sig, p.addr, err)
	}
	return nil
}
