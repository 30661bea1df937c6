// Command demo shows the Memcached operator at work, step by step, on a
// real Kubernetes control plane:
//
//	go run ./kube/examples/memcached/demo
//
// On a fresh machine it first builds the local control plane (etcd,
// kube-apiserver and kube-controller-manager, from Go modules: minutes, the
// first time only), and starts it on 127.0.0.1. Then it installs the
// Memcached CRD, runs the Memcached App in this process, as humus.Main
// would, creates a Memcached at v1alpha1 and reads it at v1beta1 (converted
// by the App's own conversion webhook), and shows what the App does with
// it: the
// Deployment it applies, the status it writes, a hand-made scale it undoes,
// the finalizer it runs on delete, the controller's own figures scraped
// from its /metrics (reconciles by outcome, work queue adds, API requests
// and the reconcile-duration histogram as text bars), and its exit 0 on
// SIGTERM with the Lease released. Last, it stops the control plane.
//
// With -kubeconfig it uses an existing cluster instead (such as kind's or
// k3s's), in the namespace -namespace, and leaves the cluster running.
// There is no kubelet in the local control plane, so the Deployment's pods
// never run, its ready replicas stay 0 and the Memcached's Available
// condition stays False, "0/2 replicas available".
//
// Ctrl-C (or SIGTERM) stops the App with SIGTERM first; on an existing
// cluster the demo then removes the Memcached and its Deployment (or says
// what is left, and how to remove it), and a next run removes what an
// earlier, killed run left. Then it stops the local control plane and
// exits 130. A second Ctrl-C exits at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"go.opentelemetry.io/otel/log"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/conversion"
	"github.com/z5labs/humus/kube/examples/appconfig"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "use the existing cluster of this kubeconfig instead of starting the local control plane")
	namespace := flag.String("namespace", "memcached-demo", "the namespace the demo's Memcached, its Deployment and the App's Lease go in")
	quiet := flag.Bool("quiet", false, "hide the App's own log records")
	verbose := flag.Bool("v", false, "show the App's debug log records too, client-go's included")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first Ctrl-C, a second one kills the demo at once (the
		// control plane's processes die with it).
		<-ctx.Done()
		stop()
	}()
	d := &demo{out: os.Stdout, namespace: *namespace, quiet: *quiet, verbose: *verbose}
	err := d.run(ctx, *kubeconfig)
	switch {
	case err != nil && ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "\ndemo interrupted")
		os.Exit(130) // 128 + SIGINT, as a shell reports it
	case err != nil:
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
}

