#!/usr/bin/env bash
# Runs every test of every module: lint, unit tests, and the tests against a
# real local control plane (built once per version into the user's cache).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== unit tests"
go test -race ./... ./kube/...
