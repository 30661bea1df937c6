#!/usr/bin/env bash
# Releases every published module at one version, the way Go's
# multi-module repositories are released: one commit in which each module
# requires the others at that version, tagged once per module, the
# dependencies first:
#
#   vX.Y.Z                (github.com/z5labs/humus)
#   kube/vX.Y.Z           (github.com/z5labs/humus/kube)
#   controlplane/vX.Y.Z   (github.com/z5labs/humus/controlplane, whose
#                          apptest requires kube)
#   kube/examples/vX.Y.Z  (github.com/z5labs/humus/kube/examples)
#
# Usage: scripts/release.sh vX.Y.Z, on a clean checkout of main. It checks
# the API against the last tags (scripts/apicheck.sh; set
# APICHECK_BREAKING_OK=1 for a release that breaks it on purpose), writes
# the version to scripts/VERSION and to every go.mod's requires of the
# repository's modules, commits, tags, and prints the git push that
# publishes the tags; it pushes nothing itself. The replace lines stay:
# a module that depends on these ignores them, and they keep a clone's
# builds (GOWORK=off) off the module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/release.sh vX.Y.Z}
if ! [[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "release: $version is not vX.Y.Z" >&2
  exit 2
fi
if [ -n "$(git status --porcelain)" ]; then
  echo "release: the working tree isn't clean" >&2
  exit 2
fi
published=(. controlplane kube kube/examples)
all=(. controlplane kube kube/examples kube/internal/controlplanetests bench)
for dir in "${published[@]}"; do
  prefix=${dir#.}
  tag=${prefix:+$prefix/}$version
  if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
    echo "release: the tag $tag exists" >&2
    exit 2
  fi
done

bash scripts/apicheck.sh

paths=()
for dir in "${published[@]}"; do
  paths+=("$(awk '/^module /{print $2; exit}' "$dir/go.mod")")
done
echo "$version" >scripts/VERSION
for dir in "${all[@]}"; do
  for p in "${paths[@]}"; do
    if grep -Eq "^[[:space:]]*(require[[:space:]]+)?$p v" "$dir/go.mod"; then
      (cd "$dir" && go mod edit -require="$p@$version")
    fi
  done
done
if ! git diff --quiet; then
  git commit -q -am "release $version"
fi
tags=()
for dir in "${published[@]}"; do
  prefix=${dir#.}
  tag=${prefix:+$prefix/}$version
  git tag -a "$tag" -m "$tag"
  tags+=("$tag")
done
echo "tagged ${tags[*]} on $(git rev-parse --short HEAD); publish with:"
echo "  git push origin main ${tags[*]}"
