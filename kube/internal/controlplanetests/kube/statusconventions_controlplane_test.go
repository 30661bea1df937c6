//go:build controlplane

package kube_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	lua "github.com/yuin/gopher-lua"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
)

// A Beacon's spec.mode says what its Reconciler does: "hold…" waits for
// the test to release the object's generation, then succeeds; "fail"
// returns an error, retried; "terminal" returns a kube.Terminal error;
// "scheduled" succeeds with a Result.After of an hour, as a CronJob's
// next run; anything else succeeds.
type beaconSpec struct {
	Mode string `json:"mode"`
}

type beaconStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

type beacon = kube.Object[beaconSpec, beaconStatus]

var beaconStatusRules beaconStatus

var beacons = kube.Resource[beaconSpec, beaconStatus]{
	Group:             "controller.humus.example.com",
	Version:           "v1",
	Kind:              "Beacon",
	Plural:            "beacons",
	Scope:             kube.Namespaced,
	StatusConventions: true,
	Rules: []kube.TypeRules{
		kube.Rules(&beaconStatusRules, kube.Field(&beaconStatusRules.Conditions).ListMap("type")),
	},
}

// argoHealthKey is the argocd-cm key of the Memcached example's health
// check, which is the same for any kind with StatusConventions.
const argoHealthKey = "resource.customizations.health.cache.example.com_Memcached"

// TestStatusConventionsAgainstTheAPIServer judges one object through its
// life with the three tools that read a custom resource's status: the real
// kstatus (Flux's), kubectl wait --for=condition=Ready, and Argo CD's
// health check as the example ships it, run by gopher-lua. The API server
// defaults status.observedGeneration to 0 (the CRD's default), so a new
// object is in progress before its first reconcile is done; a spec change
// is in progress until reconciled; an error being retried is in progress;
// a Terminal error is a failure; a success is ready, and so is a success
// that asks to be reconciled again in an hour.
func TestStatusConventionsAgainstTheAPIServer(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl isn't installed")
	}
	cluster, dyn, _ := startWithCRD(t, beacons)
	h := startBeacons(t, cluster, dyn)

	// A new object, its first reconcile under way.
	h.hold("b1", 1)
	h.create("b1", "hold")
	h.entered("b1", 1)
	u := h.get("b1")
	og, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	require.Zero(t, og, "the CRD's default")
	h.judge(u, kstatus.InProgressStatus, "Progressing")
	h.notReadyWithin("b1")
	waited := h.waitReady("b1")

	// Its first reconcile done.
	h.release("b1", 1)
	u = h.until("b1", observed(1, kube.ConditionReady, metav1.ConditionTrue))
	h.judge(u, kstatus.CurrentStatus, "Healthy")
	require.NoError(t, <-waited, "kubectl wait returns once it is Ready")

	// A spec change, its reconcile under way: Ready is still True, of
	// generation 1.
	h.hold("b1", 2)
	h.setMode("b1", "hold-again")
	h.entered("b1", 2)
	u = h.get("b1")
	require.Equal(t, int64(2), u.GetGeneration())
	h.judge(u, kstatus.InProgressStatus, "Progressing")
	h.notReadyWithin("b1")
	waited = h.waitReady("b1")
	h.release("b1", 2)
	u = h.until("b1", observed(2, kube.ConditionReady, metav1.ConditionTrue))
	h.judge(u, kstatus.CurrentStatus, "Healthy")
	require.NoError(t, <-waited, "kubectl wait returns once generation 2 is Ready")

	// An error, being retried.
	h.setMode("b1", "fail")
	u = h.until("b1", observed(3, kube.ConditionReconciling, metav1.ConditionTrue))
	h.judge(u, kstatus.InProgressStatus, "Progressing")
	h.notReadyWithin("b1")

	// A failure the Reconciler declares terminal.
	h.setMode("b1", "terminal")
	u = h.until("b1", observed(4, kube.ConditionStalled, metav1.ConditionTrue))
	h.judge(u, kstatus.FailedStatus, "Degraded")
	h.notReadyWithin("b1")

	// Mended by a spec change, into a time-driven object, such as a
	// CronJob, that always asks to be reconciled again at its next run
	// (Result.After of an hour) and has nothing Waiting: it is Ready to
	// all three (issue 37; it was Ready False, Reconciling True, reason
	// Requeued, for good).
	waited = h.waitReady("b1")
	h.setMode("b1", "scheduled")
	u = h.until("b1", observed(5, kube.ConditionReady, metav1.ConditionTrue))
	h.judge(u, kstatus.CurrentStatus, "Healthy")
	require.NoError(t, <-waited, "kubectl wait returns once the scheduled object is Ready")
	left, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	require.Len(t, left, 1, "only Ready is left: a next run is no work in progress (Reconciling) and no failure (Stalled)")

	// And into one that asks for no other reconcile.
	h.setMode("b1", "ok")
	u = h.until("b1", observed(6, kube.ConditionReady, metav1.ConditionTrue))
	h.judge(u, kstatus.CurrentStatus, "Healthy")
	left, _, _ = unstructured.NestedSlice(u.Object, "status", "conditions")
	require.Len(t, left, 1, "Reconciling and Stalled are removed: only Ready is left")
}

