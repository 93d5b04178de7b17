#!/usr/bin/env bash
# Lists kept by hand beside what they describe, checked against it:
#   scripts/run.sh's header and usage line name every command its `case` runs
#   (test-debian13 is the Debian 13 half of `test`, run inside its root);
#   docs/decisions.md's index by topic lists every decision, and no other;
#   tests/CMakeLists.txt names every tests/*_test.cpp, and only files that exist;
#   every `Trainer<Optimizer, ...>` in the docs and headers spells the roles of
#   include/trainkit/policy_roles.hpp, in order, and a count of roles in words
#   is theirs.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
status=0
complain() {
  echo "hand_kept_lists: $*" >&2
  status=1
}

run="$root/scripts/run.sh"
commands=$(sed -n '/^case "\$cmd" in/,/^esac/p' "$run" | grep -oE '^  [a-z0-9|-]+\)' |
  tr -d ' )' | tr '|' '\n' | grep -vx 'test-debian13')
[ -n "$commands" ] || complain "found no command in scripts/run.sh's case"
usage=$(grep -o 'usage: scripts/run.sh {[^}]*}' "$run") || complain "scripts/run.sh has no usage line"
for c in $commands; do
  grep -qE "^#   scripts/run.sh $c( |$)" "$run" ||
    complain "scripts/run.sh's header does not describe \`$c\`"
  [[ "$usage" == *"{$c|"* || "$usage" == *"|$c|"* || "$usage" == *"|$c}"* ]] ||
    complain "scripts/run.sh's usage line does not name \`$c\`"
done

decisions="$root/docs/decisions.md"
index=$(sed -n '/^## Index by topic/,/^## /p' "$decisions" | grep '^- \*\*' | sed 's/^.*\*\*: //' |
  tr ',' '\n' | tr -d ' ')
[ -n "$index" ] || complain "docs/decisions.md has no index by topic"
for n in $(grep -oE '^[0-9]+\. \*\*' "$decisions" | grep -oE '^[0-9]+'); do
  grep -qx "$n" <<< "$index" || complain "docs/decisions.md: decision $n is under no topic of its index"
done
for n in $index; do
  grep -qE "^$n\. \*\*" "$decisions" ||
    complain "docs/decisions.md's index names decision $n, which is not there"
done
tests_cmake="$root/tests/CMakeLists.txt"
for f in "$root"/tests/*_test.cpp; do
  grep -qE "(^|[ (])$(basename "$f")([ )]|$)" "$tests_cmake" ||
    complain "tests/CMakeLists.txt does not build $(basename "$f")"
done
for f in $(grep -v '^ *#' "$tests_cmake" | grep -oE '[A-Za-z0-9_/]+\.cpp' | sort -u); do
  [ -f "$root/tests/$f" ] || complain "tests/CMakeLists.txt builds tests/$f, which does not exist"
done

roles=$(grep -oE '^TRAINKIT_POLICY_ROLE\([A-Za-z]+, "[a-z]+"' "$root/include/trainkit/policy_roles.hpp" |
  sed -E 's/.*"([a-z]+)"/\1/')
[ -n "$roles" ] || complain "found no TRAINKIT_POLICY_ROLE in policy_roles.hpp"
python3 - "$root" $roles <<'PY' || status=1
import pathlib, re, sys
root, roles = pathlib.Path(sys.argv[1]), sys.argv[2:]
spelled = "Trainer<" + ", ".join(r.capitalize() for r in roles) + ">"
words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
files = [root / "README.md", *(root / "docs").glob("*.md"), *(root / "include").rglob("*.hpp")]
bad = False
for f in files:
    if f.name in ("decisions.md", "CHANGELOG.md"):  # records of their time
        continue
    text = re.sub(r"\s*\n\s*(//+)?\s*", " ", f.read_text())  # lines (and comments) joined
    for m in re.finditer(r"Trainer<Optimizer[^>]*>", text):
        if m.group(0) != spelled:
            print(f"hand_kept_lists: {f.relative_to(root)}: {m.group(0)} is not {spelled}", file=sys.stderr)
            bad = True
    for m in re.finditer(r"\b(" + "|".join(words) + r")\b (policy roles|roles|compose into `?Trainer)", text):
        if m.group(1) != words[len(roles)]:
            print(f"hand_kept_lists: {f.relative_to(root)}: \"{m.group(0)}\", and there are "
                  f"{len(roles)} roles", file=sys.stderr)
            bad = True
sys.exit(bad)
PY
exit "$status"
