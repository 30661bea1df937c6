// Package appconfig is how the example Apps source their kube.Connection
// and kube.Settings, which the kube package leaves to the end user: in a
// pod from what the kubelet provides, locally from a kubeconfig. An end
// user's App would hold the same few functions of its own.
package appconfig
