// Package controlplanetest starts a real local control plane for a test
// (see package controlplane), or connects to an existing cluster named by
// the environment variable HUMUS_TEST_KUBECONFIG, so that the same tests run
// against kind or k3s.
//
// Tests that need it carry the build tag controlplane:
//
//	//go:build controlplane
package controlplanetest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/z5labs/humus/controlplane"
)

// KubeconfigEnv is the environment variable that, when set to the path of
// a kubeconfig, makes Start connect to that cluster instead of starting one.
const KubeconfigEnv = "HUMUS_TEST_KUBECONFIG"

// Option changes the controlplane.Options that Start starts with. Options
// are ignored when connecting to an existing cluster.
type Option func(*controlplane.Options)

// WithWorkloads runs deployment-controller and replicaset-controller too.
func WithWorkloads() Option {
	return func(o *controlplane.Options) { o.Workloads = true }
}

// WithControllers adds kube-controller-manager controllers by name (for
// example "job-controller").
func WithControllers(names ...string) Option {
	return func(o *controlplane.Options) { o.ExtraControllers = append(o.ExtraControllers, names...) }
}

// WithAPIServerFlags adds flags to kube-apiserver's (Options.APIServerFlags),
// for example "--enable-admission-plugins=OwnerReferencesPermissionEnforcement".
func WithAPIServerFlags(flags ...string) Option {
	return func(o *controlplane.Options) { o.APIServerFlags = append(o.APIServerFlags, flags...) }
}

// External reports whether Start connects to an existing cluster, named by
// HUMUS_TEST_KUBECONFIG, on which the Options (an admission plugin, a
// controller) may not hold: a test of what they do skips there.
func External() bool { return os.Getenv(KubeconfigEnv) != "" }

// WithOptions replaces the options wholesale.
func WithOptions(opts controlplane.Options) Option {
	return func(o *controlplane.Options) { *o = opts }
}

// Start returns a cluster for the test. With HUMUS_TEST_KUBECONFIG set, it
// is the existing cluster of that kubeconfig (controlplane.FromKubeconfig),
// and nothing is stopped at the end. Otherwise, with KUBEBUILDER_ASSETS
// (controlplane.AssetsEnv) set and no BinDir among the options, it runs
// the binaries in that directory, such as envtest's, and builds nothing (a
// binary missing there fails the test, naming it); else it builds the
// binaries if they are not cached (controlplane.Build, progress through
// t.Log; a cold build takes minutes). It starts a control plane (controlplane.Start) and
// registers its Stop with t.Cleanup; the time each process took to be ready
// is logged. Any error fails the test at once
// (t.Fatal).
func Start(t testing.TB, opts ...Option) *controlplane.Cluster {
	t.Helper()
	if path := os.Getenv(KubeconfigEnv); path != "" {
		c, err := controlplane.FromKubeconfig(path)
		if err != nil {
			t.Fatalf("controlplanetest: %s: %v", KubeconfigEnv, err)
		}
		return c
	}
	var o controlplane.Options
	for _, opt := range opts {
		opt(&o)
	}
	if o.Progress == nil {
		o.Progress = logWriter{t}
	}
	ctx := context.Background()
	if o.BinDir == "" && os.Getenv(controlplane.AssetsEnv) != "" {
		o.BinDir = os.Getenv(controlplane.AssetsEnv)
		t.Log(controlplane.DescribeBinaries(ctx, o.BinDir))
	} else if _, err := controlplane.Build(ctx, controlplane.BuildOptions{BinDir: o.BinDir, Progress: logWriter{t}}); err != nil {
		t.Fatal(err)
	}
	c, err := controlplane.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// logWriter writes each line to t.Log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// StartProcess starts cmd as a controlplane.Process named name (see
// controlplane.StartProcess), such as an App run as a subprocess that the
// test pauses, continues, signals or kills, and kills it (its whole process
// group) when the test ends, if it still runs. Any error fails the test at
// once (t.Fatal).
func StartProcess(t testing.TB, name string, cmd *exec.Cmd) *controlplane.Process {
	t.Helper()
	p, err := controlplane.StartProcess(name, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	return p
}