type demo struct {
	out       io.Writer
	namespace string
	quiet     bool
	verbose   bool
	local     bool // the demo started the local control plane

	cluster *controlplane.Cluster
	kube    kubernetes.Interface
	dynamic dynamic.Interface
	logs    *logPrinter
	probes  string // the App's probes' address
	metrics string // the App's metrics' address, plain HTTP on loopback
	// The App's conversion webhook, on a local control plane: its
	// address, its serving certificate's CA, and the directory of the
	// certificate's files.
	webhook   string
	webhookCA *httpserver.Authority
	certDir   string

	step int
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// The name of the demo's Memcached, and of its Deployment.
const name = "example"

// run runs the demo's steps. When ctx is done (Ctrl-C or SIGTERM), it
// stops the App with SIGTERM, removes the Memcached and its Deployment from
// an existing cluster (or says what is left behind), stops the local control
// plane, and returns ctx's error.
func (d *demo) run(ctx context.Context, kubeconfig string) (err error) {
	// The demo's own client-go clients log through the context's logger,
	// never klog's global one.
	ctx = klog.NewContext(ctx, d.clientLogger())
	if err := d.startCluster(ctx, kubeconfig); err != nil {
		return err
	}
	if d.local {
		defer func() {
			d.title("Stopping the control plane")
			if stopErr := d.cluster.Stop(); stopErr != nil {
				d.say("%v", stopErr)
				err = errors.Join(err, stopErr)
				return
			}
			d.say("stopped; its data directory is removed")
		}()
	}
	rc := d.cluster.RESTConfig()
	rc.QPS = -1 // no client-side rate limit: the demo polls
	if d.kube, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	if d.dynamic, err = dynamic.NewForConfig(rc); err != nil {
		return err
	}
	if d.local {
		cleanup, err := d.prepareWebhook()
		if err != nil {
			return err
		}
		defer cleanup()
	}
	if err := d.installCRD(ctx); err != nil {
		return err
	}
	memcacheds := d.dynamic.Resource(app.Memcached.GVR()).Namespace(d.namespace)
	if !d.local {
		if err := d.removeLeftovers(ctx, memcacheds, "an earlier run"); err != nil {
			return err
		}
	}

	a, err := d.startApp(ctx, kubeconfig)
	if a != nil {
		defer func() {
			if ctx.Err() != nil {
				d.interrupted(a, memcacheds)
				err = errors.Join(ctx.Err(), err)
				return
			}
			a.stop()
		}()
	}
	if err != nil {
		return err
	}
	if err := d.steps(ctx, a, memcacheds); err != nil {
		return err
	}
	d.leftInCluster()
	return nil
}

// steps creates the Memcached and shows what the running App does with it.
func (d *demo) steps(ctx context.Context, a *runningApp, memcacheds dynamic.ResourceInterface) error {
	m, err := d.createMemcached(ctx, memcacheds)
	if err != nil {
		return err
	}
	if err := d.showDeployment(ctx, m); err != nil {
		return err
	}
	if err := d.showStatus(ctx, memcacheds); err != nil {
		return err
	}
	if err := d.scaleByHand(ctx); err != nil {
		return err
	}
	if err := d.deleteMemcached(ctx, memcacheds); err != nil {
		return err
	}
	if err := d.showMetrics(ctx); err != nil {
		return err
	}
	return d.terminate(ctx, a)
}

// leftInCluster says what an existing cluster keeps, and how to remove it.
func (d *demo) leftInCluster() {
	if d.local {
		return
	}
	d.title("Left in the cluster")
	d.say("the CRD and the namespace; to remove them:")
	d.say("kubectl delete namespace %s", d.namespace)
	d.say("kubectl delete crd memcacheds.cache.example.com")
}

// interrupted stops the App after Ctrl-C, then removes what it and the
// demo made in an existing cluster, or says what is left behind. Its
// requests have a context of their own: ctx is done.
func (d *demo) interrupted(a *runningApp, memcacheds dynamic.ResourceInterface) {
	d.title("Interrupted: stopping the App with SIGTERM")
	switch code, ok := a.stop(); {
	case !ok:
		d.say("the App did not exit within 30s of SIGTERM")
	default:
		d.say("the App exited %d", code)
	}
	if d.local {
		d.say("(what it made goes with the control plane)")
		return
	}
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), d.clientLogger()), 30*time.Second)
	defer cancel()
	if err := d.removeLeftovers(ctx, memcacheds, "the interrupted run"); err != nil {
		d.say("could not remove them: %v", err)
		d.say("left behind in namespace %s: memcached/%s (whose finalizer %s no App will run) and deployment/%s; to remove them:", d.namespace, name, app.FinalizerName, name)
		d.say(`kubectl -n %s patch memcached %s --type merge -p '{"metadata":{"finalizers":null}}'`, d.namespace, name)
		d.say("kubectl -n %s delete memcached/%s deployment/%s --ignore-not-found", d.namespace, name, name)
	}
	d.leftInCluster()
}

