//go:build !linux

package worker

import "syscall"

// sysProcAttr: elsewhere a worker ends when its pipe from the parent closes.
func sysProcAttr() *syscall.SysProcAttr { return nil }
