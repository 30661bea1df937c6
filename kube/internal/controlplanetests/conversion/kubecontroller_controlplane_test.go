//go:build controlplane

package conversion_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
)

// The Gizmo at v1, as a kube Controller reconciling v1 declares it.
type (
	gizmoV1Spec struct {
		Size int64 `json:"size"`
	}
	gizmoV1Status struct{}
)

var gizmosV1 = kube.Resource[gizmoV1Spec, gizmoV1Status]{
	Group: "conversion.example.com", Version: "v1", Kind: "Gizmo", Plural: "gizmos", Scope: kube.Namespaced,
}

// controller is a kube Controller of the Gizmos at v1 in a namespace, and
// the spec.size of each Gizmo as its Reconciler last saw it.
type controller struct {
	ctrl *kube.Controller
	tel  *humustest.Telemetry
	mu   sync.Mutex
	seen map[string]int64
	// served is Serve's error, once it has returned.
	served chan error
}

func (c *controller) size(name string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.seen[name]
	return p, ok
}

// startController serves a kube Controller named name of the Gizmos at v1
// in ns until the test ends.
func startController(t *testing.T, cluster *controlplane.Cluster, ns, name string) *controller {
	t.Helper()
	c := &controller{tel: humustest.NewTelemetry(t), seen: map[string]int64{}}
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: c.tel.Telemetry}
	client, err := kube.NewClient(s, kube.Connection{Server: cluster.Server, TLS: cluster.TLS,
		Token: func(context.Context) (string, error) { return cluster.Token, nil }})
	require.NoError(t, err)
	settings := kube.DefaultSettings()
	settings.Name = name
	settings.Namespace = ns
	settings.LeaderElection.Namespace = ns
	settings.LeaderElection.Identity = name
	c.ctrl, err = kube.NewController(s, client, settings, gizmosV1,
		kube.ReconcilerFunc[gizmoV1Spec, gizmoV1Status](func(ctx context.Context, g kube.Object[gizmoV1Spec, gizmoV1Status]) (kube.Result[gizmoV1Status], error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.seen[g.Name] = g.Spec.Size
			return kube.Result[gizmoV1Status]{}, nil
		}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	c.served = make(chan error, 1)
	go func() { c.served <- c.ctrl.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, c.ctrl.Shutdown(context.Background()))
		<-c.served
	})
	return c
}
