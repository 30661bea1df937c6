#!/usr/bin/env bash
# Checks that each published module's API at HEAD is compatible with its
# API at the module's last release tag (v1.2.3 for the root module,
# kube/v1.2.3 for kube, and so on), with apidiff -m from golang.org/x/exp:
# a removed or changed exported name fails the check, naming it. A module
# with no release tag yet has nothing to compare, and is skipped.
#
# APICHECK_BASE=<rev> compares with rev instead of the last tags (such as
# origin/main, in a review). APICHECK_BREAKING_OK=1 reports incompatible
# changes without failing, for a release that makes them on purpose (a new
# minor version below v1, a new major version at or above it). Arguments
# name module directories to check instead of all.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
apidiff_version=v0.0.0-20260410095643-746e56fc9e2f
modules=("$@")
if [ ${#modules[@]} -eq 0 ]; then
  modules=(. controlplane kube kube/examples)
fi
status=0
for dir in "${modules[@]}"; do
  mod=$(awk '/^module /{print $2; exit}' "$dir/go.mod")
  prefix=${dir#.}
  prefix=${prefix:+$prefix/}
  base=${APICHECK_BASE:-$(git tag --list "${prefix}v*" --sort=-v:refname | head -n 1)}
  if [ -z "$base" ]; then
    echo "== api $mod: no release tag ${prefix}v* yet, nothing to compare"
    continue
  fi
  echo "== api $mod: $base against HEAD"
  tmp=$(mktemp -d)
  git archive "$base" | tar -x -C "$tmp"
  if ! [ -f "$tmp/$dir/go.mod" ]; then
    echo "   $dir is no module at $base, nothing to compare"
    rm -rf "$tmp"
    continue
  fi
  # GOWORK=off: in the workspace, the module path's pattern would match
  # the packages of the modules nested in it too.
  (cd "$tmp/$dir" && GOWORK=off go run "golang.org/x/exp/cmd/apidiff@$apidiff_version" -m -w "$tmp/old.export" "$mod")
  report=$(cd "$root/$dir" && GOWORK=off go run "golang.org/x/exp/cmd/apidiff@$apidiff_version" -m -incompatible "$tmp/old.export" "$mod")
  rm -rf "$tmp"
  if [ -n "$report" ]; then
    echo "$report" | sed 's/^/   /'
    if [ "${APICHECK_BREAKING_OK:-}" != 1 ]; then
      echo "   incompatible with $base: see docs/releasing.md"
      status=1
    fi
  fi
done
exit $status
