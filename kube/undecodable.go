package kube

import (
	"context"
	"errors"
	"fmt"
)

// maxBlockedMessage bounds the annotation blockedFinalizer applies.
const maxBlockedMessage = 1024

// blockedFinalizer says on an object being deleted, whose finalizer can't
// run because the object doesn't decode, why its deletion waits: it
// applies an annotation named after the finalizer, whose value is decodeErr,
// beside the finalizer, by server-side apply under the controller's field
// manager. The next apply of the finalizer, or its removal, removes the
// annotation. It applies once per object and message, however often the
// key is retried. See "An object the controller can't decode" in the docs.
func (c *Controller) blockedFinalizer(ctx context.Context, u *cachedObject, decodeErr error) error {
	msg := "not finalized: " + decodeErr.Error()
	if len(msg) > maxBlockedMessage {
		msg = msg[:maxBlockedMessage]
	}
	if last, ok := c.blocked.Load(u.GetUID()); ok && last == msg {
		return nil
	}
	if err := errors.Join(ctx.Err(), mayWork(ctx)); err != nil {
		return fmt.Errorf("kube: not annotating %s: the reconcile was cancelled: %w", c.describe(u), err)
	}
	err := c.applyMetadata(ctx, u, map[string]any{
		"finalizers":  []any{c.finalizer},
		"annotations": map[string]any{c.finalizer: msg},
	})
	if err != nil {
		return fmt.Errorf("kube: annotating %s with why its finalizer %q can't run: %w", c.describe(u), c.finalizer, err)
	}
	c.blocked.Store(u.GetUID(), msg)
	return nil
}
