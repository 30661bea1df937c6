package applyset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// Child is a child pruning may delete: its namespace, name and uid, as a
// cache saw it.
type Child struct {
	Namespace, Name string
	UID             types.UID
	// resourceVersion is the one at which a fresh GET found it prunable.
	resourceVersion string
}

// Key is the child's namespace/name, or name.
func (ch Child) Key() string {
	if ch.Namespace == "" {
		return ch.Name
	}
	return ch.Namespace + "/" + ch.Name
}

// Parent is an ApplySet's parent, the reconciled object.
type Parent struct {
	// ID is its ApplySet's.
	ID string
	// UID is the parent's: its children's controller owner reference names
	// it.
	UID types.UID
	// Name describes it in errors, such as "Widget default/w1".
	Name string
}

// Pruner deletes a reconcile's children that its ApplySet no longer
// holds.
type Pruner struct {
	// Client reads and deletes the children.
	Client dynamic.Interface
	// Log returns the logger of a reconcile's context.
	Log func(context.Context) *slog.Logger
	// MayWork returns an error once the reconcile of a context may no
	// longer write, its Lease lapsed; nil allows it always. A context done
	// stops the deletions too.
	MayWork func(context.Context) error
}

// Prune deletes the children of parent of resource gvr that its ApplySet
// holds, of stale: those a cache found controlled by parent and that the
// reconcile didn't write. What the API server holds now decides, not the
// cache: a child stale names that was given to another owner since, or
// never labelled part of the set, is left alone. The "prune preview"
// record names what is about to go; with dryRun, nothing goes.
func (p Pruner) Prune(ctx context.Context, gvr schema.GroupVersionResource, parent Parent, stale []Child, dryRun bool) error {
	if len(stale) == 0 {
		return nil
	}
	ri := p.Client.Resource(gvr)
	var doomed []Child
	var unlabelled, names []string
	for _, ch := range stale {
		got, err := ri.Namespace(ch.Namespace).Get(ctx, ch.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("kube: reading %s %s, a child of %s to prune: %w", gvr.Resource, ch.Key(), parent.Name, err)
		case got.GetUID() != ch.UID || !controlledBy(got, parent.UID):
		case got.GetLabels()[PartOfLabel] != parent.ID:
			unlabelled = append(unlabelled, ch.Key())
		default:
			ch.resourceVersion = got.GetResourceVersion()
			doomed = append(doomed, ch)
			names = append(names, ch.Key())
		}
	}
	log := p.Log(ctx)
	if len(unlabelled) > 0 {
		log.InfoContext(ctx, "not pruned: not labelled part of the ApplySet",
			slog.String("resource", gvr.String()), slog.Any("children", unlabelled),
			slog.String("label", PartOfLabel+"="+parent.ID))
	}
	if len(doomed) == 0 {
		return nil
	}
	log.InfoContext(ctx, "prune preview", slog.String("resource", gvr.String()), slog.Any("children", names),
		slog.String("applyset", parent.ID), slog.Bool("dryRun", dryRun))
	if dryRun {
		return nil
	}
	return p.delete(ctx, gvr, parent, doomed)
}

// delete deletes doomed, children of parent of resource gvr, in the
// background, each with a precondition on its uid and the resourceVersion
// its check read, unless the reconcile is cancelled first. A child gone
// already, or changed since that check, is no error.
func (p Pruner) delete(ctx context.Context, gvr schema.GroupVersionResource, parent Parent, doomed []Child) error {
	ri := p.Client.Resource(gvr)
	background := metav1.DeletePropagationBackground
	for _, ch := range doomed {
		if err := errors.Join(ctx.Err(), p.mayWork(ctx)); err != nil {
			return fmt.Errorf("kube: not pruning %s %s: the reconcile was cancelled: %w", gvr.Resource, ch.Key(), err)
		}
		// The resourceVersion too: a child given to another owner, or
		// unlabelled, since the GET that found it prunable is left alone.
		uid, rv := ch.UID, ch.resourceVersion
		err := ri.Namespace(ch.Namespace).Delete(ctx, ch.Name, metav1.DeleteOptions{
			Preconditions:     &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
			PropagationPolicy: &background,
		})
		switch {
		case err == nil:
			p.Log(ctx).InfoContext(ctx, "pruned", slog.String("resource", gvr.String()), slog.String("child", ch.Key()))
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone already, or changed since the GET (another object of
			// its name, another owner's, or updated: a change to a child
			// queues its owner again, which prunes it then if it still
			// may).
		default:
			return fmt.Errorf("kube: pruning %s %s, a child of %s: %w", gvr.Resource, ch.Key(), parent.Name, err)
		}
	}
	return nil
}

// mayWork is p.MayWork's answer for ctx, nil without one.
func (p Pruner) mayWork(ctx context.Context) error {
	if p.MayWork == nil {
		return nil
	}
	return p.MayWork(ctx)
}

// controlledBy reports whether u's controller owner reference names uid.
func controlledBy(u *unstructured.Unstructured, uid types.UID) bool {
	ref := metav1.GetControllerOfNoCopy(u)
	return ref != nil && ref.UID == uid
}
