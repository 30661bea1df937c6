// Package controlplane starts a real local Kubernetes control plane.
package controlplane
