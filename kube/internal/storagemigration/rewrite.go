package storagemigration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// rewriteAll lists every object of the resource, in every namespace,
// whatever the controller's selectors, a page of metadata at a time, and
// writes each (rewrite).
func (m *Migration) rewriteAll(ctx context.Context, log *slog.Logger) (counts, error) {
	var n counts
	list := m.cfg.Metadata.Resource(m.cfg.Resource)
	opts := metav1.ListOptions{Limit: page}
	for {
		page, err := list.List(ctx, opts)
		if err != nil {
			return n, fmt.Errorf("listing %s: %w", m.cfg.Resource.Resource, err)
		}
		for i := range page.Items {
			if err := m.rewrite(ctx, &page.Items[i], &n); err != nil {
				return n, err
			}
		}
		opts.Continue = page.Continue
		if opts.Continue == "" {
			return n, nil
		}
		log.InfoContext(ctx, "storage migration in progress", "objects", n.total(), "rewritten", n.rewritten)
	}
}

// rewrite writes obj as it is: a JSON merge patch of its resourceVersion
// alone, which changes no field, the patch kube-controller-manager's
// migrator sends. The API server reads the object, applies the patch, and
// encodes the result at the storage version: if that is byte for byte
// what it has stored, it writes nothing and answers with the object
// unchanged, its resourceVersion too; otherwise it stores it, under a new
// resourceVersion. No field changes, so no managedFields entry is added.
// A conflict (the object was written since the list, and so is stored at
// the storage version) or a NotFound (deleted since) leaves nothing to
// do. Config.Writes is told of the write, so that the controller's
// informer doesn't reconcile the object again for it.
func (m *Migration) rewrite(ctx context.Context, obj *metav1.PartialObjectMetadata, n *counts) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": obj.ResourceVersion}})
	if err != nil {
		return err
	}
	key := obj.Name
	if obj.Namespace != "" {
		key = obj.Namespace + "/" + obj.Name
	}
	result := rewritten
	// The write's event is held while it is in flight, and its version
	// kept until its event comes; a write the API server skipped has no
	// event to come, so its version isn't kept.
	if m.cfg.Writes != nil {
		m.cfg.Writes.Writing(key)
	}
	got, err := m.cfg.Metadata.Resource(m.cfg.Resource).Namespace(obj.Namespace).Patch(ctx, obj.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: m.cfg.Name})
	if err != nil {
		got = nil
	} else if got.ResourceVersion == obj.ResourceVersion {
		result = unchanged
	}
	if m.cfg.Writes != nil {
		m.cfg.Writes.Wrote(key, got, result == unchanged)
	}
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		result = gone
	case err != nil:
		return fmt.Errorf("rewriting %s: %w", key, err)
	}
	switch result {
	case rewritten:
		n.rewritten++
	case unchanged:
		n.unchanged++
	default:
		n.gone++
	}
	m.objects.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(
		m.cfg.ControllerAttribute,
		attribute.String(attrResult, result))))
	return nil
}
