//go:build unix && !linux

package controlplane

import "syscall"

// sysProcAttr starts a child in a process group of its own.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
