package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Version is the Kubernetes version that [Build] builds and [Start] runs. It
// is the version k8s.io/kubernetes is required at in build/go.mod.
const Version = "v1.37.2"

// Names of the three binaries, as they are written to the bin directory.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
)

// target is one binary and its main package (resolved in the build module).
type target struct{ name, pkg string }

// targets returns the binaries in build order.
func targets() []target {
	return []target{
		{Etcd, "go.etcd.io/etcd/server/v3"},
		{KubeAPIServer, "k8s.io/kubernetes/cmd/kube-apiserver"},
		{KubeControllerManager, "k8s.io/kubernetes/cmd/kube-controller-manager"},
	}
}

// DefaultBinDir returns where [Build] writes and [Start] looks for the
// binaries by default: os.UserCacheDir()/humus-kube/controlplane/<Version>/bin
// (for example ~/.cache/humus-kube/controlplane/v1.37.2/bin on Linux). It
// returns the error of os.UserCacheDir when there is no cache directory
// (neither $XDG_CACHE_HOME nor $HOME is set).
func DefaultBinDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("controlplane: no user cache directory for the binaries (set BinDir): %w", err)
	}
	return filepath.Join(dir, "humus-kube", "controlplane", Version, "bin"), nil
}

// DefaultSourceDir returns the directory of the build module
// (github.com/z5labs/humus/controlplane/build) found from this package's
// source file, or an error if that file is not in a source tree that holds
// it (a build with -trimpath, or the package read from the module cache,
// where nested modules are left out).
func DefaultSourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("controlplane: cannot find this package's source directory; set BuildOptions.SourceDir to the controlplane/build module")
	}
	dir := filepath.Join(filepath.Dir(file), "build")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("controlplane: the build module is not at %s (set BuildOptions.SourceDir to a checkout's controlplane/build): %w", dir, err)
	}
	return dir, nil
}

// BuildOptions configures [Build]. The zero value builds into
// [DefaultBinDir] from [DefaultSourceDir] with the go command found in
// $PATH, printing nothing.
type BuildOptions struct {
	// BinDir is where the binaries are written. Default: DefaultBinDir().
	BinDir string
	// SourceDir is the directory of the build module (controlplane/build),
	// whose go.mod pins k8s.io/kubernetes and etcd. Default: DefaultSourceDir().
	SourceDir string
	// Go is the go command to build with, a name looked up in $PATH or a
	// path. Default: "go".
	Go string
	// Progress receives one line when each binary starts building, with
	// how many packages it compiles and about how long that takes, a line
	// at each tenth of them compiled, with the time so far and about how
	// long is left, and one line when it is done, with the elapsed time.
	// Default: nothing is printed.
	Progress io.Writer
}

// Binaries holds the paths of the three binaries.
type Binaries struct {
	Etcd                  string
	KubeAPIServer         string
	KubeControllerManager string
}

// BinariesIn returns the paths the binaries have in dir.
func BinariesIn(dir string) Binaries {
	return Binaries{
		Etcd:                  filepath.Join(dir, Etcd),
		KubeAPIServer:         filepath.Join(dir, KubeAPIServer),
		KubeControllerManager: filepath.Join(dir, KubeControllerManager),
	}
}

