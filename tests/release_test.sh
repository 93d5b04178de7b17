#!/usr/bin/env bash
# scripts/release.sh in a scratch repository made of this checkout's files:
# it refuses an undated CHANGELOG section, a dirty tree and a section already
# recorded, and records the release commit's hash under the section and in
# README's FetchContent line, making no tag.
set -euo pipefail
source=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# what versions.cmake and the vcpkg hash read
mkdir -p scripts tests/package
cp -r "$source/include" "$source/cmake" "$source/packaging" .
for f in scripts/release.sh tests/package/versions.cmake CMakeLists.txt LICENSE CHANGELOG.md \
         README.md; do
  cp "$source/$f" "$f"
done
export GIT_AUTHOR_NAME=test GIT_AUTHOR_EMAIL=test@localhost GIT_COMMITTER_NAME=test \
       GIT_COMMITTER_EMAIL=test@localhost GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
git init -q . && git add -A && git commit -qm files

expect_failure() {  # expect_failure MESSAGE: release.sh record fails saying it
  local out
  if out=$(scripts/release.sh record 2>&1); then
    echo "release.sh record succeeded; expected: $1" >&2; exit 1
  fi
  grep -qF "$1" <<<"$out" || { echo "expected \"$1\" in: $out" >&2; exit 1; }
  echo "refused as expected: $1"
}

# The release as it is prepared: the first section unreleased.
version=$(sed -n 's/^## \([0-9.]*\) .*/\1/p' CHANGELOG.md | head -1)
sed -i "0,/^## $version (.*)$/s//## $version (unreleased)/" CHANGELOG.md
sed -i "/^## $version (unreleased)$/,/^## /{/^Release commit: /d}" CHANGELOG.md
git commit -qam "prepare $version" || true
expect_failure "is unreleased: date it to release it"
# Dated: this commit is the release's.
sed -i "s/^## $version (unreleased)$/## $version (2026-01-01)/" CHANGELOG.md
git commit -qam "release $version"
release_commit=$(git rev-parse HEAD)
echo "dirty" >>README.md
expect_failure "the working tree has changes"
git checkout -q README.md

scripts/release.sh record
[ -z "$(git tag --list)" ] || { echo "release.sh made a tag: $(git tag --list)" >&2; exit 1; }
[ "$(git rev-parse HEAD~1)" = "$release_commit" ] ||
  { echo "release.sh record did not commit once on top of the release commit" >&2; exit 1; }
grep -qx "Release commit: \`$release_commit\`" CHANGELOG.md ||
  { echo "CHANGELOG.md does not give the release commit" >&2; exit 1; }
grep -q "^FetchContent_Declare(trainkit .* GIT_TAG $release_commit)  # $version\$" README.md ||
  { echo "README's FetchContent line does not name $release_commit: $(grep GIT_TAG README.md)" >&2; exit 1; }
cmake -P tests/package/versions.cmake
expect_failure "has its release commit already"
echo "release.sh: $version recorded at $release_commit without a tag; refusals as expected"
