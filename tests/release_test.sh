#!/usr/bin/env bash
# scripts/release.sh in a scratch repository made of this checkout's files:
# it refuses an undated CHANGELOG section, a dirty tree and an existing tag,
# and tags with CHANGELOG's section as the message.
set -euo pipefail
source=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
for f in scripts/release.sh tests/package/versions.cmake cmake/version.cmake \
         include/trainkit/version.hpp packaging/vcpkg/ports/trainkit/vcpkg.json \
         packaging/conan/conanfile.py CHANGELOG.md README.md; do
  mkdir -p "$(dirname "$f")" && cp "$source/$f" "$f"
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

version=$(sed -n 's/^## \([0-9.]*\) .*/\1/p' CHANGELOG.md | head -1)
if grep -q "^## $version (unreleased)$" CHANGELOG.md; then
  expect_failure "is unreleased: date it to release it"
  sed -i "s/^## $version (unreleased)$/## $version (2026-01-01)/" CHANGELOG.md
  git commit -qam "date $version"
fi
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
