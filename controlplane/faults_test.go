package controlplane

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeEtcdCluster returns a Cluster of one process, a fake etcd (see
// fakeEtcd) on a free port, started as Start starts its processes, and the
// URL of its /health.
func fakeEtcdCluster(t *testing.T) (*Cluster, string) {
	t.Helper()
	ports, err := pickPorts([]namedPort{{"etcd client", 0}})
	if err != nil {
		t.Fatal(err)
	}
	bins, _ := fakeBins(t, fakeEtcdBody(t), "exit 1", "exit 1")
	health := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])) + "/health"
	c := &Cluster{
		dataDir:  t.TempDir(),
		exited:   make(chan struct{}),
		lifetime: context.Background(),
		specs: map[string]procSpec{Etcd: {
			path: filepath.Join(bins, Etcd),
			args: []string{"--listen-client-urls=http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))},
			ready: func(ctx context.Context) error {
				return get(ctx, &http.Client{Timeout: 2 * time.Second}, health, "")
			},
		}},
	}
	t.Cleanup(func() { _ = c.Stop() })
	p, err := c.startSpec(c.lifetime, Etcd)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.waitFor(context.Background(), time.Now().Add(30*time.Second), p, c.specs[Etcd].ready); err != nil {
		t.Fatal(err)
	}
	return c, health
}

// healthy reports whether GET url answers 200 within timeout.
func healthy(url string, timeout time.Duration) bool {
	client := &http.Client{Timeout: timeout}
	defer client.CloseIdleConnections()
	return get(context.Background(), client, url, "") == nil
}

func TestKillAndRestartKeepThePortAndAreNotACrash(t *testing.T) {
	c, health := fakeEtcdCluster(t)
	old, err := c.Process(Etcd)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(Etcd); err != nil {
		t.Fatal(err)
	}
	if healthy(health, time.Second) {
		t.Fatal("the killed etcd still answers")
	}
	if _, err := c.Process(Etcd); err == nil {
		t.Error("Process found the killed etcd")
	}
	if err := c.Restart(context.Background(), Etcd); err != nil {
		t.Fatal(err)
	}
	if !healthy(health, 5*time.Second) {
		t.Fatal("the restarted etcd does not answer on its port")
	}
	p, err := c.Process(Etcd)
	if err != nil || p == old {
		t.Fatalf("Process after Restart = %p, %v; want a new process", p, err)
	}
	// Restart of a running process kills it first.
	if err := c.Restart(context.Background(), Etcd); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	default:
		t.Error("Restart left the running etcd running")
	}
	select {
	case <-c.Done():
		t.Fatalf("Done is closed after a Kill and Restarts: %v", c.Err())
	default:
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if healthy(health, time.Second) {
		t.Error("etcd answers after Stop")
	}
}

func TestPauseFreezesAndContinueResumes(t *testing.T) {
	c, health := fakeEtcdCluster(t)
	if err := c.Pause(Etcd); err != nil {
		t.Fatal(err)
	}
	// A paused process accepts connections (the kernel does) and answers
	// nothing.
	if healthy(health, 500*time.Millisecond) {
		t.Fatal("the paused etcd answered")
	}
	if err := c.Continue(Etcd); err != nil {
		t.Fatal(err)
	}
	if !healthy(health, 5*time.Second) {
		t.Fatal("the continued etcd does not answer")
	}
	// Stop kills a paused process too.
	if err := c.Pause(Etcd); err != nil {
		t.Fatal(err)
	}
	p, _ := c.Process(Etcd)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
}

func TestFaultsOnAnUnknownNameOrAnExistingClusterAreErrors(t *testing.T) {
	c, _ := fakeEtcdCluster(t)
	for _, err := range []error{c.Pause("kubelet"), c.Kill("kubelet"), c.Restart(context.Background(), "kubelet")} {
		if err == nil || !errorContains(err, `no process is named "kubelet"`) {
			t.Errorf("got %v, want an error naming the unknown process", err)
		}
	}
	existing := &Cluster{}
	for _, err := range []error{existing.Pause(Etcd), existing.Kill(KubeAPIServer), existing.Restart(context.Background(), Etcd)} {
		if err == nil || !errorContains(err, "not started by this process") {
			t.Errorf("got %v, want an error saying the cluster wasn't started here", err)
		}
	}
	if err := existing.RestartControllerManager(context.Background()); err != nil {
		t.Errorf("RestartControllerManager of an existing cluster: %v", err)
	}
}

func TestStartProcessSignalsPausesAndKillsTheGroup(t *testing.T) {
	// A shell that waits on a child: SIGTERM reaches the shell alone,
	// whose trap exits 3; Pause and Kill reach the child too.
	pidFile := filepath.Join(t.TempDir(), "child")
	cmd := exec.Command("/bin/sh", "-c", `sleep 60 & echo $! > `+pidFile+`; trap 'exit 3' TERM; wait`)
	p, err := StartProcess("app", cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	var child int
	for child == 0 {
		b, _ := os.ReadFile(pidFile)
		child, _ = strconv.Atoi(string(trimSpace(b)))
		if child == 0 {
			time.Sleep(10 * time.Millisecond) // the shell writes the file; there is no event to await
		}
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if s := procState(t, child); s != "T" {
		t.Errorf("the paused group's child is in state %q, want T (stopped)", s)
	}
	if err := p.Continue(); err != nil {
		t.Fatal(err)
	}
	if s := procState(t, child); s == "T" {
		t.Error("the continued group's child is still stopped")
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(10 * time.Second)
	if err != nil || code != 3 {
		t.Fatalf("Wait = %d, %v; want the trap's exit 3", code, err)
	}
	if err := p.Pause(); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Pause of an exited process = %v, want os.ErrProcessDone", err)
	}
	_ = syscall.Kill(child, syscall.SIGKILL) // the shell's orphan: SIGTERM went to the shell alone

	// dash runs sleep in a vfork child: a SIGSTOP that stops the child
	// before its exec leaves the shell unable to stop, and Pause must still
	// return (it once waited for ever).
	cmd = exec.Command("/bin/sh", "-c", "sleep 60")
	p, err = StartProcess("app", cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := p.ExitCode(); code != -1 {
		t.Errorf("ExitCode of a killed process = %d, want -1", code)
	}
}

// procState returns the state letter of pid from /proc (Linux), skipping
// the test elsewhere. It polls a moment, since a signal is delivered
// asynchronously.
func procState(t *testing.T, pid int) string {
	t.Helper()
	var state string
	for range 100 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Skip("no /proc: " + err.Error())
		}
		// pid (comm) state ...: comm may hold spaces, so the state follows the last ')'.
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] == ')' && i+2 < len(b) {
				state = string(b[i+2])
				break
			}
		}
		if state == "T" {
			return state
		}
		time.Sleep(10 * time.Millisecond)
	}
	return state
}

func errorContains(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}
