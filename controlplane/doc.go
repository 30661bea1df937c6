// Package controlplane runs a real, local Kubernetes control plane for tests
// and demos: etcd, kube-apiserver and kube-controller-manager at Kubernetes
// [Version], with the garbage collector on and no kubelet or scheduler (what
// k3s calls "server --disable-agent").
//
// The three binaries are built from Go modules by [Build], once per version,
// into a cache outside the repository (see [DefaultBinDir]); the nested
// module in this directory's build/ folder pins them. [Start] then makes a
// PKI in Go, starts the processes on 127.0.0.1 on free ports, waits for the
// API server to be ready and returns a [Cluster] with what a client needs:
// the server address, the CA, an admin bearer token and a kubeconfig file.
// [FromKubeconfig] returns a Cluster for an existing cluster instead, so the
// same tests run against kind or k3s.
//
// Processes are started in their own process groups with a parent-death
// signal (Linux), so they are killed with their parent; they are also killed
// when the context given to Start is done, and by [Cluster.Stop].
//
// A test causes faults by name, without process ids: [Cluster.Kill] and
// [Cluster.Restart] (the same port, PKI and etcd data, so clients
// reconnect) of the API server, etcd or the controller manager, and
// [Cluster.Pause] and [Cluster.Continue] (SIGSTOP and SIGCONT, etcd frozen).
// [StartProcess] starts a process of the test's own, such as an App run as
// a subprocess, as a [Process] it can signal, pause, continue or kill.
package controlplane
