package controlplane

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr starts a child in a process group of its own and asks the
// kernel to SIGKILL it when the thread that started it exits (Pdeathsig), so
// that children do not outlive a killed test binary or command.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until the child pid is stopped or has exited, without
// reaping it (WNOWAIT): a SIGSTOP takes effect only once the process's
// threads handle it, after kill returns.
func waitStopped(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return // stopped, exited, or already reaped (ECHILD)
		}
	}
}
