package controlplane

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// AssetsEnv is the environment variable that names a directory of
// binaries a user already has, as envtest (controller-runtime's
// setup-envtest) names its assets: KUBEBUILDER_ASSETS. The controlplane
// command and controlplanetest.Start read it and run the binaries there
// rather than build them; this package reads no environment variable.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// MissingAssetsHint says what to do when a directory of a user's binaries
// lacks some: envtest's assets have etcd and kube-apiserver but no
// kube-controller-manager.
func MissingAssetsHint(dir string) string {
	return fmt.Sprintf("a directory of binaries needs etcd, kube-apiserver and kube-controller-manager (envtest's assets have no kube-controller-manager): "+
		"`go run github.com/z5labs/humus/controlplane/cmd/controlplane build -bin %s` builds only the missing ones into it, or unset %s to build all three into the user cache", dir, AssetsEnv)
}

// BinaryVersion is what one binary's --version printed, or why it failed.
type BinaryVersion struct {
	Name    string // Etcd, KubeAPIServer or KubeControllerManager
	Path    string
	Version string // the first line --version printed, such as "Kubernetes v1.37.2"
	Err     error
}

// Versions runs each of b's binaries with --version, for at most 10
// seconds each, and returns what each printed, in the order etcd,
// kube-apiserver, kube-controller-manager. A binary that fails has its
// error in Err.
func (b Binaries) Versions(ctx context.Context) []BinaryVersion {
	out := make([]BinaryVersion, 0, 3)
	for _, bin := range []struct{ name, path string }{{Etcd, b.Etcd}, {KubeAPIServer, b.KubeAPIServer}, {KubeControllerManager, b.KubeControllerManager}} {
		v := BinaryVersion{Name: bin.name, Path: bin.path}
		vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		printed, err := exec.CommandContext(vctx, bin.path, "--version").Output()
		cancel()
		if err != nil {
			v.Err = fmt.Errorf("controlplane: %s --version: %w", bin.path, err)
		} else {
			v.Version, _, _ = strings.Cut(strings.TrimSpace(string(printed)), "\n")
		}
		out = append(out, v)
	}
	return out
}

// DescribeBinaries returns one line naming the version of each binary in
// dir ([Binaries.Versions]), and saying so when kube-apiserver's or
// kube-controller-manager's isn't [Version], the version whose flags
// [Start] gives them, or one fails: for a run of binaries a user already
// has, which the controlplane command and controlplanetest.Start print.
func DescribeBinaries(ctx context.Context, dir string) string {
	return describeVersions(dir, BinariesIn(dir).Versions(ctx))
}

func describeVersions(dir string, vs []BinaryVersion) string {
	parts := make([]string, 0, len(vs))
	other := false
	for _, v := range vs {
		switch {
		case v.Err != nil:
			parts = append(parts, v.Name+" ("+v.Err.Error()+")")
			other = true
		default:
			parts = append(parts, v.Name+" ("+v.Version+")")
			if v.Name != Etcd && !strings.HasSuffix(v.Version, " "+Version) {
				other = true
			}
		}
	}
	line := fmt.Sprintf("controlplane: running the binaries in %s: %s", dir, strings.Join(parts, ", "))
	if other {
		line += fmt.Sprintf("; this package starts them with the flags of %s, which another version may not take", Version)
	}
	return line
}
