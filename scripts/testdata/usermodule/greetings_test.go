package greetings_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/kube"

	"example.com/greetings"
)

func TestReconcileReportsTheGreetingOfItsConfigMap(t *testing.T) {
	rt, err := kube.NewReconcileTest("greetings", kube.TestObjects(greetings.ConfigMaps(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "words", Namespace: "ns"},
		Data:       map[string]string{"greeting": "hello"},
	}))
	require.NoError(t, err)
	var g greetings.Object
	g.Name, g.Namespace, g.Spec.ConfigMap = "hi", "ns", "words"
	res, err := greetings.Reconcile(rt.Context(t.Context()), g)
	require.NoError(t, err)
	require.Equal(t, &greetings.Status{Greeting: "hello"}, res.Status)
	evs, err := rt.Events()
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, "Greeted", evs[0].Reason)

	g.Spec.ConfigMap = "missing"
	res, err = greetings.Reconcile(rt.Context(t.Context()), g)
	require.NoError(t, err)
	require.Nil(t, res.Status)
}

func TestValidateRefusesAGreetingWithoutAConfigMap(t *testing.T) {
	var g greetings.Object
	require.EqualError(t, greetings.Validate(t.Context(), &g), "spec.configMap is empty: name the ConfigMap whose greeting key is the greeting")
	g.Spec.ConfigMap = "words"
	require.NoError(t, greetings.Validate(t.Context(), &g))
}
