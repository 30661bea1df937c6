package controlplane

import (
	"errors"
	"syscall"
	"time"

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
// threads handle it, after kill returns. It gives up after a second: a
// process that can't stop yet, such as a shell waiting in vfork for a child
// the same SIGSTOP stopped before it could exec, would otherwise hold Pause
// for ever (seen with dash running `sh -c "sleep 60"`). It polls, since a
// blocking waitid can't be given a timeout.
func waitStopped(pid int) {
	deadline := time.Now().Add(time.Second)
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || info.Signo != 0 || time.Now().After(deadline) {
			return // stopped, exited, already reaped (ECHILD), or not stopping
		}
		time.Sleep(time.Millisecond)
	}
}
