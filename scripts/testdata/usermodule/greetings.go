// Package greetings is a module outside the repository, as a user writes
// one: a controller of Greetings, each of which names a ConfigMap whose
// greeting it reports in its status. scripts/usermodule.sh builds and
// tests it in a temporary directory with GOWORK=off and the docs' replace
// lines, so that what the docs promise a user's module holds compiles and
// passes.
package greetings

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/health"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/admission"
	"github.com/z5labs/humus/kube/webhookserve"
)

// Spec names the ConfigMap whose data's greeting key is the greeting.
type Spec struct {
	ConfigMap string `json:"configMap"`
}

// Status is the greeting, once the ConfigMap exists.
type Status struct {
	Greeting string `json:"greeting,omitempty"`
}

// Object is a Greeting.
type Object = kube.Object[Spec, Status]

// Greetings is the resource.
var Greetings = kube.Resource[Spec, Status]{
	Group: "example.com", Version: "v1", Kind: "Greeting", Plural: "greetings", Scope: kube.Namespaced,
}

// ConfigMaps is the resource the Controller watches and the Reconciler
// reads from its cache.
func ConfigMaps() schema.GroupVersionResource {
	return corev1.SchemeGroupVersion.WithResource("configmaps")
}

// Reconcile reports the greeting of g's ConfigMap, read from the
// Controller's cache; a ConfigMap that doesn't exist leaves the status
// alone until its creation reconciles g.
func Reconcile(ctx context.Context, g Object) (kube.Result[Status], error) {
	configMaps, err := kube.ListerFrom[corev1.ConfigMap](ctx, ConfigMaps())
	if err != nil {
		return kube.Result[Status]{}, err
	}
	cm, err := configMaps.Get(g.Namespace, g.Spec.ConfigMap)
	if apierrors.IsNotFound(err) {
		kube.LoggerFrom(ctx).Info("waiting for the ConfigMap", "configMap", g.Spec.ConfigMap)
		return kube.Result[Status]{}, nil
	}
	if err != nil {
		return kube.Result[Status]{}, err
	}
	if g.Status.Greeting != cm.Data["greeting"] {
		kube.RecorderFrom(ctx).Normal(g, "Greeted", "Read", "greeting "+cm.Data["greeting"])
	}
	return kube.Result[Status]{Status: &Status{Greeting: cm.Data["greeting"]}}, nil
}

// Config is what the App runs with, filled by its main or its test: the
// kube library reads no environment variable.
type Config struct {
	Connection kube.Connection
	Settings   kube.Settings
	// ProbesAddr is where /readyz and /livez are served.
	ProbesAddr string
	// Webhooks is where the validating webhook is served; its zero value
	// serves none.
	Webhooks webhookserve.Config
}

// Validate refuses a Greeting that names no ConfigMap.
func Validate(_ context.Context, g *Object) error {
	if g.Spec.ConfigMap == "" {
		return fmt.Errorf("spec.configMap is empty: name the ConfigMap whose greeting key is the greeting")
	}
	return nil
}

// New is the App's Init with cfg: the Controller, its probes, and, when
// cfg.Webhooks.Addr is set, the validating webhook at
// admission.ValidatePath.
func New(cfg Config) humus.Init {
	return func(ctx context.Context, s *humus.Setup) ([]humus.Service, error) {
		client, err := kube.NewClient(s, cfg.Connection)
		if err != nil {
			return nil, err
		}
		ctrl, err := kube.NewController(s, client, cfg.Settings, Greetings, kube.ReconcilerFunc[Spec, Status](Reconcile),
			kube.Watches(ConfigMaps(),
				kube.References(func(g Object) []string { return []string{g.Spec.ConfigMap} }),
				kube.CacheObjects()))
		if err != nil {
			return nil, err
		}
		if cfg.ProbesAddr == "" {
			return nil, errors.New("the probes' address is empty")
		}
		validate, err := admission.Validate(s, admission.Validating[Object]{Resource: Greetings.GVR(), Create: Validate,
			Update: func(ctx context.Context, g, _ *Object) error { return Validate(ctx, g) }})
		if err != nil {
			return nil, err
		}
		mux := http.NewServeMux()
		mux.Handle(admission.ValidatePath, validate)
		webhooks, err := webhookserve.Serve(s, client, cfg.Webhooks, mux)
		if err != nil {
			return nil, err
		}
		return append([]humus.Service{ctrl, health.NewProbes(s, cfg.ProbesAddr, health.Readiness(ctrl.Synced()))}, webhooks...), nil
	}
}