// beaconHarness is a Beacon controller serving against a real API server,
// and what its test does to Beacons and reads of them.
type beaconHarness struct {
	t       *testing.T
	ctx     context.Context
	cluster *controlplane.Cluster
	res     dynamic.ResourceInterface
	health  string // the Argo CD health check's Lua

	mu    sync.Mutex
	gates map[string]*beaconGate
}

// beaconGate holds one generation of one Beacon in its reconcile.
type beaconGate struct {
	entered, release chan struct{}
	once             sync.Once
}

func startBeacons(t *testing.T, cluster *controlplane.Cluster, dyn dynamic.Interface) *beaconHarness {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	h := &beaconHarness{t: t, ctx: ctx, cluster: cluster, res: dyn.Resource(beacons.GVR()).Namespace("default"),
		health: argoHealthCheck(t), gates: map[string]*beaconGate{}}
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: humustest.NewTelemetry(t).Telemetry}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return cluster.Token, nil },
	})
	require.NoError(t, err)
	settings := kube.DefaultSettings()
	settings.Name = "beacon-controller"
	settings.LeaderElection.Namespace = "default"
	settings.LeaderElection.Identity = "replica-1"
	settings.RetryBaseDelay = 100 * time.Millisecond
	settings.RetryMaxDelay = time.Second
	ctrl, err := kube.NewController(s, client, settings, beacons,
		kube.ReconcilerFunc[beaconSpec, beaconStatus](func(ctx context.Context, b beacon) (kube.Result[beaconStatus], error) {
			switch {
			case strings.HasPrefix(b.Spec.Mode, "hold"):
				g := h.gate(b.Name, b.Generation)
				g.once.Do(func() { close(g.entered) })
				select {
				case <-g.release:
				case <-ctx.Done():
					return kube.Result[beaconStatus]{}, ctx.Err()
				}
			case b.Spec.Mode == "fail":
				return kube.Result[beaconStatus]{}, errors.New("the backend refused")
			case b.Spec.Mode == "terminal":
				return kube.Result[beaconStatus]{}, kube.Terminal(errors.New("mode terminal can't work"))
			case b.Spec.Mode == "scheduled":
				return kube.Result[beaconStatus]{After: time.Hour}, nil
			}
			return kube.Result[beaconStatus]{}, nil
		}))
	require.NoError(t, err)
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ctrl.Serve(serveCtx) }()
	t.Cleanup(func() {
		h.mu.Lock()
		for _, g := range h.gates {
			select {
			case <-g.release:
			default:
				close(g.release)
			}
		}
		h.mu.Unlock()
		stop()
		require.NoError(t, ctrl.Shutdown(context.Background()))
		require.NoError(t, <-served)
	})
	return h
}

// argoHealthCheck returns the Lua of the health check the Memcached
// example ships for Argo CD's argocd-cm.
func argoHealthCheck(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../examples/memcached/deploy/argocd/argocd-cm.yaml")
	require.NoError(t, err)
	var cm corev1.ConfigMap
	require.NoError(t, yaml.UnmarshalStrict(b, &cm))
	script := cm.Data[argoHealthKey]
	require.NotEmpty(t, script, "argocd-cm has %s", argoHealthKey)
	return script
}

func (h *beaconHarness) gate(name string, generation int64) *beaconGate {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := fmt.Sprintf("%s@%d", name, generation)
	g := h.gates[key]
	if g == nil {
		g = &beaconGate{entered: make(chan struct{}), release: make(chan struct{})}
		h.gates[key] = g
	}
	return g
}

// hold makes the reconcile of generation of name wait for release.
func (h *beaconHarness) hold(name string, generation int64) { h.gate(name, generation) }

// entered waits until the reconcile of generation of name is under way.
func (h *beaconHarness) entered(name string, generation int64) {
	select {
	case <-h.gate(name, generation).entered:
	case <-h.ctx.Done():
		h.t.Fatalf("%s's reconcile of generation %d didn't start: %v", name, generation, h.ctx.Err())
	}
}

// release lets the reconcile of generation of name finish.
func (h *beaconHarness) release(name string, generation int64) {
	close(h.gate(name, generation).release)
}

