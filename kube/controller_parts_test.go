package kube

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus"
)

// TestNewControllerNamesABadMapAndADuplicateInformerAtOnce: NewController
// names every mistake in one error, so a Watches whose MapFunc is nil
// still counts as an informer of its resource, and a second informer of it
// is named in the same error rather than after the first is fixed.
func TestNewControllerNamesABadMapAndADuplicateInformerAtOnce(t *testing.T) {
	f := newFakeCluster(t)
	var n counter
	_, err := newController(&humus.Setup{}, f.clients(), nil, testSettings(), widgets(), noStatus(&n),
		Owns(deploymentGVR),
		Watches(deploymentGVR, MapFunc(nil)),
	)
	require.Error(t, err)
	require.Contains(t, err.Error(), "Watches(apps/v1, Resource=deployments)'s MapFunc is nil")
	require.Contains(t, err.Error(), "kube: Watches(apps/v1, Resource=deployments) names apps/v1, Resource=deployments, as Owns(apps/v1, Resource=deployments) does")
	require.Len(t, strings.Split(err.Error(), "\n"), 2, err.Error())

	// And an Owns given CacheObjects is still one informer of its
	// resource.
	_, err = newController(&humus.Setup{}, f.clients(), nil, testSettings(), widgets(), noStatus(&n),
		Owns(deploymentGVR, CacheObjects()),
		Watches(deploymentGVR, byConfigLabel),
	)
	require.Error(t, err)
	require.Contains(t, err.Error(), "as Owns(apps/v1, Resource=deployments) does")
}
