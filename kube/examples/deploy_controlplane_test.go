//go:build controlplane

// Package examples_test checks the examples' deploy files as users apply
// them.
package examples_test

import (
	"context"
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
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/z5labs/humus/controlplane/controlplanetest"
)

// TestDeployFilesBuildAndApply builds each example's deploy directory with
// kustomize's Go API, as kubectl apply -k does, and applies every object it
// builds to the local API server with server-side apply, in a dry run
// (DryRun All) with strict field validation: the API server validates and
// admits each object, the Memcached example's golden CRD and generated
// webhook configurations among them, and stores none. The Namespaces are the exception: a dry run of an object in
// a namespace that doesn't exist is refused, so they are applied for real.
func TestDeployFilesBuildAndApply(t *testing.T) {
	cluster := controlplanetest.Start(t)
	cfg := cluster.RESTConfig()
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))

	for _, tc := range []struct {
		dir     string
		objects []string // what the build holds
	}{
		{"memcached/deploy", []string{
			"CustomResourceDefinition memcacheds.cache.example.com",
			"Namespace memcached-system",
			"ServiceAccount memcached-controller",
			"ClusterRole memcached-controller",
			"ClusterRoleBinding memcached-controller",
			"Role memcached-controller-leader-election",
			"RoleBinding memcached-controller-leader-election",
			"ClusterRole memcached-controller-metrics-auth",
			"ClusterRoleBinding memcached-controller-metrics-auth",
			"ClusterRole memcached-controller-metrics-reader",
			"FlowSchema memcached-controller-leader-election",
			"Deployment memcached-controller",
			"Service memcached-controller-metrics",
			"Service memcached-webhooks",
			"ValidatingWebhookConfiguration memcacheds.cache.example.com",
			"MutatingWebhookConfiguration memcacheds.cache.example.com",
		}},
		{"defaultdeny/deploy", []string{
			"Namespace default-deny-system",
			"ServiceAccount default-deny",
			"ClusterRole default-deny",
			"ClusterRoleBinding default-deny",
			"Role default-deny-leader-election",
			"RoleBinding default-deny-leader-election",
			"ClusterRole default-deny-metrics-auth",
			"ClusterRoleBinding default-deny-metrics-auth",
			"ClusterRole default-deny-metrics-reader",
			"Deployment default-deny",
			"Service default-deny-metrics",
		}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			built, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), tc.dir)
			require.NoError(t, err, "kustomize build %s", tc.dir)
			var got []string
			for _, r := range built.Resources() {
				got = append(got, r.GetKind()+" "+r.GetName())
			}
			require.ElementsMatch(t, tc.objects, got, "kustomize build %s", tc.dir)

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
					// A dry run stores nothing.
					_, err = ri.Get(ctx, r.GetName(), metav1.GetOptions{})
					require.True(t, apierrors.IsNotFound(err), "%s %s after a dry run: %v", gvk.Kind, r.GetName(), err)
				}
			}
		})
	}
}
