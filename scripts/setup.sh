#!/usr/bin/env bash
# Installs everything the build and tests need, then builds. Safe to run again: each step is
# skipped when already done. Used by scripts/demo.sh and scripts/test.sh.
#
#   SYNCOPATE_BUILD_DIR   build directory (default: build)
#   SYNCOPATE_NO_PYTHON=1 skip the Python virtual environment
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${SYNCOPATE_BUILD_DIR:-$ROOT/build}"
VENV="$ROOT/.venv"
# Pinned to the versions on the GPU device image, so CI's Triton interpreter runs what the GPU runs.
TORCH_PIN="torch==2.11.0"
TRITON_PIN="triton==3.6.0"
RUFF_PIN="ruff==0.14.6"  # the formatter and linter of scripts/check_format.sh

log() { printf '\033[1m[setup %s]\033[0m %s\n' "$(date +%T)" "$*"; }

# --- Debian packages -----------------------------------------------------------------------
DEB_PKGS=(cmake ninja-build g++ nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libpugixml-dev clang-format)
missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- Python virtual environment --------------------------------------------------------------
if [[ "${SYNCOPATE_NO_PYTHON:-0}" != 1 ]]; then
  PY="${PYTHON:-python3}"
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating $VENV"
    "$PY" -m venv "$VENV"
  fi
  REQS="numpy pytest nanobind scikit-build-core cmake ninja $TORCH_PIN $TRITON_PIN $RUFF_PIN"
  STAMP="$VENV/.syncopate-reqs"
  if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$REQS" ]]; then
    log "installing Python packages into $VENV (torch and triton are large: a minute or two)"
    "$VENV/bin/pip" install -q --upgrade pip
    # shellcheck disable=SC2086
    "$VENV/bin/pip" install -q $REQS
    echo "$REQS" >"$STAMP"
  fi
fi

# --- C++ build ---------------------------------------------------------------------------------
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  log "configuring $BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
log "building (2 jobs)"
cmake --build "$BUILD_DIR" -j 2
