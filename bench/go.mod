module github.com/z5labs/humus/bench

go 1.26.0

require (
	github.com/z5labs/humus v0.1.0
	github.com/z5labs/humus/controlplane v0.1.0
	github.com/z5labs/humus/kube v0.1.0
	k8s.io/api v0.37.2
	k8s.io/apiextensions-apiserver v0.37.2
	k8s.io/apimachinery v0.37.2
	k8s.io/client-go v0.37.2
)

replace (
	github.com/z5labs/humus => ../
	github.com/z5labs/humus/controlplane => ../controlplane
	github.com/z5labs/humus/kube => ../kube
)
