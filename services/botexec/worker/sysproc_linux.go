package worker

import "syscall"

// sysProcAttr makes a worker die with its parent (its pipe closing ends
// it too; this covers a parent killed outright).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
