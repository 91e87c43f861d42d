"""The package's shape: every import points down the layers, and no module imports itself back.

The layers, bottom first (docs/architecture.md draws them). A module may import modules of its own
subpackage and of the subpackages below it, at load time or inside a function alike; the top-level
`seq2seq/__init__.py` (the public API) may import anything.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "seq2seq"
LAYERS = ["config", "text", "model", "accel", "storage", "report", "data", "inference", "training", "deploy",
          "serve", "cli"]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every seq2seq module `path` imports (absolute or relative, at any depth of the file)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "seq2seq")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "seq2seq":
                continue
            for alias in node.names:  # `from seq2seq.x import y`: y may be a module of its own
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    return found - {name}


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {name: imports_of(path) for name, path in MODULES.items()}


def layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_subpackage_is_a_known_layer():
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert subpackages == set(LAYERS)
    top_level = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top_level == ["__init__.py", "__main__.py"]  # the public API; everything else in a layer


def test_imports_only_point_down():
    upward = []
    for name, targets in GRAPH.items():
        own = layer(name)
        if own is None:
            continue
        for target in targets:
            other = layer(target)
            if other is not None and other > own:
                upward.append(f"{name} -> {target}")
    assert not upward, "imports pointing up the layers:\n" + "\n".join(sorted(upward))


def test_no_import_cycles():
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for target in sorted(GRAPH.get(node, ())):
            if target == "seq2seq":
                continue
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target in GRAPH and target not in state:
                visit(target, stack + [target])
        state[node] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_two_module_names_differ_by_one_letter():
    import difflib

    stems = sorted({p.stem for p in PACKAGE.rglob("*.py") if not p.stem.startswith("__")})
    close = [(a, b) for i, a in enumerate(stems) for b in stems[i + 1:]
             if len(a) > 3 and abs(len(a) - len(b)) <= 1 and difflib.SequenceMatcher(None, a, b).ratio() > 0.9]
    assert not close, close


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_imports_on_its_own(name):
    importlib.import_module(name)


def test_the_public_api_is_importable_from_the_top_level():
    import subprocess
    import sys

    import seq2seq

    for name in seq2seq.__all__:
        assert getattr(seq2seq, name) is not None, name
    # importing the package alone loads neither torch nor any layer
    probe = "import sys, seq2seq; print(sorted(m for m in sys.modules if m.startswith(('torch', 'seq2seq.'))))"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "[]"
