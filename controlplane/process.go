package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
)

// Process is a process started in a process group of its own: one of a
// started Cluster's (etcd, kube-apiserver, kube-controller-manager), or one
// a test started with [StartProcess], such as an App run as a subprocess,
// so that a test can pause, continue, signal or kill it without handling
// process ids. Its methods act on the whole process group, so a shell or
// `go run` wrapper and what it starts are treated as one.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string        // "" for a StartProcess process: its output is the caller's
	done    chan struct{} // closed when the process has exited and been waited for
	err     error         // cmd.Wait's result, set before done is closed

	intended atomic.Bool // killed on purpose (Kill, Restart, Stop): its exit is not a crash
}

// StartProcess starts cmd, made with exec.Command and not started, as a
// Process named name: in a process group of its own, killed (SIGKILL) by
// [Process.Kill] and, on Linux, when this process dies. It replaces
// cmd.SysProcAttr; cmd's Stdout, Stderr, Env and Dir are the caller's.
// controlplanetest.StartProcess also kills it when the test ends.
//
// Errors: cmd.Start's, naming the process (a cmd made with
// exec.CommandContext is refused by it only if its Cancel is nil).
func StartProcess(name string, cmd *exec.Cmd) (*Process, error) {
	cmd.SysProcAttr = sysProcAttr()
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 5 * time.Second
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("controlplane: starting %s (%s): %w", name, cmd.Path, err)
	}
	p := &Process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// startProcess starts path with args in its own process group, output to
// dir/<name>.log (appended to, so a restarted process's log follows the
// last one's). The process is killed when ctx is done. exited is called
// (from the waiting goroutine) once the process has exited.
func startProcess(ctx context.Context, name, path string, args []string, dir string, exited func(*Process)) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("controlplane: starting %s: %w", name, err)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	setProcessGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("controlplane: starting %s (%s): %w", name, path, err)
	}
	p := &Process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
		exited(p)
	}()
	return p, nil
}

// Name returns the name the process was started with.
func (p *Process) Name() string { return p.name }

// Done returns a channel that is closed once the process has exited and
// its output has been copied.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitCode returns the process's exit code once Done is closed: -1 if a
// signal ended it, or before it has exited.
func (p *Process) ExitCode() int {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// Wait waits up to d for the process to exit, and returns its exit code
// (-1 if a signal ended it). Errors: it has not exited within d.
func (p *Process) Wait(d time.Duration) (int, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.ExitCode(), nil
	case <-t.C:
		return -1, fmt.Errorf("controlplane: %s has not exited within %v", p.name, d)
	}
}

// Signal sends sig to the process itself (not its group), as a kubelet
// sends SIGTERM to a container's main process. Errors: the process has
// exited (os.ErrProcessDone), or the kill system call's.
func (p *Process) Signal(sig syscall.Signal) error {
	return p.signal(sig, false)
}

// Pause stops the process's whole group with SIGSTOP, as a long garbage
// collection pause or a frozen VM does: it runs nothing, and its open
// connections stay open but unanswered, until Continue. On Linux it returns
// once the process is stopped (or has exited), or after a second if it
// can't stop yet (a shell held in vfork by a child stopped before its
// exec). Errors: as Signal's.
func (p *Process) Pause() error {
	if err := p.signal(syscall.SIGSTOP, true); err != nil {
		return err
	}
	waitStopped(p.cmd.Process.Pid)
	return nil
}

// Continue resumes a paused process's group with SIGCONT. Errors: as
// Signal's.
func (p *Process) Continue() error { return p.signal(syscall.SIGCONT, true) }

// Kill kills the process's whole group with SIGKILL (a paused one too) and
// waits for the process to exit. Killing a process that has already exited
// does nothing. It returns nil; the exit is not reported as a crash of a
// Cluster.
func (p *Process) Kill() error {
	p.intended.Store(true)
	p.kill()
	return nil
}

func (p *Process) signal(sig syscall.Signal, group bool) error {
	select {
	case <-p.done:
		return fmt.Errorf("controlplane: signalling %s: %w", p.name, os.ErrProcessDone)
	default:
	}
	pid := p.cmd.Process.Pid
	if group {
		pid = -pid
	}
	if err := syscall.Kill(pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			err = os.ErrProcessDone
		}
		return fmt.Errorf("controlplane: signalling %s: %w", p.name, err)
	}
	return nil
}

// kill kills the process's group and waits for the process to exit.
func (p *Process) kill() {
	_ = killGroup(p.cmd)
	<-p.done
}

// exitError describes the exit of the process, which must have exited,
// with the last lines of its log.
func (p *Process) exitError() error {
	status := "exited"
	if p.err != nil {
		status = "exited: " + p.err.Error()
	}
	return fmt.Errorf("controlplane: %s %s; its log ends:\n%s", p.name, status, p.logTail(20))
}

// logTail returns the last n lines of the process's log.
func (p *Process) logTail(n int) string {
	if p.logPath == "" {
		return "  (its output is the caller's)"
	}
	f, err := os.Open(p.logPath)
	if err != nil {
		return "  (no log: " + err.Error() + ")"
	}
	defer f.Close()
	const max = 32 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		_, _ = f.Seek(fi.Size()-max, io.SeekStart)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "  (no log: " + err.Error() + ")"
	}
	return tailLines(b, n)
}
