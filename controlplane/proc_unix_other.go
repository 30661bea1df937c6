//go:build unix && !linux

package controlplane

import "syscall"

// sysProcAttr starts a child in a process group of its own.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitStopped returns at once: outside Linux, Pause does not wait for the
// stop to take effect.
func waitStopped(pid int) {}
