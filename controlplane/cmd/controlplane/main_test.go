package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/z5labs/humus/controlplane"
)

// up with KUBEBUILDER_ASSETS, or -assets, runs the binaries there and
// builds nothing: a binary missing there is an error naming it, where up
// without them would build it.
func TestUpWithAssetsBuildsNothing(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{controlplane.Etcd, controlplane.KubeAPIServer} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"up"}, {"up", "-assets", dir}} {
		t.Setenv(controlplane.AssetsEnv, "")
		if len(args) == 1 {
			t.Setenv(controlplane.AssetsEnv, dir)
		}
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 1 {
			t.Fatalf("%v: exit code %d, want 1; stderr: %s", args, code, stderr.String())
		}
		for _, want := range []string{
			"controlplane up -assets " + dir,
			"binary " + filepath.Join(dir, controlplane.KubeControllerManager),
			"envtest's assets have no kube-controller-manager",
		} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("%v: stderr %q does not contain %q", args, stderr.String(), want)
			}
		}
		if strings.Contains(stderr.String(), "building") {
			t.Errorf("%v: up built: %s", args, stderr.String())
		}
		if _, err := os.Stat(filepath.Join(dir, controlplane.KubeControllerManager)); !os.IsNotExist(err) {
			t.Errorf("%v: something was written into the assets directory: %v", args, err)
		}
	}
}

// -bin and -assets are one or the other.
func TestUpTakesBinOrAssets(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"up", "-bin", t.TempDir(), "-assets", t.TempDir()}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit code %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "give -bin (built if needed) or -assets (run as they are), not both") {
		t.Errorf("stderr: %s", stderr.String())
	}
}
