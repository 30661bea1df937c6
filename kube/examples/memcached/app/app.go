package app

import (
	"context"
	"errors"
	"net/http"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/health"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/admission"
	"github.com/z5labs/humus/kube/conversion"
	"github.com/z5labs/humus/kube/examples/appconfig"
	"github.com/z5labs/humus/kube/webhookserve"
)

// Config is everything the Memcached App runs with: its Connection, its
// Controller's Settings (whose Name is FieldManager) and its probes'
// address.
type Config = appconfig.Config

// ReadConfig sources the App's Config from s.Host's environment and files,
// with the humus config package: from the pod's service account, or from
// the kubeconfig KUBECONFIG names (see package appconfig for every
// variable). Settings.Name is FieldManager. It returns one error naming
// every variable that is missing or malformed.
func ReadConfig(ctx context.Context, s *humus.Setup) (Config, error) {
	return appconfig.Read(ctx, s, FieldManager)
}

// Init is the Memcached App's humus.Init: it reads its Config from the
// Host with ReadConfig, and builds its Services as New's Init does.
func Init(ctx context.Context, s *humus.Setup) ([]humus.Service, error) {
	cfg, err := ReadConfig(ctx, s)
	if err != nil {
		return nil, err
	}
	return New(cfg)(ctx, s)
}

// New returns the Init of a Memcached App that runs with cfg, which is how
// a test runs the App with a Connection it filled itself. The Init builds
// the Client and a clientset on its Config, and returns its Services: the
// Controller of Memcached, whose Reconciler applies each one's Deployment,
// that owns deployments, watches the ConfigMaps Memcacheds name and
// finalizes with FinalizerName; the probes Service on cfg.ProbesAddr,
// ready once the Controller's caches have synced and the webhooks'
// certificate, when the App keeps it, is served and trusted (readiness);
// and, when cfg.Metrics.Addr is set, the metrics Service of
// appconfig.ServeMetrics, over TLS to the callers the API server
// authorizes; and, when cfg.Webhooks.Addr is set,
// the webhooks Service serving Memcached's conversion and admission
// webhooks (see serveWebhooks), which stops only once the Controller has
// (see services). It returns the errors NewClient, NewController,
// ServeMetrics, conversion.Handler, admission.Validate and Default, and
// webhookserve.Serve return.
func New(cfg Config) humus.Init {
	return func(ctx context.Context, s *humus.Setup) ([]humus.Service, error) {
		client, err := kube.NewClient(s, cfg.Connection)
		if err != nil {
			return nil, err
		}
		ctrl, err := NewController(s, client, cfg.Settings)
		if err != nil {
			return nil, err
		}
		if cfg.ProbesAddr == "" {
			return nil, errors.New("the probes' address is empty")
		}
		metrics, err := appconfig.ServeMetrics(s, client, cfg.Metrics)
		if err != nil {
			return nil, err
		}
		webhooks, err := serveWebhooks(s, client, cfg.Webhooks)
		if err != nil {
			return nil, err
		}
		probes := health.NewProbes(s, cfg.ProbesAddr, health.Readiness(readiness(ctrl.Synced(), webhooks)...))
		return services(ctrl, probes, metrics, webhooks), nil
	}
}

// NewController returns the Controller of Memcached on client with
// settings, as New's Init builds it: its Reconciler applies each
// Memcached's Deployment with a clientset on client's Config; it owns
// deployments, watches the ConfigMaps Memcacheds name, caching them whole,
// and finalizes with FinalizerName. It opens no connection, so RBAC's
// golden test builds it too. It returns the errors of
// kubernetes.NewForConfig, NewFinalizer and kube.NewController.
func NewController(s *humus.Setup, client *kube.Client, settings kube.Settings) (*kube.Controller, error) {
	kc, err := kubernetes.NewForConfig(client.Config())
	if err != nil {
		return nil, err
	}
	fin, err := NewFinalizer(s.Telemetry.LoggerProvider, s.Telemetry.MeterProvider)
	if err != nil {
		return nil, err
	}
	return kube.NewController(s, client, settings, Memcached, Reconciler{Kube: kc},
		kube.Owns(appsv1.SchemeGroupVersion.WithResource("deployments")),
		// A Memcached's ConfigMap isn't its own: a change to it maps to
		// the Memcacheds that name it. The cache holds the ConfigMaps
		// whole, for the Reconciler to read their data from.
		kube.Watches(ConfigMaps(),
			kube.References(func(m Object) []string { return []string{m.Spec.ConfigMapName} }),
			kube.CacheObjects()),
		kube.Finalize(FinalizerName, fin.Finalize),
	)
}

// RBAC is the RBAC the Memcached App's Controller runs with, ctrl's (see
// kube.Controller.RBAC) and its Reconciler's own: create and patch on
// Deployments, which it applies (server-side apply is a PATCH, and the
// API server checks create too when an apply creates the object). Its
// ClusterRole and Roles, bound to the ServiceAccount memcached-controller,
// are ../deploy/rbac.yaml, which TestMemcachedRBAC keeps true to it. The
// metrics' rules are ../deploy/metrics-rbac.yaml's.
func RBAC(ctrl *kube.Controller) kube.RBAC {
	r := ctrl.RBAC()
	r.Add("", rbacv1.PolicyRule{
		APIGroups: []string{appsv1.GroupName},
		Resources: []string{"deployments"},
		Verbs:     []string{"create", "patch"},
	})
	return r
}

