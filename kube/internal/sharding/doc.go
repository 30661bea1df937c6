// Package sharding is a shard member of a kube controller with
// Settings.Sharding on: its Lease and the others', its loop, the view of
// the live members it acknowledges, which keys it owns in a view
// (rendezvous hashing), which keys it takes while a view changes, and its
// gauges. kube keeps the public Sharding, CheckSharding and the sharded
// Serve path, and makes a Member with New from a Config: its identity and
// names, LeaderElection's durations, the Lease client, the work queue, the
// resource's informer, its Tenure (the deadline-and-loss half a member
// shares with kube's leader) and its telemetry.
//
// A member's life: New, then Join (create its Lease, list the others',
// start their informer), Run (renew every RetryPeriod, step through view
// changes), Take for each key a worker hands out, and Leave.
//
// Its invariants:
//
//   - No key is reconciled by two members at once. A member takes the keys
//     it gains in a view only once every live member it sees has
//     acknowledged that view on its Lease, and before it acknowledges a
//     new view it stops taking the keys it loses there and waits for their
//     reconciles in flight, at most LeaseDuration: then it cancels them
//     with ErrKeyMoved and acknowledges.
//   - While a view changes, a member takes only the keys that are its own
//     in every view since the last agreed one (keeps).
//   - A member past its deadline, RenewDeadline after the start of its last
//     renewal, never renews: the write is not sent, and its Tenure is lost.
//   - Another member's Lease counts as live until it was released, or it
//     has stayed unchanged for LeaseDuration by this member's clock and a
//     Get confirms it (then it is deleted, on that uid and
//     resourceVersion).
//   - A Lease of its name held and renewed by another process of its
//     identity is an error, never shared (Join); one taken over by such a
//     process loses the Tenure.
//
// It keeps no package-level mutable state and reads no environment.
package sharding
