package delegatedauth

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// A caller the API server authenticates chooses the verb (the method) and
// the path: a 512 KiB method was a 512 KiB key in the decisions' cache, so
// CacheSize denied callers could hold 2 GiB there for DenyCacheTTL. Each
// key is now 32 bytes, whatever the request.
func TestADecisionsKeyIsItsSHA256WhateverTheRequestsLength(t *testing.T) {
	h := &handler{
		reviews:   denyAll{},
		decisions: cache.NewLRUExpireCache(CacheSize),
		log:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	user := &authnv1.UserInfo{Username: "nobody", Groups: []string{authenticatedGroup}}
	long := strings.Repeat("x", 512<<10)
	allowed, err := h.authorize(t.Context(), user, long, "/metrics")
	require.NoError(t, err)
	require.False(t, allowed, "the fake reviews allow nothing")
	_, err = h.authorize(t.Context(), user, "get", "/"+long)
	require.NoError(t, err)

	keys := h.decisions.Keys()
	require.Len(t, keys, 2, "a decision for each")
	for _, k := range keys {
		require.IsType(t, [32]byte{}, k)
	}
}

// denyAll answers every SubjectAccessReview with a deny.
type denyAll struct {
	authorizationv1.SubjectAccessReviewInterface // nil: only Create is called
}

func (denyAll) Create(_ context.Context, sar *authzv1.SubjectAccessReview, _ metav1.CreateOptions) (*authzv1.SubjectAccessReview, error) {
	out := sar.DeepCopy()
	out.Status = authzv1.SubjectAccessReviewStatus{Allowed: false}
	return out, nil
}
