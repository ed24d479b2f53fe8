#!/usr/bin/env bash
# Fails when a tracked file is not formatted as committed: C++ by clang-format (.clang-format),
# Python by ruff (pyproject.toml: format, and the lint rules that catch undefined names and syntax
# errors). Fix with:  scripts/check_format.sh --fix
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUFF="$ROOT/.venv/bin/ruff"
mapfile -t cxx < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h')
mapfile -t py < <(git ls-files '*.py')  # tracked files only: scratch files in a checkout are not checked
if [[ "${1:-}" == --fix ]]; then
  clang-format -i "${cxx[@]}"
  "$RUFF" format -q "${py[@]}"
  "$RUFF" check -q "${py[@]}"
  exit 0
fi
status=0
clang-format --dry-run --Werror "${cxx[@]}" || { echo "C++ not formatted: scripts/check_format.sh --fix" >&2; status=1; }
"$RUFF" format -q --check "${py[@]}" || { echo "Python not formatted: scripts/check_format.sh --fix" >&2; status=1; }
"$RUFF" check -q "${py[@]}" || status=1
exit $status
