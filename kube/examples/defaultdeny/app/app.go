package app

import (
	"context"
	"errors"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/health"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/examples/appconfig"
)

// Config is everything the default-deny App runs with: its Connection, its
// Controller's Settings (whose Name is FieldManager, and whose Namespace
// must be "", since a Namespace is cluster-scoped) and its probes' address.
type Config = appconfig.Config

// ReadConfig sources the App's Config from s.Host's environment and files
// (see package appconfig for every variable). Settings.Name is
// FieldManager. It returns one error naming every variable that is missing
// or malformed.
func ReadConfig(ctx context.Context, s *humus.Setup) (Config, error) {
	return appconfig.Read(ctx, s, FieldManager)
}

// Init is the default-deny App's humus.Init: it reads its Config with
// ReadConfig, and builds its Services as New's Init does.
func Init(ctx context.Context, s *humus.Setup) ([]humus.Service, error) {
	cfg, err := ReadConfig(ctx, s)
	if err != nil {
		return nil, err
	}
	return New(cfg)(ctx, s)
}

// New returns the Init of a default-deny App that runs with cfg. The Init
// builds the Client and a clientset on cfg.Connection, and returns its
// Services: the Controller of Namespaces, reconciled by DefaultDeny, that
// owns networkpolicies; the probes Service on cfg.ProbesAddr serving
// health.Readiness(ctrl.Synced()); and, when cfg.Metrics.Addr is set, the
// metrics Service of appconfig.ServeMetrics, over TLS to the callers the
// API server authorizes. It returns the errors NewClient,
// NewKindController and ServeMetrics return.
func New(cfg Config) humus.Init {
	return func(ctx context.Context, s *humus.Setup) ([]humus.Service, error) {
		client, err := kube.NewClient(s, cfg.Connection)
		if err != nil {
			return nil, err
		}
		kc, err := kubernetes.NewForConfig(client.Config())
		if err != nil {
			return nil, err
		}
		ctrl, err := kube.NewKindController(s, client, cfg.Settings, Namespaces, DefaultDeny{Kube: kc},
			kube.Owns(networkingv1.SchemeGroupVersion.WithResource("networkpolicies")),
		)
		if err != nil {
			return nil, err
		}
		if cfg.ProbesAddr == "" {
			return nil, errors.New("the probes' address is empty")
		}
		probes := health.NewProbes(s, cfg.ProbesAddr, health.Readiness(ctrl.Synced()))
		metrics, err := appconfig.ServeMetrics(s, client, cfg.Metrics)
		if err != nil {
			return nil, err
		}
		if metrics == nil {
			return []humus.Service{ctrl, probes}, nil
		}
		return []humus.Service{ctrl, probes, metrics}, nil
	}
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
