package objcache

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
)

func TestAWriteThatFailsToReadKeepsItsErrorForTheClient(t *testing.T) {
	broken := errors.New("connection reset")
	resp := &http.Response{StatusCode: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(io.MultiReader(strings.NewReader(`{"metadata":`), errReader{broken}))}
	require.Nil(t, CreatedMetadata(resp, nil))
	b, err := io.ReadAll(resp.Body)
	require.ErrorIs(t, err, broken)
	require.Equal(t, `{"metadata":`, string(b))
}

func TestAWritesAnswerIsReadInProtobufAsClientGosTypedClientsAskForIt(t *testing.T) {
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: "team-a", UID: "cm-uid", ResourceVersion: "5",
			Labels:          map[string]string{"team": "a", "app": "widgets"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "test.example.com/v1", Kind: "Widget", Name: "w1", UID: "w-uid", Controller: ptr.To(true)}}},
		Data: map[string]string{"a": "b"},
	}
	var buf bytes.Buffer
	require.NoError(t, protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(cm, &buf))
	sent := buf.Bytes()
	resp := &http.Response{StatusCode: http.StatusCreated, Header: http.Header{"Content-Type": {"application/vnd.kubernetes.protobuf"}},
		Body: io.NopCloser(bytes.NewReader(sent))}
	got := CreatedMetadata(resp, nil)
	require.NotNil(t, got)
	require.Equal(t, []string{"w1", "team-a", "cm-uid", "5"}, []string{got.Name, got.Namespace, string(got.UID), got.ResourceVersion})
	require.Equal(t, cm.OwnerReferences, got.OwnerReferences)
	require.Equal(t, cm.Labels, got.Labels, "the labels, which a label-selected Owns matches")
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, sent, b, "the client reads the answer as the API server sent it")

	resp.Header.Set("Content-Type", "application/cbor")
	resp.Body = io.NopCloser(bytes.NewReader(sent))
	require.Nil(t, CreatedMetadata(resp, nil), "an answer neither JSON nor protobuf isn't read")
}
