#!/usr/bin/env python3
"""Checks the C++ layering: layers look only down (docs/ARCHITECTURE.md, "Layers").

Reads every `#include "syncopate/<layer>/..."` in src/<layer>/ and include/syncopate/<layer>/ and
every syncopate_* library in the target_link_libraries of src/<layer>/CMakeLists.txt, and fails
(exit 1, one line per violation naming the file and the edge) when
  - a layer includes a header of a layer it may not use (ALLOWED below: the one list of edges),
  - a layer links a library of a layer it may not use, or
  - a layer includes a layer it does not link, directly or through its links (the build would
    then work only because every header sits on one include path).
Run by scripts/test.sh; no third-party modules. `check_layers.py [ROOT]` checks another tree.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]

# Which layers each layer may use. A new edge is a design decision: add it here and to the
# picture in docs/ARCHITECTURE.md in the same commit.
ALLOWED = {
    "common": set(),
    "plan": {"common"},
    "lower": {"common", "plan"},
    "schedule": {"common", "plan", "lower"},
    "transform": {"common", "plan", "lower"},
    "sim": {"common", "plan", "lower", "schedule"},
    "runtime": {"common", "plan", "lower"},
    "cli": {"common", "plan", "lower", "schedule", "transform", "sim"},
}
# CMake library -> layer (the umbrella `syncopate` library is every layer but the runtime).
LIBRARY_LAYER = {
    "syncopate_common": "common",
    "syncopate_plan": "plan",
    "syncopate_lower": "lower",
    "syncopate_schedule": "schedule",
    "syncopate_transform": "transform",
    "syncopate_sim": "sim",
    "syncopate_runtime_host": "runtime",
    "syncopate_runtime": "runtime",
}
UMBRELLA = {"syncopate": {"common", "plan", "lower", "schedule", "transform", "sim"}}
INCLUDE = re.compile(r'^\s*#\s*include\s+"syncopate/(\w+)/')
LINK = re.compile(r"target_link_libraries\s*\(\s*(\w+)(.*?)\)", re.S)


def include_edges():
    """(layer, used layer, file) for every include of another layer's header."""
    for base in (ROOT / "src", ROOT / "include" / "syncopate"):
        for path in sorted(base.rglob("*")):
            if not path.is_file() or path.suffix not in (".hpp", ".cpp", ".cu", ".h"):
                continue
            layer = path.relative_to(base).parts[0]
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if m and m.group(1) != layer:
                    yield layer, m.group(1), f"{path.relative_to(ROOT)}:{number}"


def link_edges():
    """{layer: set of layers it links} and (layer, used, where) per linked syncopate library."""
    links, found = {}, []
    for cmake in sorted((ROOT / "src").glob("*/CMakeLists.txt")):
        layer = cmake.parent.name
        for m in LINK.finditer(cmake.read_text()):
            target = m.group(1)
            if LIBRARY_LAYER.get(target, layer) != layer:
                continue
            for word in m.group(2).split():
                used = UMBRELLA.get(word) or ({LIBRARY_LAYER[word]} if word in LIBRARY_LAYER else set())
                for u in used - {layer}:
                    links.setdefault(layer, set()).add(u)
                    found.append((layer, u, f"{cmake.relative_to(ROOT)} ({target} links {word})"))
    return links, found


def reachable(links, layer):
    seen, todo = set(), [layer]
    while todo:
        for nxt in links.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def main() -> int:
    problems = []
    links, link_list = link_edges()
    for layer, used, where in include_edges():
        if layer not in ALLOWED:
            problems.append(f"{where}: unknown layer {layer!r}: add it to ALLOWED in scripts/check_layers.py")
        elif used not in ALLOWED[layer]:
            problems.append(f"{where}: {layer} includes {used}: not an allowed edge (layers look only down)")
        elif used != "common" and used not in reachable(links, layer):
            problems.append(f"{where}: {layer} includes {used} but its CMake targets do not link it")
    for layer, used, where in link_list:
        if used not in ALLOWED.get(layer, set()):
            problems.append(f"{where}: {layer} links {used}: not an allowed edge")
    for p in problems:
        print(p)
    print(f"check_layers: {len(problems)} violation(s)" if problems else "check_layers: layering holds")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
