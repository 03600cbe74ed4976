//go:build unix && !linux

package main

import (
	"os"
	"syscall"
)

// selfExe is the path of this binary, as far as the system tells.
func selfExe() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return os.Args[0]
}

// setupGuard does nothing: only Linux has subreapers. Orphans of CMD's
// group are reaped by init.
func setupGuard() {}

// cmdSysProcAttr is how the guard starts CMD: leading a process group of
// its own. Without a parent-death signal, CMD outlives a guard killed with
// SIGKILL; zklock then kills the group itself.
func cmdSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
