//go:build controlplane

package upstream_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube/internal/upstream"
)

// TestTableIsTheAPIServers fails when the embedded table differs from the
// one made from the /openapi/v3 documents of the API server the local
// control plane runs, of the release in go.mod: after k8s.io/api moves,
// rewrite it with go generate in the kube module.
func TestTableIsTheAPIServers(t *testing.T) {
	c := controlplanetest.Start(t)
	docs, err := upstream.Fetch(t.Context(), c.RESTConfig())
	require.NoError(t, err)
	fresh, err := upstream.Generate(docs)
	require.NoError(t, err)
	embedded := upstream.Embedded()
	diffs, err := upstream.Diff(embedded, fresh)
	require.NoError(t, err)
	require.Empty(t, diffs, "kube/internal/upstream/types.json.gz (the first) is stale against the API server's (the second): run go generate in the kube module")
	t.Logf("the table: %d bytes, gzipped", len(embedded))
}
