#!/usr/bin/env bash
# Lints every module with golangci-lint v2 and the repository's
# .golangci.yml. Installs golangci-lint from the Go module proxy into ./bin
# the first time. Arguments name module directories to lint instead of all.
# The controlplane build tag is set, so the tests against the local control
# plane are linted too (no file is built only without it).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
version=v2.15.0
lint=$root/bin/golangci-lint
if ! [ -x "$lint" ] || ! "$lint" version 2>/dev/null | grep -q "version ${version#v} "; then
  GOBIN=$root/bin GOWORK=off go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version"
fi
modules=("$@")
if [ ${#modules[@]} -eq 0 ]; then
  modules=(. kube kube/examples kube/internal/controlplanetests controlplane bench)
fi
status=0
for m in "${modules[@]}"; do
  echo "== lint $m"
  (cd "$m" && "$lint" run --allow-parallel-runners --build-tags controlplane --config "$root/.golangci.yml" ./...) || status=1
done
exit $status