// removeLeftovers removes memcached/example, with its finalizers, and the
// deployment/example it owned, if an interrupted run (by) left them, and
// waits until they are gone, saying so. No App may be running: the
// finalizer is stripped without running it.
func (d *demo) removeLeftovers(ctx context.Context, memcacheds dynamic.ResourceInterface, by string) error {
	titled := false
	title := func() {
		if !titled {
			d.title("Removing what " + by + " left")
			titled = true
		}
	}
	m, err := memcacheds.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		title()
		d.say("memcached/%s is left (finalizers: %s)", name, strings.Join(m.GetFinalizers(), ", "))
		if len(m.GetFinalizers()) > 0 {
			patch := []byte(`{"metadata":{"finalizers":null}}`)
			if _, err := memcacheds.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "memcached-demo"}); ignoreNotFound(err) != nil {
				return fmt.Errorf("removing the finalizers of memcached/%s: %w", name, err)
			}
			d.say("removed its finalizers with a JSON merge patch (no App runs to finalize it)")
		}
		if err := memcacheds.Delete(ctx, name, metav1.DeleteOptions{}); ignoreNotFound(err) != nil {
			return fmt.Errorf("deleting memcached/%s: %w", name, err)
		}
		if err := poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
			_, err := memcacheds.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), ignoreNotFound(err)
		}); err != nil {
			return fmt.Errorf("waiting for memcached/%s to be deleted: %w", name, err)
		}
		d.say("deleted memcached/%s", name)
	}
	// Its Deployment is the garbage collector's to delete, in its own time:
	// the demo deletes it now, so the next run starts from nothing.
	deployments := d.kube.AppsV1().Deployments(d.namespace)
	dep, err := deployments.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	if !ownedByMemcached(dep.OwnerReferences) {
		return nil
	}
	title()
	if err := deployments.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &dep.UID}}); ignoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting deployment/%s: %w", name, err)
	}
	if err := poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		got, err := deployments.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && got.UID != dep.UID), ignoreNotFound(err)
	}); err != nil {
		return fmt.Errorf("waiting for deployment/%s to be deleted: %w", name, err)
	}
	d.say("deleted deployment/%s, which it owned", name)
	return nil
}

// ownedByMemcached reports whether refs name a Memcached of the demo's
// name as an owner.
func ownedByMemcached(refs []metav1.OwnerReference) bool {
	for _, r := range refs {
		if r.Kind == "Memcached" && r.Name == name && strings.HasPrefix(r.APIVersion, app.Memcached.GVR().Group+"/") {
			return true
		}
	}
	return false
}

// startCluster builds and starts the local control plane, or connects to
// the cluster of kubeconfig.
func (d *demo) startCluster(ctx context.Context, kubeconfig string) error {
	if kubeconfig != "" {
		d.title("Using the cluster of " + kubeconfig)
		c, err := controlplane.FromKubeconfig(kubeconfig)
		if err != nil {
			return err
		}
		d.cluster = c
		d.say("API server: https://%s", c.Server)
		return nil
	}
	d.title("Starting a local Kubernetes control plane " + controlplane.Version)
	bins, err := controlplane.DefaultBinDir()
	if err != nil {
		return err
	}
	if controlplane.BinariesIn(bins).Check() != nil {
		d.say("building etcd, kube-apiserver and kube-controller-manager from Go modules into %s", bins)
		d.say("(the first time only: it takes about 5 minutes on 2 cores)")
	}
	if _, err := controlplane.Build(ctx, controlplane.BuildOptions{Progress: indent{d.out}}); err != nil {
		return err
	}
	start := time.Now()
	// Not ctx: Ctrl-C would kill the control plane at once, under the App.
	// run stops it, after the App.
	c, err := controlplane.Start(context.WithoutCancel(ctx), controlplane.Options{})
	if err != nil {
		return err
	}
	d.cluster = c
	d.local = true
	d.say("etcd, kube-apiserver and kube-controller-manager (with its garbage collector; no kubelet, so no pod runs)")
	d.say("API server: https://%s, ready in %v", c.Server, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// installCRD applies the Memcached CRD, which app.Memcached.CRD() reflects
// from the Go types: the same YAML that deploy/crds holds, which the golden
// test keeps in step.
func (d *demo) installCRD(ctx context.Context) error {
	d.title("Installing the Memcached CRD")
	r := app.Memcached
	if d.local {
		// The local API server calls the App's webhook on 127.0.0.1,
		// trusting the CA the demo made for it. In a cluster, the CRD names
		// the Service memcached-webhooks (deploy/).
		r.ConversionWebhook = kube.WebhookClient{URL: "https://" + d.webhook + conversion.Path, CABundle: d.webhookCA.CABundle()}
	}
	crd, err := r.CRD()
	if err != nil {
		return err
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: u}
	obj.SetAPIVersion("apiextensions.k8s.io/v1")
	obj.SetKind("CustomResourceDefinition")
	crds := d.dynamic.Resource(crdGVR)
	if _, err := crds.Apply(ctx, crd.Name, obj, metav1.ApplyOptions{FieldManager: "memcached-demo", Force: true}); err != nil {
		return err
	}
	err = poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the CRD to be established: %w", err)
	}
	d.say("%s is established (reflected from MemcachedSpec and MemcachedStatus, no markers)", crd.Name)
	d.say("versions: %s (stored, the controller's) and %s, converted by the App's webhook (%s)", app.Memcached.Version, app.V1alpha1.Name(), webhookConfig(crd))
	if d.local {
		// Else its garbage collector would find memcacheds only at its
		// next discovery sync (every 30s), and collect the Deployment of a
		// deleted Memcached up to a minute late (41s measured).
		if err := d.cluster.RestartControllerManager(ctx); err != nil {
			return err
		}
		d.say("restarted kube-controller-manager, so its garbage collector watches memcacheds at once")
	}

	// The Rules are the API server's to enforce.
	bad := memcachedObject(0)
	_, err = d.dynamic.Resource(app.Memcached.GVR()).Namespace("default").Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case apierrors.IsInvalid(err):
		d.say("a Memcached of size 0 is rejected by the API server:")
		d.say("  %s", fieldError(err.Error()))
	case err != nil:
		return err
	default:
		return errors.New("the API server accepted a Memcached of size 0")
	}
	return nil
}

