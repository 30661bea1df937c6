package controlplane

import "syscall"

// sysProcAttr starts a child in a process group of its own and asks the
// kernel to SIGKILL it when the thread that started it exits (Pdeathsig), so
// that children do not outlive a killed test binary or command.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
