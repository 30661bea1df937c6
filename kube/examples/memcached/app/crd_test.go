package app_test

import (
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus/kube/examples/memcached/app"
)

var update = flag.Bool("update", false, "rewrite the golden CRD")

// TestMemcachedCRD keeps ../deploy/crds/memcacheds.cache.example.com.yaml
// true to the Go types: a change to MemcachedSpec, MemcachedStatus or their
// Rules that isn't in the YAML fails here. go test -run TestMemcachedCRD
// -update rewrites the file.
func TestMemcachedCRD(t *testing.T) {
	got, err := app.Memcached.CRDYAML()
	require.NoError(t, err)
	const golden = "../deploy/crds/memcacheds.cache.example.com.yaml"
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}
