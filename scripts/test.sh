#!/usr/bin/env bash
# Runs every test of every module: lint, unit tests (with the race
# detector), and the tests against a real local control plane, whose
# binaries are built from Go modules once per version into the user's cache.
# Set HUMUS_TEST_KUBECONFIG to run the control-plane tests against an
# existing cluster instead.
set -euo pipefail
cd "$(dirname "$0")/.."

# One pattern per module of go.work: in a workspace, ./kube/... matches the
# kube module's packages only, not those of the modules nested in it.
pkgs=(./... ./kube/... ./kube/examples/... ./kube/internal/controlplanetests/...
  ./controlplane/... ./bench/...)

echo "== lint"
bash scripts/lint.sh

echo "== API compatibility with each module's last release tag"
bash scripts/apicheck.sh

echo "== vet, with the controlplane build tag"
go vet -tags controlplane "${pkgs[@]}"
(cd bench/crpeer && GOWORK=off go vet ./...)

echo "== the local control plane's binaries"
go run ./controlplane/cmd/controlplane build

echo "== unit tests"
go test -race -count=1 "${pkgs[@]}"

echo "== the converge benchmark, smoke run (N=10, W=1: it works, not how fast)"
go run ./bench/cmd/converge -smoke -json ""

echo "== tests against the local control plane"
# One package at a time: each starts its own control plane, and the
# whole-App tests assert timings (a scale undone within a second, a takeover
# inside LeaseDuration) that two clusters on two cores would blur. The kube
# module has no such test: kube's are in kube/internal/controlplanetests, a
# module of their own, so that kube's go.mod doesn't require controlplane.
go test -tags controlplane -count=1 -p 1 -timeout 30m \
  ./controlplane/... ./kube/internal/controlplanetests/... ./kube/examples/...

echo "== a module outside the repository, on the docs' go.mod lines"
# GOWORK=off, in a temporary directory: its unit test on kube.ReconcileTest
# and its whole-App test on controlplanetest and apptest (about a minute).
bash scripts/usermodule.sh -controlplane
