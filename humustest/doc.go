// Package humustest runs humus Services and whole Apps inside tests: an
// in-memory Telemetry whose spans, metrics and log records a test reads
// (NewTelemetry), a fake Host with an in-memory network, environment, files,
// signals and standard error (NewHost), a harness that runs one Service and
// fails the test if it errs or leaks a goroutine (TestService), and an
// in-process App runner with signal injection that returns the exit code
// (RunApp).
//
// Everything here works inside a testing/synctest bubble: nothing starts a
// goroutine that outlives what the test stops, and the in-memory network is
// built on channels, which block durably. Create a Host inside the bubble
// that uses it.
package humustest
