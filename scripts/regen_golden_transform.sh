#!/usr/bin/env bash
# Regenerates the transformer's golden outputs, tests/golden/transform/<example>.py, from the
# annotated examples listed in tests/golden/transform/cases.txt. Review the diff before
# committing: tests/unit/transform/golden_test.cpp compares the transformer against these files.
#
# usage: scripts/regen_golden_transform.sh [path/to/syncopate]   (or set SYNCOPATE_CLI)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cli="${1:-${SYNCOPATE_CLI:-}}"
if [[ -z "$cli" ]]; then
  for candidate in "$root"/build*/src/cli/syncopate; do
    if [[ -x "$candidate" ]]; then cli="$candidate"; break; fi
  done
fi
if [[ -z "$cli" || ! -x "$cli" ]]; then
  echo "error: no syncopate CLI found; build it or pass its path (or set SYNCOPATE_CLI)" >&2
  exit 2
fi
examples="python/syncopate/kernels/examples"
golden="tests/golden/transform"
cd "$root"
while read -r file kernel; do
  [[ -z "$file" || "$file" == \#* ]] && continue
  out="$golden/$(basename "$file")"   # "../attention.py": a shipped kernel beside the examples
  "$cli" transform "$examples/$file" --kernel "$kernel" -o "$out"
  echo "wrote $out ($kernel)"
done < "$golden/cases.txt"
