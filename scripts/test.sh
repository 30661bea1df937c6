#!/usr/bin/env bash
# Runs every test of every module: lint, unit tests (with the race
# detector), and the tests against a real local control plane, whose
# binaries are built from Go modules once per version into the user's cache.
# Set HUMUS_TEST_KUBECONFIG to run the control-plane tests against an
# existing cluster instead.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(./... ./kube/... ./controlplane/... ./bench/...)

echo "== lint"
bash scripts/lint.sh

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
# inside LeaseDuration) that two clusters on two cores would blur.
go test -tags controlplane -count=1 -p 1 -timeout 30m \
  ./controlplane/... ./kube/ ./kube/examples/...
