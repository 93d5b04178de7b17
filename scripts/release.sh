#!/usr/bin/env bash
# Releases the version in include/trainkit/version.hpp. Only the main branch
# is published (no tags), so a release is named by its commit's full hash,
# which CHANGELOG.md and README's FetchContent line give:
#
#   scripts/release.sh check    the version agrees everywhere (the default)
#   scripts/release.sh record   check, then record HEAD as the release commit
#
# To release X.Y.Z: set it in version.hpp and vcpkg.json, date CHANGELOG.md's
# section `## X.Y.Z (YYYY-MM-DD)`, commit that on main (the release commit),
# then run `scripts/release.sh record`: it writes the commit's hash under the
# section and into README's FetchContent line, and commits that.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-check}
case "$what" in
  check | record) ;;
  *) echo "usage: $0 [check|record]" >&2; exit 2 ;;
esac

release=OFF
[ "$what" = record ] && release=ON
checked=$(cmake -DRELEASE=$release -P tests/package/versions.cmake 2>&1) || { echo "$checked" >&2; exit 1; }
echo "$checked"
# the vcpkg port, built from the release's checkout, must key its cache on it
cmake -DCHECK=ON -P packaging/vcpkg/update_source_hash.cmake || exit 1
[ "$what" = check ] && exit 0

version=$(sed -n 's/^#define TRAINKIT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' \
            include/trainkit/version.hpp | paste -sd.)
if [ -n "$(git status --porcelain)" ]; then
  echo "release.sh: the working tree has changes; commit them first:" >&2
  git status --short >&2
  exit 1
fi
commit=$(git rev-parse HEAD)
# The hash under the section's heading, and in README's FetchContent line.
awk -v v="$version" -v c="$commit" '
  { print }
  index($0, "## " v " (") == 1 && !done { print ""; print "Release commit: `" c "`"; done = 1 }
' CHANGELOG.md >CHANGELOG.md.new && mv CHANGELOG.md.new CHANGELOG.md
sed -i "s/^\(FetchContent_Declare(trainkit .* GIT_TAG \)[^ )]*)\( *# *\)[0-9.]*$/\1$commit)\2$version/" \
  README.md
cmake -P tests/package/versions.cmake >/dev/null || {
  git checkout -- CHANGELOG.md README.md
  echo "release.sh: README's FetchContent line was not updated; nothing recorded" >&2
  exit 1
}
git commit -q -m "Record $version's release commit, $commit" CHANGELOG.md README.md
echo "recorded $commit as trainkit $version's release commit; publish main"
