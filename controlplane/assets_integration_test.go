//go:build controlplane

package controlplane_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/controlplanetest"
)

// TestStartRunsTheBinariesOfKubebuilderAssets points KUBEBUILDER_ASSETS
// at a directory of its own holding links to the binaries the build
// cached, as a user points it at envtest's: controlplanetest.Start runs
// them from there, builds nothing into it (only the three links are
// there), and the API server answers; their versions are reported as
// this package's.
func TestStartRunsTheBinariesOfKubebuilderAssets(t *testing.T) {
	if controlplanetest.External() {
		t.Skip("an existing cluster is used")
	}
	cached, err := controlplane.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.BinariesIn(cached).Check(); err != nil {
		t.Skipf("the binaries aren't built: %v", err)
	}
	assets := t.TempDir()
	names := []string{controlplane.Etcd, controlplane.KubeAPIServer, controlplane.KubeControllerManager}
	for _, name := range names {
		if err := os.Symlink(filepath.Join(cached, name), filepath.Join(assets, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(controlplane.AssetsEnv, assets)

	described := controlplane.DescribeBinaries(context.Background(), assets)
	if !strings.Contains(described, "kube-apiserver (Kubernetes "+controlplane.Version+")") || strings.Contains(described, "another version") {
		t.Errorf("the cached binaries are described as %q", described)
	}

	c := controlplanetest.Start(t)
	kc, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	v, err := kc.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != controlplane.Version {
		t.Errorf("the API server is %s, want %s", v.GitVersion, controlplane.Version)
	}
	entries, err := os.ReadDir(assets)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(names) {
		t.Errorf("the assets directory holds %d entries, want the %d links alone: something was built or written into it", len(entries), len(names))
	}
}