// startApp runs the Memcached App in this process, with humus.Run on the
// real Host, whose environment holds what app.Init reads, and whose
// signals the demo sends.
func (d *demo) startApp(ctx context.Context, kubeconfig string) (*runningApp, error) {
	d.title("Starting the Memcached App")
	if _, err := d.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	path := d.cluster.Kubeconfig
	if kubeconfig != "" {
		abs, err := filepath.Abs(kubeconfig)
		if err != nil {
			return nil, err
		}
		path = abs
	}
	probes, err := freeAddr()
	if err != nil {
		return nil, err
	}
	d.probes = probes
	if d.metrics, err = freeAddr(); err != nil {
		return nil, err
	}
	// A local run's metrics: plain HTTP, which only a loopback address
	// may serve. In a pod, they are served over TLS to whom the API server
	// authorizes (the deploy files).
	env := map[string]string{
		appconfig.EnvKubeconfig:    path,
		appconfig.EnvPodNamespace:  d.namespace,
		appconfig.EnvPodName:       "demo-0",
		appconfig.EnvWatchNS:       d.namespace,
		appconfig.EnvProbesAddr:    probes,
		appconfig.EnvMetricsAddr:   d.metrics,
		appconfig.EnvMetricsSecure: "false",
	}
	keys := []string{appconfig.EnvKubeconfig, appconfig.EnvPodNamespace, appconfig.EnvPodName, appconfig.EnvWatchNS, appconfig.EnvProbesAddr, appconfig.EnvMetricsAddr, appconfig.EnvMetricsSecure}
	if d.webhook != "" {
		// The conversion webhook, over TLS with the certificate the demo
		// made, as a mounted Secret holds it in a pod.
		env[appconfig.EnvWebhookAddr] = d.webhook
		env[appconfig.EnvWebhookCertDir] = d.certDir
		keys = append(keys, appconfig.EnvWebhookAddr, appconfig.EnvWebhookCertDir)
	}
	for _, k := range keys {
		d.say("%s=%s", k, env[k])
	}
	host := humus.OSHost()
	host.LookupEnv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	a := &runningApp{signals: make(chan os.Signal, 1), exit: make(chan int, 1)}
	host.Signals = func(context.Context) <-chan os.Signal { return a.signals }
	host.Stderr = indent{d.out}
	d.logs = &logPrinter{out: d.out, quiet: d.quiet, min: log.SeverityInfo}
	if d.verbose {
		d.logs.min = log.SeverityTrace1
	}
	// The App stops on the SIGTERM the demo sends it, not with ctx: after
	// Ctrl-C it is stopped first, before the control plane.
	go func() {
		a.exit <- humus.Run(context.WithoutCancel(ctx), host, app.Init, humus.WithTelemetry(d.logs.telemetry))
	}()

	err = poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		select {
		case code := <-a.exit:
			a.exit <- code
			a.exited, a.code = true, code
			return false, fmt.Errorf("the App exited with %d", code)
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+probes+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return a, fmt.Errorf("waiting for the App to be ready: %w", err)
	}
	d.say("ready: GET http://%s/readyz answers 200 once the controller's caches have synced", probes)
	err = poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		h, err := d.holder(ctx)
		return h == "demo-0", err
	})
	if err != nil {
		return a, fmt.Errorf("waiting for the App to take the Lease: %w", err)
	}
	d.say("leader: it holds the Lease %s/%s", d.namespace, app.FieldManager)
	return a, nil
}