// services returns the App's Services: ctrl, probes, metrics unless it is
// nil, and webhooks, each marked with humus.StopAfter(w, ctrl) so that, as
// the App stops, it serves until ctrl has stopped: the reconciles ctrl
// finishes then write Memcacheds through the API server, which calls the
// conversion webhook of any replica, this one included, to store them.
// The probes and the metrics stop at once.
func services(ctrl, probes, metrics humus.Service, webhooks []humus.Service) []humus.Service {
	svcs := []humus.Service{ctrl, probes}
	if metrics != nil {
		svcs = append(svcs, metrics)
	}
	for _, w := range webhooks {
		svcs = append(svcs, humus.StopAfter(w, ctrl))
	}
	return svcs
}

// readiness is what the App's readiness probe waits for: synced, the
// Controller's caches, and every one of webhooks that is a health.Monitor
// (a webhookcert.Certs: healthy once it serves a certificate whose CA the
// CRD trusts). The webhooks' Service publishes replicas not yet ready
// (deploy/service.yaml), so the API server can call a replica's
// conversion webhook while its caches, which list through it, sync.
func readiness(synced health.Monitor, webhooks []humus.Service) []health.Monitor {
	ms := []health.Monitor{synced}
	for _, w := range webhooks {
		if m, ok := w.(health.Monitor); ok {
			ms = append(ms, m)
		}
	}
	return ms
}

// serveWebhooks returns the Services of Memcached's conversion webhook,
// conversion.Handler of Memcached.Conversion() at conversion.Path, and
// its admission webhooks, Validating at admission.ValidatePath and
// Defaulting at admission.DefaultPath (the paths WebhookConfiguration's
// configurations name), served by webhookserve.Serve on w, or nil when w.Addr is "": with
// WEBHOOK_CERT_SECRET, a certificate kept through client in that Secret
// for the Service Memcached.ConversionWebhook names, its CA injected into
// Memcached's CRD and its two webhook configurations (see Webhooks).
// They are among the App's Services, so every replica serves it, leader or not, from the
// App's start, as the API server and the controller's own informers
// need.
func serveWebhooks(s *humus.Setup, client *kube.Client, w appconfig.WebhookConfig) ([]humus.Service, error) {
	if w.Addr == "" {
		return nil, nil
	}
	h, err := conversion.Handler(s, Memcached.Conversion())
	if err != nil {
		return nil, err
	}
	validate, err := admission.Validate(s, Validating())
	if err != nil {
		return nil, err
	}
	defaults, err := admission.Default(s, Defaulting())
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(conversion.Path, h)
	mux.Handle(admission.ValidatePath, validate)
	mux.Handle(admission.DefaultPath, defaults)
	return webhookserve.Serve(s, client, Webhooks(w), mux)
}

// Webhooks is w with the objects the Memcached App's webhooks are called
// through, as serveWebhooks serves them: Service, the Service
// Memcached.ConversionWebhook names (memcached-webhooks); CRDs,
// Memcached's CRD; and ValidatingWebhookConfigurations and
// MutatingWebhookConfigurations, WebhookConfiguration's name (both
// memcacheds.cache.example.com, as ../deploy/webhooks names them). With
// w.CertSecret (WEBHOOK_CERT_SECRET), the App injects its CA into the
// caBundle of the CRD and of both configurations; Webhooks(w).CertConfig()
// is that webhookcert.Config, whose AddRBAC gives WebhookCertRBAC.
func Webhooks(w appconfig.WebhookConfig) appconfig.WebhookConfig {
	w.Service = Memcached.ConversionWebhook.Name
	w.CRDs = []string{Memcached.GVR().GroupResource().String()}
	w.ValidatingWebhookConfigurations = []string{WebhookConfiguration().Name}
	w.MutatingWebhookConfigurations = []string{WebhookConfiguration().Name}
	return w
}

// WebhookCertRBAC is the RBAC the App's webhook certificate needs when it
// keeps it in the Secret secret of namespace (WEBHOOK_CERT_SECRET in
// POD_NAMESPACE), named memcached-controller-webhook-cert: webhookcert's
// rules for Webhooks' CertConfig (see webhookcert.Config.AddRBAC), a Role
// with get and update on that Secret and create on Secrets in namespace,
// and a ClusterRole with get and patch on the CRD and the two webhook
// configurations, by name. Bound to the ServiceAccount
// memcached-controller, it is ../deploy-webhook/app-managed/rbac.yaml
// beside ../deploy/rbac.yaml (RBAC), which TestMemcachedWebhookCertRBAC
// keeps true to it.
func WebhookCertRBAC(namespace, secret string) kube.RBAC {
	r := kube.RBAC{Name: FieldManager + "-webhook-cert"}
	Webhooks(appconfig.WebhookConfig{CertSecret: secret, Namespace: namespace}).CertConfig().AddRBAC(&r)
	return r
}

// BuildTelemetry is the App's telemetry, for humus.WithTelemetry, as
// appconfig.BuildTelemetry builds it: metrics in Prometheus' text format,
// served by appconfig.ServeMetrics, traces and logs over OTLP/HTTP when
// OTEL_EXPORTER_OTLP_ENDPOINT is set, and every log record of INFO and
// above on the Host's Stderr, as JSON or, with LOG_FORMAT=console, as
// readable lines.
func BuildTelemetry(ctx context.Context, h humus.Host) (humus.Telemetry, error) {
	return appconfig.BuildTelemetry(ctx, h)
}
