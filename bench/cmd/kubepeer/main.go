// Command kubepeer is the converge benchmark's kube peer: the spec's
// Memcached Reconciler run by kube.NewController as a humus App, with
// Owns(deployments) and no finalizer, as the kubebuilder book's controller
// has none; with -finalizer, kube.Finalize(memcached.Finalizer) with a
// clean-up that does nothing.
//
// bench/cmd/converge starts it; it isn't meant to be run by hand. Flags:
// -kubeconfig (required), -workers (Settings.Workers), -resync
// (Settings.Resync), -finalizer, -namespace (Settings.Namespace, and the
// Lease's) and -cpuprofile (a CPU profile until the first "mem" line).
// Issue 38's member runs add -sharding (Settings.Sharding.Enabled: the
// peer is one member of several, each with its own -identity, which is
// LeaderElection.Identity, "kubepeer" by default), -cache-share
// (Settings.Sharding.CacheShare, which needs -sharding), -lease-duration
// and -renew-deadline (LeaderElection's; 90s and 60s by default, see
// below; RetryPeriod stays kube's 2s) and -log-reconciles, which writes
// to stderr one line as each reconcile starts and one as it returns:
//
//	reconcile start <namespace>/<name> <identity> <unix nanoseconds>
//	reconcile end <namespace>/<name> <identity> <unix nanoseconds>
//
// which the benchmark reads to check that no key was reconciled by two
// members at once. It prints "synced <seconds>" once Controller.Synced is
// healthy, the seconds since it started (looked at every 5ms). A line
// "mem" on stdin makes it print "heapinuse <bytes> heapalloc <bytes>"
// after a garbage collection. SIGTERM or SIGINT stops it, as any humus
// App.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/bench/internal/memcached"
	"github.com/z5labs/humus/bench/internal/peer"
	"github.com/z5labs/humus/health"
	"github.com/z5labs/humus/kube"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig to reach the API server with (required)")
	workers := flag.Int("workers", 1, "Settings.Workers")
	resync := flag.Duration("resync", 10*time.Hour, "Settings.Resync")
	namespace := flag.String("namespace", "default", "Settings.Namespace, and the Lease's namespace")
	finalizer := flag.Bool("finalizer", false, "add kube.Finalize(memcached.Finalizer), whose clean-up does nothing")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile from the start until the first \"mem\" line (convergence) to this file")
	sharding := flag.Bool("sharding", false, "Settings.Sharding.Enabled: be one member of several, each with its own -identity")
	cacheShare := flag.Bool("cache-share", false, "Settings.Sharding.CacheShare: cache only this member's share (needs -sharding)")
	identity := flag.String("identity", "kubepeer", "LeaderElection.Identity: with -sharding, each member's own")
	leaseDuration := flag.Duration("lease-duration", 90*time.Second, "LeaderElection.LeaseDuration")
	renewDeadline := flag.Duration("renew-deadline", 60*time.Second, "LeaderElection.RenewDeadline")
	logReconciles := flag.Bool("log-reconciles", false, "write \"reconcile start|end <key> <identity> <unix ns>\" to stderr around each reconcile")
	flag.Parse()
	var bad []string
	if *kubeconfig == "" {
		bad = append(bad, "-kubeconfig is required")
	}
	if *cacheShare && !*sharding {
		bad = append(bad, "-cache-share needs -sharding")
	}
	if *identity == "" {
		bad = append(bad, "-identity is empty")
	}
	if len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintln(os.Stderr, "kubepeer:", b)
		}
		os.Exit(2)
	}
	stopProfile, err := peer.CPUProfile(*cpuprofile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubepeer:", err)
		os.Exit(1)
	}

	start := time.Now()
	out := new(sync.Mutex)
	go peer.ReportMemory(os.Stdin, os.Stdout, out, stopProfile)

	humus.Main(func(ctx context.Context, s *humus.Setup) ([]humus.Service, error) {
		conn, err := peer.Connection(*kubeconfig)
		if err != nil {
			return nil, err
		}
		client, err := kube.NewClient(s, conn)
		if err != nil {
			return nil, err
		}
		kc, err := kubernetes.NewForConfig(client.Config())
		if err != nil {
			return nil, err
		}
		settings := kube.DefaultSettings()
		settings.Name = memcached.FieldManager
		settings.Namespace = *namespace
		settings.Workers = *workers
		settings.Resync = *resync
		settings.LeaderElection.Namespace = *namespace
		settings.LeaderElection.Identity = *identity
		// The other peers don't elect a leader at all. With kube's
		// defaults (15s, 10s, 2s), a renewal slower than 10s ends the
		// peer: at N=100,000 on the shared machine (load average 30) it
		// lost the Lease after 31,844 objects. A renewal still every 2s,
		// so the requests are the same. Member runs give kube's 15s and
		// 10s back: a SIGKILLed member's keys wait LeaseDuration.
		settings.LeaderElection.LeaseDuration = *leaseDuration
		settings.LeaderElection.RenewDeadline = *renewDeadline
		settings.Sharding.Enabled = *sharding
		settings.Sharding.CacheShare = *cacheShare
		parts := []kube.Part{kube.Owns(appsv1.SchemeGroupVersion.WithResource("deployments"))}
		if *finalizer {
			parts = append(parts, kube.Finalize(memcached.Finalizer, func(context.Context, kube.Object[memcached.MemcachedSpec, memcached.MemcachedStatus]) error {
				return nil
			}))
		}
		var rec kube.Reconciler[memcached.MemcachedSpec, memcached.MemcachedStatus] = memcached.Reconciler{Kube: kc}
		if *logReconciles {
			rec = loggedReconciler{next: rec, identity: *identity, mu: out}
		}
		ctrl, err := kube.NewController(s, client, settings, memcached.Memcached, rec, parts...)
		if err != nil {
			return nil, err
		}
		// Not Init's ctx, which may end with Init: the process's life.
		go reportSynced(context.Background(), ctrl.Synced(), start, out)
		return []humus.Service{ctrl}, nil
	})
}

// reportSynced prints "synced <seconds since start>" once synced is
// healthy, looking every 5ms, or nothing if ctx ends first.
func reportSynced(ctx context.Context, synced health.Monitor, start time.Time, mu *sync.Mutex) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for synced.Healthy(ctx) != nil {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	mu.Lock()
	fmt.Printf("synced %.3f\n", time.Since(start).Seconds())
	mu.Unlock()
}

// loggedReconciler writes "reconcile start <key> <identity> <unix ns>" to
// stderr before next's Reconcile and "reconcile end ..." after it, each
// line in one write under mu (the lock stdout's lines take too).
type loggedReconciler struct {
	next     kube.Reconciler[memcached.MemcachedSpec, memcached.MemcachedStatus]
	identity string
	mu       *sync.Mutex
}

func (l loggedReconciler) Reconcile(ctx context.Context, m kube.Object[memcached.MemcachedSpec, memcached.MemcachedStatus]) (kube.Result[memcached.MemcachedStatus], error) {
	key := m.Namespace + "/" + m.Name
	l.line("start", key)
	defer l.line("end", key)
	return l.next.Reconcile(ctx, m)
}

func (l loggedReconciler) line(what, key string) {
	s := fmt.Sprintf("reconcile %s %s %s %d\n", what, key, l.identity, time.Now().UnixNano())
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = os.Stderr.WriteString(s)
}
