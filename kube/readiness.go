package kube

import (
	"context"
	"fmt"

	"github.com/z5labs/humus/health"
)

// Synced is healthy once the controller's caches have synced, and from then
// until Serve returns, except while a cache has had no watch on the API
// server for longer than Settings.WatchTimeout: such a cache is stale. It holds on every replica, leader or not, so a
// rollout isn't held up by the replicas waiting for the Lease. It is for
// readiness only: serve it as health.Readiness(ctrl.Synced()).
func (c *Controller) Synced() health.Monitor { return syncedMonitor{c} }

type syncedMonitor struct{ c *Controller }

// Healthy returns nil once the caches have synced, until Serve returns,
// unless one is stale, and otherwise an error naming the controller, and
// each stale cache; before the caches have synced, each cache not synced
// whose list or watch failed, with its last error (a 403 names the
// permission the controller lacks: the verb, the resource and the
// namespace).
func (m syncedMonitor) Healthy(context.Context) error {
	if !m.c.synced.Load() {
		if cs := m.c.starting.Load(); cs != nil {
			if err := cs.unsynced(); err != nil {
				return fmt.Errorf("kube: controller %s: its caches have not synced: %w", m.c.settings.Name, err)
			}
		}
		return fmt.Errorf("kube: controller %s: its caches have not synced", m.c.settings.Name)
	}
	if cs := m.c.current.Load(); cs != nil {
		if err := cs.stale(); err != nil {
			return fmt.Errorf("kube: controller %s: %w", m.c.settings.Name, err)
		}
	}
	return nil
}
