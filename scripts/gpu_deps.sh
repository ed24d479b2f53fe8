#!/usr/bin/env bash
# Makes .deps/, a CMake prefix holding the Debian C++ libraries the GPU machines lack (fmt,
# nlohmann-json, CLI11, GoogleTest, pugixml), copied from this machine after scripts/setup.sh
# installed them. Carry it to the device (`carry: [".deps"]`); tests/gpu/run.sh finds it there.
# .gitignore keeps it out of commits.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="${SYNCOPATE_DEPS:-$ROOT/.deps}"
LIB=/usr/lib/x86_64-linux-gnu
mkdir -p "$DEPS/include" "$DEPS/lib/x86_64-linux-gnu/cmake" "$DEPS/share/cmake"
for d in fmt nlohmann CLI gtest gmock; do cp -r "/usr/include/$d" "$DEPS/include/"; done
cp /usr/include/pugixml.hpp /usr/include/pugiconfig.hpp "$DEPS/include/"
# pugixml: the static library is what links; its CMake config also names the shared one.
cp -a "$LIB"/libfmt.so* "$LIB"/libgtest*.a "$LIB"/libgmock*.a "$LIB"/libpugixml.* "$DEPS/lib/x86_64-linux-gnu/"
cp -r "$LIB/cmake/fmt" "$LIB/cmake/GTest" "$LIB/cmake/pugixml" "$DEPS/lib/x86_64-linux-gnu/cmake/"
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$DEPS/share/cmake/"
du -sh "$DEPS"
