package kube

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// newElector returns the controller's leader elector, on a Lease named
// Settings.Name in LeaderElection.Namespace, held as
// LeaderElection.Identity. Every controller elects a leader: there is no
// option to turn it off.
//
// The lead's context is sent on started when the replica takes the Lease;
// it is done once the Lease is lost. The Lease is released when the
// elector's own context is cancelled (ReleaseOnCancel), which Serve does
// only after the reconciles in flight have finished, as ReleaseOnCancel's
// doc requires.
func (c *Controller) newElector(started chan<- context.Context) (*leaderelection.LeaderElector, error) {
	le := c.settings.LeaderElection
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: c.settings.Name, Namespace: le.Namespace},
		Client:     c.clients.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Name:            c.settings.Name,
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { started <- ctx },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("kube: leader election for controller %s: %w", c.settings.Name, err)
	}
	return elector, nil
}
