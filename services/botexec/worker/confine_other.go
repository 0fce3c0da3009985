//go:build !linux

package worker

import "runtime/debug"

// confine sets what limits this system offers: only the Go runtime's own.
// Workers still keep a bot's fatal error away from the parent, but an
// allocation without end is stopped only by the sandbox's memory guard.
func confine(budget int64) error {
	debug.SetMemoryLimit(budget * 3 / 4)
	debug.SetMaxStack(maxStack)
	return nil
}
