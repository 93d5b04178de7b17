#!/usr/bin/env bash
# Lists kept by hand beside what they describe, checked against it:
#   scripts/run.sh's header and usage line name every command its `case` runs
#   (test-debian13 is the Debian 13 half of `test`, run inside its root);
#   docs/decisions.md's index by topic lists every decision, and no other.
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
exit "$status"
