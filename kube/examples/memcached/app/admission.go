package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/z5labs/humus/kube/admission"
)

// The Memcached's admission webhooks: what the CRD's rules (CEL) can't
// say, because it reads one field's value into another's or compares
// quantities as the API server will when it validates the pods.

// Defaulting is the Memcached's defaulting webhook: spec.resources'
// requests default to its limits, resource by resource, as the API server
// defaults a container's, so that a Memcached shows the requests its pods
// will have. A default that copies one field's value into another is what
// a CRD's schema defaults, constants, can't say. Default's handler serves
// it at admission.DefaultPath, and MutatingWebhookConfiguration is its
// configuration.
func Defaulting() admission.Defaulting[Object] {
	return admission.Defaulting[Object]{
		Resource: Memcached.GVR(),
		Default: func(_ context.Context, m *Object) error {
			r := m.Spec.Resources
			if r == nil {
				return nil
			}
			for name, limit := range r.Limits {
				if _, ok := r.Requests[name]; ok {
					continue
				}
				if r.Requests == nil {
					r.Requests = corev1.ResourceList{}
				}
				r.Requests[name] = limit.DeepCopy()
			}
			return nil
		},
	}
}

// Validating is the Memcached's validating webhook, on CREATE and UPDATE:
// no request in spec.resources over its limit, which the API server would
// refuse in the Deployment's pod template, where the controller's apply,
// not the user's write, would fail. Validate's handler serves it at
// admission.ValidatePath, and ValidatingWebhookConfiguration is its
// configuration.
func Validating() admission.Validating[Object] {
	check := func(m *Object) error {
		r := m.Spec.Resources
		if r == nil {
			return nil
		}
		var errs []error
		for _, name := range slices.Sorted(maps.Keys(r.Requests)) {
			req := r.Requests[name]
			if limit, ok := r.Limits[name]; ok && req.Cmp(limit) > 0 {
				errs = append(errs, fmt.Errorf("spec.resources.requests.%s: %s is over its limit %s: lower the request or raise the limit", name, req.String(), limit.String()))
			}
		}
		return errors.Join(errs...)
	}
	return admission.Validating[Object]{
		Resource: Memcached.GVR(),
		Create:   func(_ context.Context, m *Object) error { return check(m) },
		Update:   func(_ context.Context, m, _ *Object) error { return check(m) },
	}
}

// WebhookConfiguration is the configuration of the Memcached's admission
// webhooks, for ValidatingWebhookConfiguration and
// MutatingWebhookConfiguration: both named memcacheds.cache.example.com
// (the names to give webhookcert for it to inject its CA), calling the
// Service of the conversion webhook, Memcached.ConversionWebhook's, which
// serves them beside it.
func WebhookConfiguration() admission.Configuration {
	return admission.Configuration{
		Name: Memcached.GVR().GroupResource().String(),
		Client: admission.ClientConfig{
			Namespace: Memcached.ConversionWebhook.Namespace,
			Name:      Memcached.ConversionWebhook.Name,
		},
	}
}
