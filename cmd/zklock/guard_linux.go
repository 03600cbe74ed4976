package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// selfExe is the path that starts this very binary, even if its file was
// replaced or removed since zklock started.
func selfExe() string { return "/proc/self/exe" }

// setupGuard names the guard for ps and top (it was started as
// /proc/self/exe, which they would show as "exe"), and makes it a child
// subreaper: the orphans of its descendants become its children, for it
// to reap.
func setupGuard() {
	_ = os.WriteFile("/proc/self/comm", []byte("zklock-guard"), 0)
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) // without it, init reaps them
}

// cmdSysProcAttr is how the guard starts CMD: leading a process group of
// its own, and killed if the guard dies (which takes a SIGKILL: the guard
// catches the rest).
func cmdSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
