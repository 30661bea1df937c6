// Package faults holds the Memcached App's fault tests, under the build tag
// controlplane: the App runs as a subprocess of the test binary (two or
// more replicas at once), and each test causes one fault with package
// controlplane (the leader killed, stopped or sent SIGTERM, the API server
// down, etcd frozen, the Lease taken) and asserts what the App does, from
// what each replica records of every reconcile and request it starts.
package faults
