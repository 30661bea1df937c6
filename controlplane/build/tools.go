//go:build tools

// Package build pins the Kubernetes control-plane binaries that
// github.com/z5labs/humus/controlplane builds: etcd, kube-apiserver and
// kube-controller-manager. It is a module of its own so that the staging
// replace lines that k8s.io/kubernetes needs stay out of every other
// module's graph; it is not part of the go.work workspace.
package build

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
