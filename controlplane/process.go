package controlplane

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"
)

// process is one running binary of the control plane, its output going to
// a log file in the run's data directory.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited and been waited for
	err     error         // cmd.Wait's result, set before done is closed

	replaced atomic.Bool // killed to be restarted: its exit is not a crash
}

// startProcess starts path with args in its own process group, output to
// dir/<name>.log. The process is killed when ctx is done. exited is called
// (from the waiting goroutine) once the process has exited.
func startProcess(ctx context.Context, name, path string, args []string, dir string, exited func(*process)) (*process, error) {
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
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
		exited(p)
	}()
	return p, nil
}

// kill kills the process's group and waits for the process to exit.
func (p *process) kill() {
	_ = killGroup(p.cmd)
	<-p.done
}

// exitError describes the exit of the process, which must have exited,
// with the last lines of its log.
func (p *process) exitError() error {
	status := "exited"
	if p.err != nil {
		status = "exited: " + p.err.Error()
	}
	return fmt.Errorf("controlplane: %s %s; its log ends:\n%s", p.name, status, p.logTail(20))
}

// logTail returns the last n lines of the process's log.
func (p *process) logTail(n int) string {
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