// createMemcached creates the demo's Memcached at v1alpha1, as a client of
// the first version would, and reads it back at v1beta1, the version the
// App's webhook converted it to. On an existing cluster, whose API server
// can't reach the App's webhook in this process, it creates it at v1beta1.
func (d *demo) createMemcached(ctx context.Context, memcacheds dynamic.ResourceInterface) (*unstructured.Unstructured, error) {
	version := app.V1alpha1.Name()
	if !d.local {
		version = app.Memcached.Version
	}
	d.title("Creating a Memcached at " + version)
	gvr := app.Memcached.GVR()
	gvr.Version = version
	at := d.dynamic.Resource(gvr).Namespace(d.namespace)
	obj := memcachedObject(2)
	obj.SetAPIVersion(gvr.GroupVersion().String())
	d.say("apiVersion: %s", obj.GetAPIVersion())
	d.say("kind: Memcached")
	d.say("metadata: {name: %s, namespace: %s}", name, d.namespace)
	d.say("spec: {size: 2}")
	created, err := at.Create(ctx, obj, metav1.CreateOptions{FieldManager: "memcached-demo"})
	if err != nil {
		return nil, err
	}
	image, _, _ := unstructured.NestedString(created.Object, "spec", "image")
	d.say("created; the API server defaulted spec.image to %s", image)
	if version == app.Memcached.Version {
		d.say("(an existing cluster's API server can't call the App's webhook in this process, so the demo creates it at %s, the stored version; deployed with deploy/, the App's Service serves conversion)", version)
		return created, nil
	}
	m, err := memcacheds.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	size, _, _ := unstructured.NestedInt64(m.Object, "spec", "size")
	d.say("read at %s: apiVersion %s, spec.size %d, the same uid %s", app.Memcached.Version, m.GetAPIVersion(), size, m.GetUID())
	d.say("created at %s, stored and read at %s: the API server converted it through the App's conversion webhook", version, app.Memcached.Version)
	return m, nil
}

// prepareWebhook makes the CA and serving certificate of the App's
// conversion webhook on 127.0.0.1, writes them where the App reads them,
// and picks its address. cleanup removes the files.
func (d *demo) prepareWebhook() (cleanup func(), err error) {
	if d.webhook, err = freeAddr(); err != nil {
		return nil, err
	}
	if d.webhookCA, err = httpserver.NewAuthority(0, "127.0.0.1"); err != nil {
		return nil, err
	}
	if d.certDir, err = os.MkdirTemp("", "memcached-demo-webhook-"); err != nil {
		return nil, err
	}
	cleanup = func() { _ = os.RemoveAll(d.certDir) }
	certPEM, keyPEM := d.webhookCA.ServingPEM()
	for file, b := range map[string][]byte{appconfig.CertFile: certPEM, appconfig.KeyFile: keyPEM} {
		if err := os.WriteFile(filepath.Join(d.certDir, file), b, 0o600); err != nil {
			cleanup()
			return nil, err
		}
	}
	return cleanup, nil
}

// webhookConfig says where crd's conversion webhook is.
func webhookConfig(crd *apiextensionsv1.CustomResourceDefinition) string {
	cc := crd.Spec.Conversion.Webhook.ClientConfig
	if cc.URL != nil {
		return *cc.URL
	}
	return fmt.Sprintf("Service %s/%s", cc.Service.Namespace, cc.Service.Name)
}

