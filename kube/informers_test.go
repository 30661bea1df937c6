package kube

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func TestDetachedWatchOutlivesItsContextUntilStopped(t *testing.T) {
	var inner context.Context
	start := detachedWatch(func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
		inner = ctx
		return watch.NewFake(), nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	w, err := start(ctx, metav1.ListOptions{})
	require.NoError(t, err)

	cancel()
	require.NoError(t, inner.Err(), "a started watch's request lives on after the informer's context ends")
	w.Stop()
	require.ErrorIs(t, inner.Err(), context.Canceled, "until the reflector stops it")
}

func TestDetachedWatchIsCancelledWhileItStarts(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	start := detachedWatch(func(inner context.Context, _ metav1.ListOptions) (watch.Interface, error) {
		cancel() // the informer stops while the watch waits for its response
		<-inner.Done()
		return nil, inner.Err()
	})
	_, err := start(ctx, metav1.ListOptions{})
	require.ErrorIs(t, err, context.Canceled)
}
