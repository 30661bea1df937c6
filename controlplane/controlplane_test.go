package controlplane

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeEnv makes the test binary act as a fake control-plane process
// (see TestMain): "etcd" serves /health on its --listen-client-urls.
const fakeEnv = "HUMUS_CONTROLPLANE_FAKE"

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) == "etcd" {
		fakeEtcd(os.Args[1:])
		return
	}
	os.Exit(m.Run())
}

// fakeEtcd answers 200 on /health at the --listen-client-urls address until
// it is killed.
func fakeEtcd(args []string) {
	var addr string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--listen-client-urls=http://"); ok {
			addr = v
		}
	}
	http.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"health":"true"}`) })
	fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, nil))
	os.Exit(1)
}

// writeScript writes an executable shell script.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// fakeBins returns a bin directory whose three binaries are the given
// shell-script bodies; each script first appends its pid to pids.
func fakeBins(t *testing.T, etcd, apiserver, kcm string) (dir, pids string) {
	t.Helper()
	dir = t.TempDir()
	pids = filepath.Join(t.TempDir(), "pids")
	for name, body := range map[string]string{Etcd: etcd, KubeAPIServer: apiserver, KubeControllerManager: kcm} {
		writeScript(t, filepath.Join(dir, name), "echo $$ >> "+pids+"\n"+body)
	}
	return dir, pids
}

// fakeEtcdBody is a script body that execs this test binary as a fake etcd.
func fakeEtcdBody(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return fakeEnv + "=etcd exec " + strconv.Quote(exe) + ` "$@"`
}

// assertAllDead fails the test if any pid in the file pids is still running.
func assertAllDead(t *testing.T, pids string) {
	t.Helper()
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatalf("no process was started: %v", err)
	}
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d is still running after Start failed (kill -0: %v)", pid, err)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// assertEmptyDir fails the test if dir has entries: the run's data directory
// was left behind.
func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left behind in the data directory: %s", e.Name())
	}
}

func TestPKIServingCertificateIsTrustedForLoopback(t *testing.T) {
	p, err := newPKI(time.Now(), net.ParseIP(serviceIP))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(p.CACert) {
		t.Fatal("CA PEM does not parse")
	}
	block, _ := pem.Decode(p.ServerCert)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"127.0.0.1", "::1", "localhost", "kubernetes.default.svc", serviceIP} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate not valid for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: roots}); err == nil {
		t.Error("serving certificate is valid for example.com")
	}
}

func TestPKIKeysParseAndFilesArePrivate(t *testing.T) {
	p, err := newPKI(time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"server key": p.ServerKey, "service-account key": p.SAKey} {
		block, _ := pem.Decode(b)
		if block == nil || block.Type != "PRIVATE KEY" {
			t.Fatalf("%s: not a PRIVATE KEY PEM block", name)
		}
		if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	block, _ := pem.Decode(p.SAPub)
	if _, err := x509.ParsePKIXPublicKey(block.Bytes); err != nil {
		t.Errorf("service-account public key: %v", err)
	}
	dir := t.TempDir()
	files, err := p.write(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{files.CACert, files.ServerCert, files.ServerKey, files.SAKey, files.SAPub} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
}

func TestBuildWithoutGoToolchainIsOneClearError(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Build(context.Background(), BuildOptions{BinDir: t.TempDir(), SourceDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "needs the Go toolchain") {
		t.Fatalf("Build without go in PATH: got %v, want an error about the Go toolchain", err)
	}
}

func TestBuildFailureReportsOutputTailAndLeavesNoBinary(t *testing.T) {
	fakeGo := filepath.Join(t.TempDir(), "go")
	writeScript(t, fakeGo, `echo "compiling..."; echo "undefined: frobnicate" >&2; exit 1`)
	binDir := t.TempDir()
	_, err := Build(context.Background(), BuildOptions{BinDir: binDir, SourceDir: t.TempDir(), Go: fakeGo})
	if err == nil {
		t.Fatal("Build with a failing go command succeeded")
	}
	for _, want := range []string{"go build go.etcd.io/etcd/server/v3", "exit status 1", "undefined: frobnicate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	entries, _ := os.ReadDir(binDir)
	for _, e := range entries {
		if e.Name() != ".lock" {
			t.Errorf("failed build left %s in the bin directory", e.Name())
		}
	}
}

func TestBuildStampsVersionAndRenamesIntoPlace(t *testing.T) {
	// A fake go that records its arguments and writes the -o file.
	dir := t.TempDir()
	fakeGo := filepath.Join(dir, "go")
	argsFile := filepath.Join(dir, "args")
	writeScript(t, fakeGo, `echo "$@" >> `+argsFile+`; echo "GOWORK=$GOWORK GOFLAGS=$GOFLAGS" >> `+argsFile+`; echo binary > "$3"`)
	binDir := t.TempDir()
	bins, err := Build(context.Background(), BuildOptions{BinDir: binDir, SourceDir: dir, Go: fakeGo})
	if err != nil {
		t.Fatal(err)
	}
	if err := bins.Check(); err != nil {
		t.Fatal(err)
	}
	args, _ := os.ReadFile(argsFile)
	for _, want := range []string{
		"-X k8s.io/component-base/version.gitVersion=" + Version,
		"-X k8s.io/component-base/version.gitMajor=1",
		"-X k8s.io/component-base/version.gitMinor=37",
		"k8s.io/kubernetes/cmd/kube-apiserver",
		"k8s.io/kubernetes/cmd/kube-controller-manager",
		"GOWORK=off GOFLAGS=-mod=mod",
	} {
		if !strings.Contains(string(args), want) {
			t.Errorf("go was not run with %q; its arguments:\n%s", want, args)
		}
	}
	entries, _ := os.ReadDir(binDir)
	if len(entries) != 4 { // three binaries and the lock file
		t.Errorf("bin directory holds %d entries, want 4 (no temporary files)", len(entries))
	}

	// A second Build finds them cached and does not run go.
	if _, err := Build(context.Background(), BuildOptions{BinDir: binDir, Go: filepath.Join(dir, "missing")}); err != nil {
		t.Fatalf("Build with cached binaries: %v", err)
	}
}

func TestStartWithoutBinariesSaysToBuild(t *testing.T) {
	_, err := Start(context.Background(), Options{BinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "not built") {
		t.Fatalf("got %v, want an error saying the binaries are not built", err)
	}
}

func TestStartPortInUseIsOneClearErrorAndStartsNothing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	bins, pids := fakeBins(t, "exec sleep 60", "exec sleep 60", "exec sleep 60")
	data := t.TempDir()
	_, err = Start(context.Background(), Options{BinDir: bins, DataDir: data, APIServerPort: port})
	want := fmt.Sprintf("port 127.0.0.1:%d for kube-apiserver is in use", port)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an error containing %q", err, want)
	}
	if _, err := os.Stat(pids); !os.IsNotExist(err) {
		t.Error("a process was started although a port was in use")
	}
	assertEmptyDir(t, data)
}

func TestStartProcessThatExitsAtStartReportsItsLog(t *testing.T) {
	bins, pids := fakeBins(t,
		`echo "etcdmain: flag provided but not defined: -bogus" >&2; exit 2`,
		"exec sleep 60", "exec sleep 60")
	data := t.TempDir()
	_, err := Start(context.Background(), Options{BinDir: bins, DataDir: data})
	if err == nil {
		t.Fatal("Start succeeded with an etcd that exits")
	}
	for _, want := range []string{"etcd exited: exit status 2", "flag provided but not defined: -bogus"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	assertAllDead(t, pids)
	assertEmptyDir(t, data)
}

func TestStartLaterProcessExitingKillsTheEarlierOnes(t *testing.T) {
	bins, pids := fakeBins(t, fakeEtcdBody(t),
		`echo "Error: --service-cluster-ip-range is invalid" >&2; exit 1`,
		"exec sleep 60")
	data := t.TempDir()
	_, err := Start(context.Background(), Options{BinDir: bins, DataDir: data})
	if err == nil {
		t.Fatal("Start succeeded with a kube-apiserver that exits")
	}
	for _, want := range []string{"kube-apiserver exited: exit status 1", "--service-cluster-ip-range is invalid"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	assertAllDead(t, pids) // the fake etcd too
	assertEmptyDir(t, data)
}

func TestStartProcessNeverReadyTimesOutWithItsLog(t *testing.T) {
	bins, pids := fakeBins(t, `echo "waiting for peers"; exec sleep 60`, "exec sleep 60", "exec sleep 60")
	data := t.TempDir()
	// 3s leaves the fake etcd time to print its line even under -race on a
	// busy machine: the timeout also covers making the PKI.
	_, err := Start(context.Background(), Options{BinDir: bins, DataDir: data, StartTimeout: 3 * time.Second})
	if err == nil {
		t.Fatal("Start succeeded with an etcd that is never healthy")
	}
	for _, want := range []string{"etcd was not ready within the start timeout", "waiting for peers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	assertAllDead(t, pids)
	assertEmptyDir(t, data)
}

func TestStartCancelledContextStopsEverything(t *testing.T) {
	started := filepath.Join(t.TempDir(), "started")
	if err := syscall.Mkfifo(started, 0o600); err != nil {
		t.Fatal(err)
	}
	bins, pids := fakeBins(t, fakeEtcdBody(t), "echo up > "+started+"; exec sleep 60", "exec sleep 60")
	data := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Reading the FIFO blocks until kube-apiserver has started.
		_, _ = os.ReadFile(started)
		cancel()
	}()
	_, err := Start(ctx, Options{BinDir: bins, DataDir: data})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	assertAllDead(t, pids)
	assertEmptyDir(t, data)
}

// TestPackageCounterCountsGoBuildVerboseOutput feeds go build -v's output,
// split across writes anywhere, to the counter: it counts the import paths,
// not a compile error's "# package" header nor its messages, and writes a
// line at each tenth of the total, with the time left at the rate so far.
func TestPackageCounterCountsGoBuildVerboseOutput(t *testing.T) {
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	now := start
	var out strings.Builder
	c := &packageCounter{name: "kube-apiserver", total: 20, start: start, progress: &out, now: func() time.Time { return now }}
	var verbose strings.Builder
	for i := range 4 {
		fmt.Fprintf(&verbose, "k8s.io/kubernetes/pkg/p%d\n", i)
	}
	verbose.WriteString("# k8s.io/kubernetes/pkg/broken\npkg/broken/x.go:3:2: undefined: frobnicate\n")
	b := []byte(verbose.String())
	for len(b) > 0 { // seven bytes a write: lines split across writes
		n := min(7, len(b))
		now = now.Add(time.Second)
		if _, err := c.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if c.compiled != 4 {
		t.Fatalf("counted %d packages, want 4", c.compiled)
	}
	// 2 of 20 is the first tenth, 4 of 20 the second; the 4th package's
	// line, 25 bytes each, ended in the 15th write (15s): 16 left at 3.75s
	// each is a minute.
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("progress lines %q, want one at 2 and one at 4 of 20", lines)
	}
	want := "controlplane: kube-apiserver: 4 of 20 packages compiled (20%), 15s so far, about 1m0s left"
	if lines[1] != want {
		t.Errorf("progress line %q, want %q", lines[1], want)
	}
}

// TestPackageCounterWithoutATotal: when go list could not count the
// packages, the counter still moves, a line every 200 packages.
func TestPackageCounterWithoutATotal(t *testing.T) {
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var out strings.Builder
	c := &packageCounter{name: "etcd", start: start, progress: &out, now: func() time.Time { return start.Add(30 * time.Second) }}
	if _, err := c.Write([]byte(strings.Repeat("go.etcd.io/p\n", 450))); err != nil {
		t.Fatal(err)
	}
	want := "controlplane: etcd: 200 packages compiled, 30s so far\ncontrolplane: etcd: 400 packages compiled, 30s so far\n"
	if out.String() != want {
		t.Errorf("progress %q, want %q", out.String(), want)
	}
}

func TestEtcdFlagsComeAfterStartsOwn(t *testing.T) {
	spec := etcdSpec("etcd", "/d", "http://127.0.0.1:1", "http://127.0.0.1:2", []string{"--quota-backend-bytes=8589934592", "--log-level=info"})
	n := len(spec.args)
	if n < 3 || spec.args[n-2] != "--quota-backend-bytes=8589934592" || spec.args[n-1] != "--log-level=info" {
		t.Fatalf("etcd's args = %q; want Options.EtcdFlags last, so that a flag given twice takes their value", spec.args)
	}
	if !slices.Contains(spec.args, "--data-dir="+filepath.Join("/d", "etcd")) {
		t.Fatalf("etcd's args = %q; want its own flags kept", spec.args)
	}
}
