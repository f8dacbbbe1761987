//go:build !unix

package redistest

import "errors"

var errNoFreeze = errors.New("freezing a process needs SIGSTOP, which this platform lacks")

func (p *proc) freeze() error { return errNoFreeze }

func (p *proc) thaw() error { return errNoFreeze }
