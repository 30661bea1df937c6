//go:build controlplane

// Package admission_test runs kube/admission's handlers, served by
// httpserver over TLS, as a real API server's validating and mutating
// admission webhooks.
package admission_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/admission"
)

// TestTheAPIServerAdmitsThroughTheWebhooks registers a validating and a
// mutating webhook for the ConfigMaps labelled webhook-test, served by
// the App, their configurations generated from the values the handlers
// serve (ValidatingWebhookConfiguration, MutatingWebhookConfiguration),
// which the API server takes: a denial reaches the client as a Forbidden
// error with the function's message, and a default is applied from the
// JSON patch.
func TestTheAPIServerAdmitsThroughTheWebhooks(t *testing.T) {
	cluster := controlplanetest.Start(t)
	kc, err := kubernetes.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)

	tel := humustest.NewTelemetry(t)
	host := humus.OSHost()
	listen := host.Listen
	addr := make(chan net.Addr, 1)
	host.Listen = func(ctx context.Context, network, address string) (net.Listener, error) {
		ln, err := listen(ctx, network, address)
		if err == nil {
			addr <- ln.Addr()
		}
		return ln, err
	}
	s := &humus.Setup{Host: host, Telemetry: tel.Telemetry}
	configmaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	validating := admission.Validating[corev1.ConfigMap]{
		Resource: configmaps,
		Create: func(ctx context.Context, cm *corev1.ConfigMap) error {
			if _, ok := cm.Data["password"]; ok {
				return errors.New("data.password: a password goes in a Secret, not a ConfigMap")
			}
			return nil
		},
	}
	validate, err := admission.Validate(s, validating)
	require.NoError(t, err)
	defaulting := admission.Defaulting[corev1.ConfigMap]{
		Resource: configmaps,
		Default: func(ctx context.Context, cm *corev1.ConfigMap) error {
			if cm.Annotations == nil {
				cm.Annotations = map[string]string{}
			}
			cm.Annotations["example.com/defaulted"] = "true"
			return nil
		},
	}
	defaults, err := admission.Default(s, defaulting)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(admission.ValidatePath, validate)
	mux.Handle(admission.DefaultPath, defaults)
	ca, err := httpserver.NewAuthority(0, "127.0.0.1")
	require.NoError(t, err)
	svc, err := httpserver.New(s, httpserver.Config{Name: "webhooks", Addr: "127.0.0.1:0", Handler: mux, Certificate: ca})
	require.NoError(t, err)
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- svc.Serve(serveCtx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, svc.Shutdown(context.Background()))
		require.NoError(t, <-served)
	})
	base := fmt.Sprintf("https://%s", <-addr)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// The configurations are generated from the values the handlers
	// serve, with the test server's URL and CA.
	c := admission.Configuration{
		Name:           "humus-admission-test",
		Client:         admission.ClientConfig{URL: base, CABundle: ca.CABundle()},
		ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"webhook-test": "yes"}},
	}
	vwc, err := admission.ValidatingWebhookConfiguration(c, validating)
	require.NoError(t, err)
	vwc, err = kc.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = kc.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), vwc.Name, metav1.DeleteOptions{})
	})
	mwc, err := admission.MutatingWebhookConfiguration(c, defaulting)
	require.NoError(t, err)
	mwc, err = kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), mwc.Name, metav1.DeleteOptions{})
	})

	cms := kc.CoreV1().ConfigMaps("default")
	labelled := func(name string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"webhook-test": "yes"}}, Data: data}
	}
	// The API server reads webhook configurations from an informer: wait
	// until the mutating one is in effect (polled: the API server says
	// nothing when it is).
	var created *corev1.ConfigMap
	for i := 0; ; i++ {
		created, err = cms.Create(ctx, labelled(fmt.Sprint("plain-", i), map[string]string{"a": "b"}), metav1.CreateOptions{})
		require.NoError(t, err)
		if created.Annotations["example.com/defaulted"] == "true" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the mutating webhook never took effect: %v", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	require.Equal(t, map[string]string{"a": "b"}, created.Data, "the patch changed only what Default did")
	require.Equal(t, map[string]string{"webhook-test": "yes"}, created.Labels)

	// And until the validating one is, which the same informer may bring
	// a moment later.
	for i := 0; ; i++ {
		_, err = cms.Create(ctx, labelled(fmt.Sprint("secretive-", i), map[string]string{"password": "hunter2"}), metav1.CreateOptions{})
		if err != nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.Error(t, err, "the validating webhook denies it")
	require.Contains(t, err.Error(), `admission webhook "v1.configmaps.core" denied the request: data.password: a password goes in a Secret, not a ConfigMap`)

	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled"}, Data: map[string]string{"password": "x"}}, metav1.CreateOptions{})
	require.NoError(t, err, "an object the webhooks' selector doesn't match is not sent to them")
}
