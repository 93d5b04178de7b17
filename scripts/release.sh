#!/usr/bin/env bash
# Tags a release of the version in include/trainkit/version.hpp:
#
#   scripts/release.sh check   the version agrees everywhere (the default)
#   scripts/release.sh tag     check, then tag HEAD v<version>
#
# To release X.Y.Z: set it in version.hpp and vcpkg.json, date CHANGELOG.md's
# section `## X.Y.Z (YYYY-MM-DD)`, point README's FetchContent line at
# vX.Y.Z, commit, run `scripts/release.sh tag` on that commit and push the tag.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-check}
case "$what" in
  check | tag) ;;
  *) echo "usage: $0 [check|tag]" >&2; exit 2 ;;
esac

release=OFF
[ "$what" = tag ] && release=ON
checked=$(cmake -DRELEASE=$release -P tests/package/versions.cmake) || exit 1
echo "$checked"
# the vcpkg port, built from the tag's checkout, must key its cache on it
cmake -DCHECK=ON -P packaging/vcpkg/update_source_hash.cmake || exit 1
[ "$what" = check ] && exit 0

version=$(sed -n 's/^-- version \([0-9.]*\): .*/\1/p' <<<"$checked")
tag="v$version"
if [ -n "$(git status --porcelain)" ]; then
  echo "release.sh: the working tree has changes; commit them first:" >&2
  git status --short >&2
  exit 1
fi
if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
  echo "release.sh: $tag exists already (at $(git rev-parse --short "$tag^{commit}"))" >&2
  exit 1
fi
# The tag's message is CHANGELOG.md's section for the version.
notes=$(awk -v v="$version" '/^## / { on = index($0, "## " v " ") == 1 } on' CHANGELOG.md)
git tag -a --cleanup=whitespace "$tag" -m "trainkit $version" -m "$notes"
echo "tagged $(git rev-parse --short HEAD) as $tag; publish it: git push origin $tag"
