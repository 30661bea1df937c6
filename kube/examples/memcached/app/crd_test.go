package app_test

import (
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus/kube/examples/memcached/app"
)

var update = flag.Bool("update", false, "rewrite the golden files: the CRD, the webhook configurations and the RBAC")

// golden requires the file path to hold got, after writing got to it when
// -update is given.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), path)
}

// TestMemcachedCRD keeps ../deploy/crds/memcacheds.cache.example.com.yaml
// true to the Go types: a change to MemcachedSpec, MemcachedStatus or their
// Rules that isn't in the YAML fails here. go test -run TestMemcachedCRD
// -update rewrites the file.
func TestMemcachedCRD(t *testing.T) {
	got, err := app.Memcached.CRDYAML()
	require.NoError(t, err)
	golden(t, "../deploy/crds/memcacheds.cache.example.com.yaml", got)
}
