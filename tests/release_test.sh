#!/usr/bin/env bash
# scripts/release.sh in a scratch repository made of this checkout's files:
# it refuses an undated CHANGELOG section, a dirty tree and an existing tag,
# and tags with CHANGELOG's section as the message.
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

expect_failure() {  # expect_failure MESSAGE: release.sh tag fails saying it
  local out
  if out=$(scripts/release.sh tag 2>&1); then
    echo "release.sh tag succeeded; expected: $1" >&2; exit 1
  fi
  grep -qF "$1" <<<"$out" || { echo "expected \"$1\" in: $out" >&2; exit 1; }
  echo "refused as expected: $1"
}

# The release as it is prepared: the first section unreleased (README still
# names the last release's tag, or this version's before the first release).
version=$(sed -n 's/^## \([0-9.]*\) .*/\1/p' CHANGELOG.md | head -1)
sed -i "0,/^## $version (.*)$/s//## $version (unreleased)/" CHANGELOG.md
git commit -qam "prepare $version" || true
expect_failure "is unreleased: date it to release it"
# Released: dated, and README's FetchContent line names its tag.
sed -i "s/^## $version (unreleased)$/## $version (2026-01-01)/" CHANGELOG.md
sed -i "s/\(FetchContent_Declare(trainkit .* GIT_TAG \)v[0-9.]*/\1v$version/" README.md
git commit -qam "release $version"
echo "dirty" >>README.md
expect_failure "the working tree has changes"
git checkout -q README.md

scripts/release.sh tag
[ "$(git cat-file -t "v$version")" = tag ] || { echo "v$version is not an annotated tag" >&2; exit 1; }
message=$(git tag -l --format='%(contents)' "v$version")
grep -q "^trainkit $version" <<<"$message" && grep -q "^## $version " <<<"$message" ||
  { echo "the tag's message is not CHANGELOG's section: $message" >&2; exit 1; }
expect_failure "v$version exists already"
echo "release.sh: v$version tagged with its CHANGELOG section; refusals as expected"
