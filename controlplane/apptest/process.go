package apptest

import (
	"bufio"
	"encoding/json"
	"io"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/controlplanetest"
)

// Build builds the command pkg, such as
// github.com/z5labs/humus/kube/examples/memcached/cmd/memcached, with go
// build into a directory of the test's, and returns the binary's path. go
// test puts its own go first in PATH.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), path.Base(pkg))
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	require.NoError(t, err, "go build %s:\n%s", pkg, out)
	return bin
}

// Process is an App run as a process of its own, as a pod runs it: its
// real stdout and stderr are what the test reads. Its controlplane.Process
// signals, pauses or kills it.
type Process struct {
	*controlplane.Process
	stdout *syncBuffer
	stderr *syncBuffer
}

// StartProcess starts the binary bin with env as its whole environment,
// with controlplanetest.StartProcess, which kills it when the test ends if
// it still runs, and logs its stderr.
func StartProcess(t testing.TB, bin string, env map[string]string) *Process {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{} // not the test's own environment
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &Process{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	cmd.Stdout = p.stdout
	cmd.Stderr = io.MultiWriter(p.stderr, testWriter{t})
	p.Process = controlplanetest.StartProcess(t, filepath.Base(bin), cmd)
	return p
}

// Terminate sends the process SIGTERM and returns its exit code, failing
// the test if it hasn't exited within 30s.
func (p *Process) Terminate(t testing.TB) int {
	t.Helper()
	require.NoError(t, p.Signal(syscall.SIGTERM))
	code, err := p.Wait(30 * time.Second)
	require.NoError(t, err, "its stderr:\n%s", p.stderr)
	return code
}

// Stdout returns what the process has written to its stdout.
func (p *Process) Stdout() string { return p.stdout.String() }

// Stderr returns what the process has written to its stderr.
func (p *Process) Stderr() string { return p.stderr.String() }

// Record is a log record as OpenTelemetry's stdoutlog exporter writes it,
// one JSON line each, such as to an App's stderr (the examples'
// BuildTelemetry does).
type Record struct {
	SeverityText string
	Body         struct{ Value any }
	Scope        struct{ Name string }
}

// Lines splits what an App wrote to its stderr into the log records of its
// telemetry and every other line, each as written.
func Lines(stderr string) (records []Record, other []string) {
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.SeverityText == "" {
			other = append(other, sc.Text())
			continue
		}
		records = append(records, r)
	}
	return records, other
}

// Bodies returns the distinct bodies of records, sorted.
func Bodies(records []Record) []string {
	seen := map[string]bool{}
	for _, r := range records {
		if s, ok := r.Body.Value.(string); ok {
			seen[s] = true
		}
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
