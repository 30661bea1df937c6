package controlplane

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// A user's binaries of another Kubernetes version are reported as such,
// each by what its --version printed; a binary that fails is named.
func TestDescribeBinariesReportsEachVersion(t *testing.T) {
	dir := t.TempDir()
	writeScript(t, filepath.Join(dir, Etcd), `echo "etcd Version: 3.5.21"; echo "Git SHA: x"`)
	writeScript(t, filepath.Join(dir, KubeAPIServer), `echo "Kubernetes v1.33.0"`)
	writeScript(t, filepath.Join(dir, KubeControllerManager), `echo "Kubernetes `+Version+`"`)
	got := DescribeBinaries(context.Background(), dir)
	for _, want := range []string{
		"controlplane: running the binaries in " + dir + ": etcd (etcd Version: 3.5.21), kube-apiserver (Kubernetes v1.33.0), kube-controller-manager (Kubernetes " + Version + ")",
		"this package starts them with the flags of " + Version + ", which another version may not take",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not contain %q", got, want)
		}
	}

	writeScript(t, filepath.Join(dir, KubeAPIServer), `echo "Kubernetes `+Version+`"`)
	if got := DescribeBinaries(context.Background(), dir); strings.Contains(got, "another version") {
		t.Errorf("binaries at %s are reported as another version: %q", Version, got)
	}

	writeScript(t, filepath.Join(dir, KubeAPIServer), `exit 3`)
	if got := DescribeBinaries(context.Background(), dir); !strings.Contains(got, "kube-apiserver (controlplane: "+filepath.Join(dir, KubeAPIServer)+" --version: exit status 3)") {
		t.Errorf("a failing binary isn't named: %q", got)
	}
}

// Start names the binaries missing in a directory a user gave, such as
// envtest's assets, which have no kube-controller-manager, and says how
// to build only those.
func TestStartWithAssetsMissingABinaryNamesIt(t *testing.T) {
	dir := t.TempDir()
	writeScript(t, filepath.Join(dir, Etcd), "exit 0")
	writeScript(t, filepath.Join(dir, KubeAPIServer), "exit 0")
	_, err := Start(context.Background(), Options{BinDir: dir})
	for _, want := range []string{
		"binary " + filepath.Join(dir, KubeControllerManager),
		"envtest's assets have no kube-controller-manager",
		"controlplane build -bin " + dir + "` builds only the missing ones into it",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error containing %q", err, want)
		}
	}
}
