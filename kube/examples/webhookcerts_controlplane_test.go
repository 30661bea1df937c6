//go:build controlplane

package examples_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/z5labs/humus/controlplane/controlplanetest"
)

// TestWebhookDeployFilesBuildAndApply builds the Memcached example's
// conversion-webhook deploy files, both ways (memcached/deploy-webhook:
// app-managed and cert-manager), with kustomize's Go API, as kubectl apply
// -k does, checks that each holds all of the example's deploy files (the
// generated admission webhook configurations among them, calling the
// conversion webhook's Service, and given cert-manager's CA by its
// annotation in the cert-manager way, the App's in the app-managed way) and the objects of its way, and applies every object as
// TestDeployFilesBuildAndApply does (server-side apply, a dry run with
// strict field validation; the Namespace for real). cert-manager's Issuer
// and Certificate are applied against stand-in CRDs that accept any field
// (testdata), so their schema is not checked, only that they are objects
// the API server takes.
func TestWebhookDeployFilesBuildAndApply(t *testing.T) {
	cluster := controlplanetest.Start(t)
	env := controlplanetest.NewEnv(t, cluster)
	env.InstallCRD(t, "testdata/cert-manager-issuers.yaml", "issuers.cert-manager.io")
	env.InstallCRD(t, "testdata/cert-manager-certificates.yaml", "certificates.cert-manager.io")
	cfg := cluster.RESTConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))

	build := func(t *testing.T, dir string) resmap.ResMap {
		t.Helper()
		built, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
		require.NoError(t, err, "kustomize build %s", dir)
		return built
	}
	names := func(m resmap.ResMap) []string {
		var got []string
		for _, r := range m.Resources() {
			got = append(got, r.GetKind()+" "+r.GetName())
		}
		return got
	}
	base := names(build(t, "memcached/deploy"))

	for _, tc := range []struct {
		dir   string
		extra []string // beside the example's deploy files
		env   string   // the certificate's variable
		unset string   // a variable the Deployment doesn't set
		// inject is the cert-manager.io/inject-ca-from annotation of the
		// admission webhook configurations, "" for none.
		inject string
	}{
		{"memcached/deploy-webhook/app-managed", []string{
			"Role memcached-controller-webhook-cert",
			"RoleBinding memcached-controller-webhook-cert",
			"ClusterRole memcached-controller-webhook-cert",
			"ClusterRoleBinding memcached-controller-webhook-cert",
		}, "WEBHOOK_CERT_SECRET", "WEBHOOK_CERT_DIR", ""},
		{"memcached/deploy-webhook/cert-manager", []string{
			"Issuer memcached-selfsigned",
			"Certificate memcached-webhook-server-cert",
		}, "WEBHOOK_CERT_DIR", "", "memcached-system/memcached-webhook-server-cert"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			built := build(t, tc.dir)
			// Every object of the example's deploy files, the admission
			// webhook configurations among them, in both ways.
			require.ElementsMatch(t, append(slices.Clone(base), tc.extra...), names(built), "kustomize build %s", tc.dir)

			for _, r := range built.Resources() {
				switch r.GetKind() {
				case "CustomResourceDefinition":
					strategy, err := r.GetString("spec.conversion.strategy")
					require.NoError(t, err)
					require.Equal(t, "Webhook", strategy)
					svc, err := r.GetString("spec.conversion.webhook.clientConfig.service.name")
					require.NoError(t, err)
					require.Equal(t, "memcached-webhooks", svc)
				case "Service":
					// Replicas not yet ready serve the webhook their caches
					// list through (memcached/app's readiness).
					if r.GetName() == "memcached-webhooks" {
						m, err := r.Map()
						require.NoError(t, err)
						spec, _ := m["spec"].(map[string]any)
						require.Equal(t, true, spec["publishNotReadyAddresses"], "the webhooks' Service publishes replicas not yet ready")
					}
				case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
					// The generated configurations (memcached/deploy/webhooks),
					// calling the conversion webhook's Service.
					require.Equal(t, "memcacheds.cache.example.com", r.GetName())
					m, err := r.Map()
					require.NoError(t, err)
					hooks, _ := m["webhooks"].([]any)
					require.Len(t, hooks, 1, "%s webhooks", r.GetKind())
					hook, _ := hooks[0].(map[string]any)
					cc, _ := hook["clientConfig"].(map[string]any)
					svc, _ := cc["service"].(map[string]any)
					require.Equal(t, "memcached-webhooks", svc["name"])
					require.Equal(t, "memcached-system", svc["namespace"])
					require.Equal(t, tc.inject, r.GetAnnotations()["cert-manager.io/inject-ca-from"])
				case "Deployment":
					body, err := r.AsYAML()
					require.NoError(t, err)
					require.Contains(t, string(body), "WEBHOOK_ADDR")
					require.Contains(t, string(body), tc.env)
					if tc.unset != "" {
						require.NotContains(t, string(body), tc.unset)
					}
				}
			}

			for _, r := range built.Resources() {
				gvk := r.GetGvk()
				m, err := mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
				require.NoError(t, err, "the API server's resource of %s", gvk)
				var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
				if ns := r.GetNamespace(); ns != "" {
					ri = dyn.Resource(m.Resource).Namespace(ns)
				}
				body, err := r.AsYAML()
				require.NoError(t, err)
				opts := metav1.PatchOptions{FieldManager: "kubectl", FieldValidation: "Strict", DryRun: []string{metav1.DryRunAll}}
				namespace := gvk.Kind == "Namespace" && gvk.Group == ""
				if namespace {
					opts.DryRun = nil
				}
				_, err = ri.Patch(ctx, r.GetName(), types.ApplyPatchType, body, opts)
				require.NoError(t, err, "server-side apply of %s %s", gvk.Kind, r.GetName())
				if !namespace {
					_, err = ri.Get(ctx, r.GetName(), metav1.GetOptions{})
					require.True(t, apierrors.IsNotFound(err), "%s %s after a dry run: %v", gvk.Kind, r.GetName(), err)
				}
			}
		})
	}
}