func (h *beaconHarness) create(name, mode string) {
	_, err := h.res.Create(h.ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "controller.humus.example.com/v1",
		"kind":       "Beacon",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"mode": mode},
	}}, metav1.CreateOptions{})
	require.NoError(h.t, err)
}

func (h *beaconHarness) setMode(name, mode string) {
	_, err := h.res.Patch(h.ctx, name, types.MergePatchType, []byte(`{"spec":{"mode":"`+mode+`"}}`),
		metav1.PatchOptions{FieldManager: "someone-else"})
	require.NoError(h.t, err)
}

func (h *beaconHarness) get(name string) *unstructured.Unstructured {
	u, err := h.res.Get(h.ctx, name, metav1.GetOptions{})
	require.NoError(h.t, err)
	return u
}

// observed is whether an object's status has observed generation and has
// the condition typ at status, of that generation.
func observed(generation int64, typ string, want metav1.ConditionStatus) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool {
		og, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		if u.GetGeneration() != generation || og != generation {
			return false
		}
		conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conditions {
			m, _ := c.(map[string]any)
			g, _, _ := unstructured.NestedInt64(m, "observedGeneration")
			if m["type"] == typ && m["status"] == string(want) && g == generation {
				return true
			}
		}
		return false
	}
}

// until watches name until ok reports true of it, and returns it.
func (h *beaconHarness) until(name string, ok func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	h.t.Helper()
	w, err := h.res.Watch(h.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	require.NoError(h.t, err)
	defer w.Stop()
	var last *unstructured.Unstructured
	for {
		select {
		case <-h.ctx.Done():
			h.t.Fatalf("%s never reached the state awaited: %v; last seen %v", name, h.ctx.Err(), last)
		case ev, open := <-w.ResultChan():
			require.True(h.t, open, "the watch of %s ended", name)
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			last = ev.Object.(*unstructured.Unstructured)
			if ok(last) {
				return last
			}
		}
	}
}

// judge requires kstatus to compute want of u, and the Argo CD health
// check to give health.
func (h *beaconHarness) judge(u *unstructured.Unstructured, want kstatus.Status, health string) {
	h.t.Helper()
	res, err := kstatus.Compute(u)
	require.NoError(h.t, err)
	require.Equal(h.t, want, res.Status, "kstatus: %s; the object: %v", res.Message, u.Object["status"])
	got, message := argoHealth(h.t, h.health, u)
	require.Equal(h.t, health, got, "Argo CD's health check: %s; the object: %v", message, u.Object["status"])
}

// notReadyWithin requires kubectl wait --for=condition=Ready to time out
// on name: its condition isn't met, and won't be without a reconcile.
func (h *beaconHarness) notReadyWithin(name string) {
	h.t.Helper()
	out, err := h.kubectl("wait", "--for=condition=Ready", "--timeout=2s", "beacons.controller.humus.example.com/"+name).CombinedOutput()
	require.Error(h.t, err, "kubectl wait returned: %s", out)
	require.Contains(h.t, string(out), "timed out", "kubectl wait: %s", out)
}

// waitReady starts kubectl wait --for=condition=Ready on name, and returns
// its end: nil once it has returned with success.
func (h *beaconHarness) waitReady(name string) <-chan error {
	cmd := h.kubectl("wait", "--for=condition=Ready", "--timeout=120s", "beacons.controller.humus.example.com/"+name)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(h.t, cmd.Start())
	done := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("kubectl wait: %w: %s", err, out.String())
		}
		done <- err
	}()
	return done
}

// kubectl is kubectl with args on the test's cluster, in namespace
// default, with a discovery cache of its own.
func (h *beaconHarness) kubectl(args ...string) *exec.Cmd {
	base := []string{"--kubeconfig", h.cluster.Kubeconfig, "--cache-dir", h.t.TempDir(), "-n", "default"}
	return exec.CommandContext(h.ctx, "kubectl", append(base, args...)...)
}

// argoHealth runs the health check script on u as Argo CD does (its
// lua.VM): obj is u's content, converted value by value, and the script's
// returned table's status and message are the health.
func argoHealth(t *testing.T, script string, u *unstructured.Unstructured) (health, message string) {
	t.Helper()
	l := lua.NewState()
	defer l.Close()
	l.SetGlobal("obj", toLua(l, u.Object))
	require.NoError(t, l.DoString(script))
	hs, ok := l.Get(-1).(*lua.LTable)
	require.True(t, ok, "the health check returned %v", l.Get(-1))
	return hs.RawGetString("status").String(), hs.RawGetString("message").String()
}

// toLua is Argo CD's decodeValue (util/lua): JSON values as Lua's.
func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(toLua(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for k, item := range v {
			tbl.RawSetH(lua.LString(k), toLua(l, item))
		}
		return tbl
	}
	return lua.LNil
}