func (d *demo) showDeployment(ctx context.Context, m *unstructured.Unstructured) error {
	d.title("The Deployment the App applied")
	var dep *appsv1.Deployment
	err := poll(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
		var err error
		dep, err = d.kube.AppsV1().Deployments(d.namespace).Get(ctx, name, metav1.GetOptions{})
		return err == nil, ignoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("waiting for the Deployment: %w", err)
	}
	d.say("deployment %s/%s", dep.Namespace, dep.Name)
	d.say("  replicas: %d, image: %s", *dep.Spec.Replicas, dep.Spec.Template.Spec.Containers[0].Image)
	for _, ref := range dep.OwnerReferences {
		d.say("  ownerReference: %s %s (uid %s), controller=%t, blockOwnerDeletion=%t",
			ref.Kind, ref.Name, ref.UID, deref(ref.Controller), deref(ref.BlockOwnerDeletion))
	}
	if len(dep.OwnerReferences) == 1 && dep.OwnerReferences[0].UID == m.GetUID() {
		d.say("  so the Memcached controls it: a change to it reconciles the Memcached, and it goes with it")
	}
	for _, f := range dep.ManagedFields {
		d.say("  managed by %s (%s)", f.Manager, f.Operation)
	}
	if d.local {
		d.say("  ready replicas: %d (no kubelet runs in the local control plane, so no pod starts)", dep.Status.ReadyReplicas)
	} else {
		d.say("  ready replicas: %d", dep.Status.ReadyReplicas)
	}
	return nil
}

func (d *demo) showStatus(ctx context.Context, memcacheds dynamic.ResourceInterface) error {
	d.title("The status the App wrote")
	var obj app.Object
	err := poll(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
		got, err := memcacheds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		obj = app.Object{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &obj); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(obj.Status.Conditions, "Available")
		return c != nil && c.ObservedGeneration == obj.Generation, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the status: %w", err)
	}
	d.say("status.readyReplicas: %d", obj.Status.ReadyReplicas)
	for _, c := range obj.Status.Conditions {
		d.say("status.conditions: type=%s status=%s reason=%s message=%q observedGeneration=%d", c.Type, c.Status, c.Reason, c.Message, c.ObservedGeneration)
	}
	if c := meta.FindStatusCondition(obj.Status.Conditions, "Available"); c != nil && c.Status != metav1.ConditionTrue && d.local {
		d.say("(Available stays False here: the local control plane runs no kubelet, so no pod ever starts;")
		d.say(" on a cluster it turns True once the Deployment's %d replicas are available)", obj.Spec.Size)
	}
	d.say("metadata.finalizers: %s", strings.Join(obj.Finalizers, ", "))
	for _, f := range obj.ManagedFields {
		sub := ""
		if f.Subresource != "" {
			sub = " on " + f.Subresource
		}
		d.say("managed by %s: %s%s", f.Manager, f.Operation, sub)
	}
	d.say("(server-side apply under one field manager: no Get, no Update, no conflict to retry)")
	return nil
}

func (d *demo) scaleByHand(ctx context.Context) error {
	d.title("Scaling the Deployment by hand")
	deployments := d.kube.AppsV1().Deployments(d.namespace)
	patch := []byte(`{"spec":{"replicas":3}}`)
	if _, err := deployments.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-scale"}, "scale"); err != nil {
		return err
	}
	start := time.Now()
	d.say("kubectl -n %s scale deployment/%s --replicas=3", d.namespace, name)
	err := poll(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
		dep, err := deployments.Get(ctx, name, metav1.GetOptions{})
		return err == nil && *dep.Spec.Replicas == 2, err
	})
	if err != nil {
		return fmt.Errorf("waiting for the scale to be undone: %w", err)
	}
	d.say("undone in %v: replicas are 2 again, as the Memcached's spec.size says", time.Since(start).Round(time.Millisecond))
	return nil
}

func (d *demo) deleteMemcached(ctx context.Context, memcacheds dynamic.ResourceInterface) error {
	d.title("Deleting the Memcached")
	d.say("kubectl -n %s delete memcached/%s", d.namespace, name)
	if err := memcacheds.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	err := poll(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
		return d.logs.finalized() > 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the finalizer: %w", err)
	}
	if d.quiet {
		d.say("the finalizer %s ran", app.FinalizerName)
	} else {
		d.say("the finalizer %s ran (see the App's record above)", app.FinalizerName)
	}
	err = poll(ctx, 10*time.Second, func(ctx context.Context) (bool, error) {
		_, err := memcacheds.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	})
	if err != nil {
		return fmt.Errorf("waiting for the deletion to complete: %w", err)
	}
	d.say("the App removed its finalizer, and the deletion completed: memcached/%s is gone", name)
	start := time.Now()
	collected := func(ctx context.Context) (bool, error) {
		_, err := d.kube.AppsV1().Deployments(d.namespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	}
	err = poll(ctx, time.Second, collected)
	if wait.Interrupted(err) && ctx.Err() == nil { // not yet: say what it waits for
		d.say("waiting for the garbage collector to delete deployment/%s, which the Memcached owned", name)
		if !d.local {
			d.say("(this can take tens of seconds on a cluster whose controller manager hasn't discovered the CRD yet)")
		}
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, collected)
	}
	if err != nil {
		return fmt.Errorf("waiting for the garbage collector: %w", err)
	}
	d.say("the garbage collector deleted deployment/%s, which the Memcached owned, after %v", name, time.Since(start).Round(time.Millisecond))
	return nil
}

