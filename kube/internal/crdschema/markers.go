package crdschema

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// qualifiedNamePattern is the pattern Kubernetes' Go source gives a
// condition's type and a port status's error: an optional DNS subdomain
// and a slash, then a qualified name.
const qualifiedNamePattern = `^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`

// sourceMarkers are the validations that the Go source of one of
// Kubernetes' own types carries as +kubebuilder:validation markers on its
// field named name, declared in struct type t: controller-gen emits them,
// and the API server's /openapi/v3, which package upstream's table is made
// from, doesn't have them. These are every such marker in k8s.io/api's
// core and networking v1 and apimachinery's meta/v1 at the release in
// go.mod, but the +kubebuilder:validation:Required of a field that is also
// +optional (PortStatus's error), which controller-gen reads as optional:
// metav1.Condition's (a status of True, False or Unknown; a reason of 1 to
// 1024 characters, and a type of at most 316, each of a pattern; a message
// of at most 32768; an observedGeneration of at least 0), PortStatus's and
// IngressPortStatus's error, and ImageVolumeStatus's imageRef.
func sourceMarkers(t reflect.Type, name string) func(p *apiextensionsv1.JSONSchemaProps) {
	switch t {
	case conditionType:
		switch name {
		case "type":
			return func(p *apiextensionsv1.JSONSchemaProps) {
				p.Pattern, p.MaxLength = qualifiedNamePattern, ptrTo[int64](316)
			}
		case "status":
			return func(p *apiextensionsv1.JSONSchemaProps) {
				p.Enum = []apiextensionsv1.JSON{{Raw: []byte(`"True"`)}, {Raw: []byte(`"False"`)}, {Raw: []byte(`"Unknown"`)}}
			}
		case "observedGeneration":
			return func(p *apiextensionsv1.JSONSchemaProps) { p.Minimum = ptrTo[float64](0) }
		case "reason":
			return func(p *apiextensionsv1.JSONSchemaProps) {
				p.Pattern, p.MinLength, p.MaxLength = `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, ptrTo[int64](1), ptrTo[int64](1024)
			}
		case "message":
			return func(p *apiextensionsv1.JSONSchemaProps) { p.MaxLength = ptrTo[int64](32768) }
		}
	case portStatusType, ingressPortStatusType:
		if name == "error" {
			return func(p *apiextensionsv1.JSONSchemaProps) {
				p.Pattern, p.MaxLength = qualifiedNamePattern, ptrTo[int64](316)
			}
		}
	case imageVolumeStatusType:
		if name == "imageRef" {
			return func(p *apiextensionsv1.JSONSchemaProps) { p.MaxLength = ptrTo[int64](256) }
		}
	}
	return nil
}

var (
	portStatusType        = reflect.TypeFor[corev1.PortStatus]()
	ingressPortStatusType = reflect.TypeFor[networkingv1.IngressPortStatus]()
	imageVolumeStatusType = reflect.TypeFor[corev1.ImageVolumeStatus]()
)
