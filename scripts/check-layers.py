#!/usr/bin/env python3
"""Check that the rstat library's modules import only downwards.

The library (crates/rstat/src) is built in layers, bottom up:

    sync, percpu            the primitives
    error, page_counter, percpu_ref
    stat                    the rstat mechanism (backlog, updated trees,
                            per-group stat state, the fold, the policies,
                            the op table controllers implement)
    group                   the hierarchy of groups (and the engine's state)
    controller              controllers and their handles
    engine                  the facade: Builder, Rstat, registration
    attach, memory, report  what is built on the facade
    testing                 hooks for tests and benchmarks (hidden)

A module may name (`crate::x`) only modules of a lower layer, or itself.
Test files (`tests*.rs`, `loom_*.rs`) are exempt: a test may drive the
facade. Comments are ignored. Exits 1 and lists every upward import.
Run from anywhere: `python3 scripts/check-layers.py`.
"""
import pathlib
import re
import sys

LAYERS = [
    ["sync", "os"],
    ["percpu"],
    ["error"],
    ["page_counter"],
    ["percpu_ref"],
    ["stat"],
    ["group"],
    ["controller"],
    ["engine"],
    ["attach"],
    ["memory"],
    ["report"],
    ["testing"],
]
RANK = {m: i for i, layer in enumerate(LAYERS) for m in layer}

SRC = pathlib.Path(__file__).resolve().parent.parent / "crates" / "rstat" / "src"
PATH = re.compile(r"\bcrate::([A-Za-z_][A-Za-z0-9_]*)")
# A `use crate::{a, b::c}` group names several modules at once.
GROUP = re.compile(r"\bcrate::\{([^}]*)\}", re.S)


def is_test(path: pathlib.Path) -> bool:
    return path.name.startswith("tests") or path.name.startswith("loom_")


def code_of(text: str) -> str:
    """The text with comments (line and block) removed."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def main() -> int:
    problems = []
    for path in sorted(SRC.rglob("*.rs")):
        rel = path.relative_to(SRC)
        if rel.parts == ("lib.rs",) or is_test(path):
            continue
        own = rel.parts[0].removesuffix(".rs")
        if own not in RANK:
            problems.append(f"{rel}: module `{own}` has no layer in {__file__}; add it")
            continue
        code = code_of(path.read_text())
        names = set(PATH.findall(code))
        for group in GROUP.findall(code):
            names.update(re.findall(r"(?:^|,)\s*([A-Za-z_][A-Za-z0-9_]*)", group))
        for name in sorted(names):
            if name == own:
                continue
            if name not in RANK:
                problems.append(
                    f"{rel}: `crate::{name}` is not a module of the library; "
                    "name the module that defines it"
                )
            elif RANK[name] > RANK[own]:
                problems.append(
                    f"{rel}: `{own}` imports `crate::{name}`, a higher layer"
                )
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering problem(s); see the layers in scripts/check-layers.py")
        return 1
    print(f"layers ok: {sum(1 for _ in SRC.rglob('*.rs'))} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