// Check returns an error naming each binary that is missing or not an
// executable file, or nil when all three are there.
func (b Binaries) Check() error {
	var errs []error
	for _, p := range []string{b.Etcd, b.KubeAPIServer, b.KubeControllerManager} {
		if err := checkExecutable(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("controlplane: binary %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("controlplane: binary %s is not an executable file", path)
	}
	return nil
}

// Build builds etcd, kube-apiserver and kube-controller-manager at [Version]
// into opts.BinDir, skipping each binary that is already there, and returns
// their paths. A cold build takes minutes (about 5 on 2 cores); with the
// binaries cached it only checks that they exist.
//
// Each binary is built with `go build` in the build module with GOWORK=off,
// GOFLAGS=-mod=mod and CGO_ENABLED=0, its version stamped into
// k8s.io/component-base/version with -ldflags -X (so /version reports
// Version rather than v0.0.0-master), into a temporary file that is renamed
// into place only when the build succeeded: an interrupted build never
// leaves a partial binary. Concurrent Builds into the same directory (test
// packages run in parallel) wait for each other by a lock file.
//
// Errors: a missing go command, a missing build module, or a failed build,
// each as one error; a failed build's error ends with the tail of its output.
// When ctx is done the build is stopped and ctx's error returned.
func Build(ctx context.Context, opts BuildOptions) (Binaries, error) {
	binDir := opts.BinDir
	if binDir == "" {
		d, err := DefaultBinDir()
		if err != nil {
			return Binaries{}, err
		}
		binDir = d
	}
	bins := BinariesIn(binDir)
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}

	var todo []target
	for _, b := range targets() {
		if checkExecutable(filepath.Join(binDir, b.name)) != nil {
			todo = append(todo, b)
		}
	}
	if len(todo) == 0 {
		return bins, nil
	}

	goCmd := opts.Go
	if goCmd == "" {
		goCmd = "go"
	}
	goPath, err := exec.LookPath(goCmd)
	if err != nil {
		return Binaries{}, fmt.Errorf("controlplane: building the control plane needs the Go toolchain: %w", err)
	}
	srcDir := opts.SourceDir
	if srcDir == "" {
		d, err := DefaultSourceDir()
		if err != nil {
			return Binaries{}, err
		}
		srcDir = d
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("controlplane: creating the bin directory: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(binDir, ".lock"))
	if err != nil {
		return Binaries{}, fmt.Errorf("controlplane: locking the bin directory %s: %w", binDir, err)
	}
	defer unlock()

	ldflags := versionLDFlags(time.Now())
	start := time.Now()
	built := 0
	for _, b := range todo {
		out := filepath.Join(binDir, b.name)
		// Another process may have built it while this one waited for the lock.
		if checkExecutable(out) == nil {
			continue
		}
		fmt.Fprintf(progress, "controlplane: building %s for Kubernetes %s (from %s)\n", b.name, Version, b.pkg)
		t0 := time.Now()
		// With the packages cached, only the main package and the link are
		// left, tens of seconds: no progress to speak of.
		var counter io.Writer = io.Discard
		if total := stalePackages(ctx, goPath, srcDir, b.pkg); total == 0 || total >= minProgress {
			if total > 0 {
				fmt.Fprintf(progress, "controlplane: %s: %d packages to compile, about %s on 2 cores, then the link\n",
					b.name, total, expectedBuildTime(total).Round(time.Second))
			}
			counter = &packageCounter{name: b.name, total: total, start: t0, progress: progress, now: time.Now}
		}
		if err := goBuild(ctx, goPath, srcDir, b.pkg, out, ldflags, counter); err != nil {
			return Binaries{}, err
		}
		fmt.Fprintf(progress, "controlplane: built %s in %s\n", b.name, time.Since(t0).Round(100*time.Millisecond))
		built++
	}
	if built == 0 {
		return bins, nil
	}
	fmt.Fprintf(progress, "controlplane: built the control plane %s into %s in %s\n", Version, binDir, time.Since(start).Round(100*time.Millisecond))
	return bins, nil
}

// versionLDFlags returns the -ldflags that stamp k8s.io/component-base/version
// the way Kubernetes' hack/lib/version.sh does.
func versionLDFlags(now time.Time) string {
	major, minor := "", ""
	if parts := strings.SplitN(strings.TrimPrefix(Version, "v"), ".", 3); len(parts) >= 2 {
		major, minor = parts[0], parts[1]
	}
	vars := []struct{ name, value string }{
		{"gitVersion", Version},
		{"gitCommit", ""}, // unknown from a module; the source says "$Format:%H$"
		{"gitMajor", major},
		{"gitMinor", minor},
		{"gitTreeState", "clean"},
		{"buildDate", now.UTC().Format("2006-01-02T15:04:05Z")},
	}
	var b strings.Builder
	b.WriteString("-s -w")
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, v := range vars {
			fmt.Fprintf(&b, " -X %s.%s=%s", pkg, v.name, v.value)
		}
	}
	return b.String()
}

// goEnv is the environment of the go commands Build runs in the build
// module.
func goEnv(cmd *exec.Cmd) []string {
	return append(cmd.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
}

// stalePackages returns how many packages go build of pkg will compile:
// pkg and its dependencies, the standard library's included, that the
// build cache doesn't hold (go list -deps, and each package's Stale), or 0
// if go list fails, which the build then reports. On a cold machine it
// also downloads the build module's modules, which the build would.
func stalePackages(ctx context.Context, goPath, srcDir, pkg string) int {
	cmd := exec.CommandContext(ctx, goPath, "list", "-e", "-deps", "-f", "{{if .Stale}}{{.ImportPath}}{{end}}", pkg)
	cmd.Dir = srcDir
	cmd.Env = goEnv(cmd)
	setProcessGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

// minProgress is the fewest packages to compile that Build reports the
// progress of.
const minProgress = 50

// expectedBuildTime is about how long compiling n packages takes on 2
// cores with nothing cached: the three binaries' 2,544 packages (etcd 565,
// kube-apiserver 2,079, kube-controller-manager 2,440, shared in part) take
// about 5 minutes, Build's figure, about 8 packages a second. It is a first
// guess: the progress lines then say what is left at the rate measured.
func expectedBuildTime(n int) time.Duration {
	return time.Duration(n) * time.Second / 8
}

// packageCounter is go build -v's output: it counts the packages the build
// compiles, one import path a line, and writes a line to progress at each
// tenth of total compiled, with the time so far and the time it expects
// is left, from the rate so far. Any other line, such as a compile error
// under its "# package" line, is not counted. total 0 is unknown: the
// counter then writes a line every 200 packages.
type packageCounter struct {
	name     string
	total    int
	start    time.Time
	progress io.Writer
	now      func() time.Time

	mu       sync.Mutex
	partial  []byte // a line not yet ended
	compiled int
	reported int // the last tenth (or, with no total, 200) reported
}

// Write is io.Writer's.
func (c *packageCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partial = append(c.partial, p...)
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(c.partial[:i]))
		c.partial = c.partial[i+1:]
		if line == "" || strings.HasPrefix(line, "#") || strings.ContainsAny(line, " \t:") {
			continue
		}
		c.compiled++
		c.report()
	}
	return len(p), nil
}

// report writes a progress line when the count reaches a next step.
func (c *packageCounter) report() {
	elapsed := c.now().Sub(c.start)
	if c.total <= 0 || c.compiled > c.total {
		if step := c.compiled / 200; step > c.reported {
			c.reported = step
			fmt.Fprintf(c.progress, "controlplane: %s: %d packages compiled, %s so far\n", c.name, c.compiled, elapsed.Round(time.Second))
		}
		return
	}
	step := c.compiled * 10 / c.total
	if step <= c.reported {
		return
	}
	c.reported = step
	left := time.Duration(float64(elapsed) / float64(c.compiled) * float64(c.total-c.compiled))
	fmt.Fprintf(c.progress, "controlplane: %s: %d of %d packages compiled (%d%%), %s so far, about %s left\n",
		c.name, c.compiled, c.total, c.compiled*100/c.total, elapsed.Round(time.Second), left.Round(time.Second))
}

// goBuild builds pkg into out through a temporary file in out's directory,
// with go build -v, whose list of the packages it compiles goes to
// counter too.
func goBuild(ctx context.Context, goPath, srcDir, pkg, out, ldflags string, counter io.Writer) error {
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return fmt.Errorf("controlplane: building %s: %w", pkg, err)
	}
	tmpName := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpName) // no-op after the rename

	cmd := exec.CommandContext(ctx, goPath, "build", "-o", tmpName, "-ldflags", ldflags, "-v", pkg)
	cmd.Dir = srcDir
	cmd.Env = goEnv(cmd)
	setProcessGroup(cmd)
	var output tailBuffer
	cmd.Stdout = &output
	cmd.Stderr = io.MultiWriter(&output, counter)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("controlplane: building %s: %w", pkg, context.Cause(ctx))
		}
		return fmt.Errorf("controlplane: go build %s in %s failed: %w\n%s", pkg, srcDir, err, output.Tail(30))
	}
	if err := os.Chmod(tmpName, 0o755); err != nil {
		return fmt.Errorf("controlplane: building %s: %w", pkg, err)
	}
	if err := os.Rename(tmpName, out); err != nil {
		return fmt.Errorf("controlplane: building %s: %w", pkg, err)
	}
	return nil
}

// tailBuffer keeps the last 64 KiB written to it; it is safe for concurrent
// writes (a command's stdout and stderr).
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailBufferSize = 64 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailBufferSize; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// Tail returns the last n lines written, indented for an error message.
func (t *tailBuffer) Tail(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tailLines(t.buf, n)
}

// tailLines returns the last n lines of b, each indented by two spaces.
func tailLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(bytes.ToValidUTF8(b, []byte("?"))), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "  (no output)"
	}
	return "  " + strings.Join(lines, "\n  ")
}
