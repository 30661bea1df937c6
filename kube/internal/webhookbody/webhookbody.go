// Package webhookbody reads the reviews the API server POSTs to a webhook: a
// ConversionReview (package kube/conversion) or an AdmissionReview (package
// kube/admission). It owns what both webhooks check before their own work:
// the method, the Content-Type, a bound on the body's size, the JSON
// decode, and the review's kind and apiVersion. Each refusal is an HTTP
// status code and a message naming what was wrong, for the webhook to send.
package webhookbody

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"
)

// Read reads r's body into review, a review of kind want; tm is review's
// TypeMeta, checked against want after the decode. article is the
// English article of want's kind ("a" or "an"), and fix says how to make
// the API server send want's apiVersion. maxBytes bounds the body.
//
// It returns 0 and "" when review holds a review of kind want; else the
// status code to answer (405, with the Allow header set, for a method other
// than POST; 415 for a Content-Type other than application/json; 413 for a
// body over maxBytes; 400 for a body that doesn't decode or is of another
// kind or apiVersion) and a message naming what was wrong. The decode is
// case-sensitive and keeps integers as int64, as the API server's own is.
func Read(w http.ResponseWriter, r *http.Request, maxBytes int64, review any, tm *metav1.TypeMeta, want schema.GroupVersionKind, article, fix string) (int, string) {
	kind := want.Kind
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return http.StatusMethodNotAllowed, fmt.Sprintf("%s %s is POSTed, not %s", article, kind, r.Method)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return http.StatusUnsupportedMediaType, fmt.Sprintf("the Content-Type is %q, not application/json", r.Header.Get("Content-Type"))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return http.StatusRequestEntityTooLarge, fmt.Sprintf("the %s is larger than %d bytes", kind, maxBytes)
		}
		return http.StatusBadRequest, fmt.Sprintf("reading the %s: %v", kind, err)
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(body, review); err != nil {
		return http.StatusBadRequest, fmt.Sprintf("the body is no %s: %v", kind, err)
	}
	if gvk := tm.GroupVersionKind(); gvk != want {
		return http.StatusBadRequest, fmt.Sprintf("the body is a %q of apiVersion %q, not %s %s of %s: %s", tm.Kind, tm.APIVersion, article, kind, want.GroupVersion(), fix)
	}
	return 0, ""
}
