#!/usr/bin/env bash
# Fails when a tracked file is not formatted as committed: C++ by clang-format (.clang-format),
# Python by ruff (pyproject.toml: format, and the lint rules that catch undefined names and syntax
# errors). Fix with:  scripts/check_format.sh --fix
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUFF="$ROOT/.venv/bin/ruff"
mapfile -t cxx < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h')
if [[ "${1:-}" == --fix ]]; then
  clang-format -i "${cxx[@]}"
  "$RUFF" format -q .
  "$RUFF" check -q .
  exit 0
fi
status=0
clang-format --dry-run --Werror "${cxx[@]}" || { echo "C++ not formatted: scripts/check_format.sh --fix" >&2; status=1; }
"$RUFF" format -q --check . || { echo "Python not formatted: scripts/check_format.sh --fix" >&2; status=1; }
"$RUFF" check -q . || status=1
exit $status
