package app_test

import (
	"crypto/tls"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

// rbacHeader opens ../deploy/rbac.yaml: the file is generated.
const rbacHeader = `# The RBAC the Memcached controller runs with, and nothing more: app.RBAC,
# the Controller's own rules (kube.Controller.RBAC) and its Reconciler's,
# bound to the ServiceAccount memcached-controller. Generated: in
# kube/examples/memcached, go test ./app -run TestMemcachedRBAC -update
# rewrites it.
# The whole-App test TestMemcachedApp/RunsInAPodWithExactlyTheDeployRBAC
# applies it and runs the App with a token of the ServiceAccount, and
# TestMemcachedApp/OneRuleLessIsNamed runs it without one rule.
`

// TestMemcachedRBAC keeps ../deploy/rbac.yaml true to app.RBAC of the
// Controller the App builds with the deploy files' Settings (Name
// FieldManager, the Lease in memcached-system): a part or a rule added in
// Go that isn't in the YAML fails here. -update rewrites the file.
func TestMemcachedRBAC(t *testing.T) {
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: humustest.NewTelemetry(t).Telemetry}
	// NewClient and NewController open no connection.
	client, err := kube.NewClient(s, kube.Connection{Server: "127.0.0.1:6443", TLS: &tls.Config{}})
	require.NoError(t, err)
	settings := kube.DefaultSettings()
	settings.Name = app.FieldManager
	settings.LeaderElection.Namespace = "memcached-system"
	settings.LeaderElection.Identity = "memcached-controller-0"
	ctrl, err := app.NewController(s, client, settings)
	require.NoError(t, err)
	yaml, err := app.RBAC(ctrl).YAML("memcached-system", "memcached-controller")
	require.NoError(t, err)
	golden(t, "../deploy/rbac.yaml", append([]byte(rbacHeader), yaml...))
}

// webhookCertRBACHeader opens ../deploy-webhook/app-managed/rbac.yaml:
// the file is generated.
const webhookCertRBACHeader = `# What package kube/webhookcert needs, and nothing more, when the App keeps
# its webhooks' certificate in the Secret memcached-webhook-cert
# (WEBHOOK_CERT_SECRET): app.WebhookCertRBAC, webhookcert.Config.AddRBAC's
# rules, bound to the ServiceAccount memcached-controller. A Role: get and
# update on that one Secret, and create on Secrets in memcached-system (RBAC
# can't limit a create by resourceNames: the name isn't known to it when
# the create is authorized). A ClusterRole: get and patch (the caBundle is
# read, and applied only when it differs) on the CRD and the two admission
# webhook configurations, by name. No list, no watch, no other Secret.
# Generated: in kube/examples/memcached, go test ./app -run
# TestMemcachedWebhookCertRBAC -update rewrites it.
# The whole-App test TestMemcachedApp/InjectsItsCAIntoTheCRDAndBothWebhookConfigurationsWithExactlyTheAppManagedRBAC
# runs the App with a token of the ServiceAccount bound to it and
# ../../deploy/rbac.yaml alone.
`

// TestMemcachedWebhookCertRBAC keeps ../deploy-webhook/app-managed/rbac.yaml
// true to app.WebhookCertRBAC of the Secret that overlay names
// (memcached-webhook-cert in memcached-system): an object whose caBundle
// the App injects into, added in Go, that isn't in the YAML fails here.
// -update rewrites the file.
func TestMemcachedWebhookCertRBAC(t *testing.T) {
	yaml, err := app.WebhookCertRBAC("memcached-system", "memcached-webhook-cert").YAML("memcached-system", "memcached-controller")
	require.NoError(t, err)
	golden(t, "../deploy-webhook/app-managed/rbac.yaml", append([]byte(webhookCertRBACHeader), yaml...))
}
