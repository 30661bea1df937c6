package kube

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	corev1 "k8s.io/api/core/v1"
)

type podSpec struct {
	Resources corev1.ResourceRequirements `json:"resources"`
	Ports     []struct {
		Port int32 `json:"port"`
	} `json:"ports,omitempty"`
}

type podObject = Object[podSpec, widgetStatus]

func TestADeletionBehindAnUndecodableObjectSaysSoOnTheObject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const finalizer = "test.example.com/cleanup"
		bad := newWidget("bad", 1)
		bad.Object["spec"] = map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1Gx"}}}
		bad.SetFinalizers([]string{finalizer})
		f := newFakeCluster(t, bad)
		f.markDeleted(t, widgetGVR, testNamespace, "bad")
		var finalized atomic.Int32
		w := widgets()
		r := Resource[podSpec, widgetStatus]{Group: w.Group, Version: w.Version, Kind: w.Kind, Plural: w.Plural, Scope: w.Scope}
		settings := testSettings()
		settings.RetryMaxDelay = time.Second
		c, err := newController(&humus.Setup{}, f.clients(), nil, settings, r,
			ReconcilerFunc[podSpec, widgetStatus](func(ctx context.Context, p podObject) (Result[widgetStatus], error) {
				return Result[widgetStatus]{}, nil
			}),
			Finalize(finalizer, func(ctx context.Context, p podObject) error {
				finalized.Add(1)
				return nil
			}))
		require.NoError(t, err)
		s := serve(t, c)
		time.Sleep(time.Minute) // retried with backoff, up to RetryMaxDelay
		synctest.Wait()

		require.Zero(t, finalized.Load())
		applies := f.metadataApplies()
		require.Len(t, applies, 1, "annotated once, however often the key is retried")
		md := applies[0].body["metadata"].(map[string]any)
		require.Equal(t, []any{finalizer}, md["finalizers"], "the finalizer stays")
		note := md["annotations"].(map[string]any)[finalizer].(string)
		require.Contains(t, note, "not finalized: kube: decoding Widget default/bad: field spec.resources.limits.memory")
		require.NoError(t, s.stop(t))
	})
}
