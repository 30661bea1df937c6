package webhookcert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1ac "k8s.io/apiextensions-apiserver/pkg/client/applyconfiguration/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionregistrationv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
)

// The CA bundle injected into the named CRDs' conversion webhook and the
// webhook configurations: a server-side apply of that one field, only when
// it differs.

// inject gives bundle to each named CRD and webhook configuration whose
// caBundle differs, with a server-side apply of that field alone under the
// field manager, forced: another manager's value (kubectl's, from a CRD
// file with a caBundle) is taken over, since only this one is right.
func (c *Certs) inject(ctx context.Context, bundle []byte) error {
	opts := metav1.ApplyOptions{FieldManager: c.cfg.FieldManager, Force: true}
	var errs []error
	crds := c.ext.ApiextensionsV1().CustomResourceDefinitions()
	for _, name := range c.cfg.CRDs {
		crd, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("webhookcert: reading the CRD %s: %w", name, err))
			continue
		}
		conv := crd.Spec.Conversion
		if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter || conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
			errs = append(errs, fmt.Errorf("webhookcert: the CRD %s has no conversion webhook (spec.conversion.strategy Webhook with a clientConfig) to give a caBundle", name))
			continue
		}
		if bytes.Equal(conv.Webhook.ClientConfig.CABundle, bundle) {
			continue
		}
		_, err = crds.Apply(ctx, apiextensionsv1ac.CustomResourceDefinition(name).WithSpec(
			apiextensionsv1ac.CustomResourceDefinitionSpec().WithConversion(
				apiextensionsv1ac.CustomResourceConversion().WithWebhook(
					apiextensionsv1ac.WebhookConversion().WithClientConfig(
						apiextensionsv1ac.WebhookClientConfig().WithCABundle(bundle...))))), opts)
		if err != nil {
			errs = append(errs, fmt.Errorf("webhookcert: giving the CRD %s its caBundle: %w", name, err))
			continue
		}
		c.log.InfoContext(ctx, "gave the CRD the webhooks' CA bundle", "k8s.crd.name", name)
	}
	vwcs := c.kc.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	for _, name := range c.cfg.ValidatingWebhookConfigurations {
		cfg, err := vwcs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("webhookcert: reading the ValidatingWebhookConfiguration %s: %w", name, err))
			continue
		}
		if !slices.ContainsFunc(cfg.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool {
			return !bytes.Equal(w.ClientConfig.CABundle, bundle)
		}) {
			continue
		}
		// Every webhook's, not only those that differ: an apply that
		// leaves out a field its manager set removes it.
		ac := admissionregistrationv1ac.ValidatingWebhookConfiguration(name)
		for _, w := range cfg.Webhooks {
			ac.WithWebhooks(admissionregistrationv1ac.ValidatingWebhook().WithName(w.Name).WithClientConfig(
				admissionregistrationv1ac.WebhookClientConfig().WithCABundle(bundle...)))
		}
		if _, err := vwcs.Apply(ctx, ac, opts); err != nil {
			errs = append(errs, fmt.Errorf("webhookcert: giving the ValidatingWebhookConfiguration %s its caBundle: %w", name, err))
		}
	}
	mwcs := c.kc.AdmissionregistrationV1().MutatingWebhookConfigurations()
	for _, name := range c.cfg.MutatingWebhookConfigurations {
		cfg, err := mwcs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("webhookcert: reading the MutatingWebhookConfiguration %s: %w", name, err))
			continue
		}
		if !slices.ContainsFunc(cfg.Webhooks, func(w admissionregistrationv1.MutatingWebhook) bool {
			return !bytes.Equal(w.ClientConfig.CABundle, bundle)
		}) {
			continue
		}
		// Every webhook's, not only those that differ: an apply that
		// leaves out a field its manager set removes it.
		ac := admissionregistrationv1ac.MutatingWebhookConfiguration(name)
		for _, w := range cfg.Webhooks {
			ac.WithWebhooks(admissionregistrationv1ac.MutatingWebhook().WithName(w.Name).WithClientConfig(
				admissionregistrationv1ac.WebhookClientConfig().WithCABundle(bundle...)))
		}
		if _, err := mwcs.Apply(ctx, ac, opts); err != nil {
			errs = append(errs, fmt.Errorf("webhookcert: giving the MutatingWebhookConfiguration %s its caBundle: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