// showMetrics shows the controller's own figures, as an operator reads
// them from Prometheus: scraped from the App's /metrics, served over plain
// HTTP on loopback in this local run.
func (d *demo) showMetrics(ctx context.Context) error {
	url := "http://" + d.metrics + appconfig.MetricsPath
	d.title("The controller's own figures, from its /metrics")
	d.say("GET %s (what Prometheus scrapes, by the deploy files' annotations, over TLS with its token in a pod)", url)
	families, err := scrape(ctx, url)
	if err != nil {
		return fmt.Errorf("scraping the App's metrics: %w", err)
	}
	figures(families, d.say)
	return nil
}

func (d *demo) terminate(ctx context.Context, a *runningApp) error {
	d.title("Stopping the App with SIGTERM")
	a.signals <- syscall.SIGTERM
	select {
	case code := <-a.exit:
		a.exited = true
		a.code = code
		if code != 0 {
			return fmt.Errorf("the App exited with %d", code)
		}
		d.say("the App exited 0")
	case <-time.After(30 * time.Second):
		return errors.New("the App did not exit within 30s of SIGTERM")
	case <-ctx.Done():
		return ctx.Err()
	}
	h, err := d.holder(ctx)
	if err != nil {
		return err
	}
	if h != "" {
		return fmt.Errorf("the Lease is still held by %q", h)
	}
	d.say("the Lease %s/%s has no holder: it was released, so a next replica takes over at once", d.namespace, app.FieldManager)
	return nil
}

func (d *demo) holder(ctx context.Context) (string, error) {
	l, err := d.kube.CoordinationV1().Leases(d.namespace).Get(ctx, app.FieldManager, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return "", ignoreNotFound(err)
	}
	return *l.Spec.HolderIdentity, nil
}

// clientLogger is the logger of the demo's own client-go clients: with -v,
// it prints their records under the current step, as "│ demo ..."; else
// it discards them (their errors are the demo's to report).
func (d *demo) clientLogger() logr.Logger {
	if !d.verbose {
		return logr.Discard()
	}
	return funcr.New(func(prefix, args string) {
		fmt.Fprintf(d.out, "   │ demo %s %s\n", prefix, args)
	}, funcr.Options{Verbosity: 4})
}

func (d *demo) title(s string) {
	d.step++
	fmt.Fprintf(d.out, "\n%d. %s\n", d.step, s)
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "   "+format+"\n", args...)
}

// runningApp is the App humus.Run runs in this process.
type runningApp struct {
	signals chan os.Signal
	exit    chan int
	exited  bool
	code    int // once exited
}

// stop sends SIGTERM, if the App still runs, and waits up to 30s for it to
// exit. It returns the App's exit code, and false if it did not exit.
func (a *runningApp) stop() (int, bool) {
	if a.exited {
		return a.code, true
	}
	select {
	case a.signals <- syscall.SIGTERM:
	default:
	}
	select {
	case a.code = <-a.exit:
		a.exited = true
		return a.code, true
	case <-time.After(30 * time.Second):
		return 0, false
	}
}

func memcachedObject(size int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": app.Memcached.GVR().GroupVersion().String(),
		"kind":       "Memcached",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"size": size},
	}}
}

// poll calls cond every 20ms until it returns true or an error, or timeout
// passes.
func poll(ctx context.Context, timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, cond)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func deref(b *bool) bool { return b != nil && *b }

// fieldError returns the part of an Invalid error's message that names the
// field, such as "spec.size: Invalid value: 0: ...".
func fieldError(msg string) string {
	if i := strings.Index(msg, "spec."); i >= 0 {
		return msg[i:]
	}
	return msg
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// indent writes each line it is given indented, under the current step.
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		fmt.Fprintf(i.w, "   %s\n", line)
	}
	return len(p), nil
}
