#!/usr/bin/env bash
# Builds and tests a module outside the repository, as a user's module is:
# scripts/testdata/usermodule copied into a temporary directory, with
# GOWORK=off and the go.mod lines the docs' "Using kube from a module of
# your own" shows for working from a clone (the requires at the modules'
# version, and a replace line for each module pointing at this clone). It
# vets the module with the controlplane build tag (so its whole-App test,
# on controlplanetest and apptest, compiles) and runs its unit tests, on
# kube.ReconcileTest. With -controlplane, it runs the whole-App test too,
# against a local control plane: the App serving its validating webhook
# with webhookserve, apptest's Webhooks pointing the webhook
# configuration at it. The module uses only published packages: it
# requires no github.com/z5labs/humus/kube/examples, and the script fails
# if a file of it imports one.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
version=$(cat scripts/VERSION)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp scripts/testdata/usermodule/*.go "$dir/"
cat >"$dir/go.mod" <<MOD
module example.com/greetings

go 1.26.0

require (
	github.com/z5labs/humus $version
	github.com/z5labs/humus/controlplane $version
	github.com/z5labs/humus/kube $version
)

replace (
	github.com/z5labs/humus => $root
	github.com/z5labs/humus/controlplane => $root/controlplane
	github.com/z5labs/humus/kube => $root/kube
)
MOD
if grep -n 'github.com/z5labs/humus/kube/examples' "$dir"/*.go; then
  echo "usermodule: a file imports the examples module, which is no published API" >&2
  exit 1
fi
cd "$dir"
export GOWORK=off
go mod tidy
go vet -tags controlplane ./...
go test -count=1 ./...
if [ "${1:-}" = -controlplane ]; then
  go test -tags controlplane -count=1 -timeout 10m ./...
fi
