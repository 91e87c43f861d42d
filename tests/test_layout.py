"""The package's shape: every import points down the layers, and no module imports itself back.

The layers, bottom first (docs/architecture.md draws them). A module may import modules of its own
subpackage and of the subpackages below it, at load time or inside a function alike; the top-level
`seq2seq/__init__.py` (the public API) may import anything.

docs/architecture.md is the map of the modules: it names every module, and every module or path it names
exists. A module holds one concept, however long that makes it: the size limits at the end (~800 lines a
module, ~120 a function) are guards against a file or function that grew past reading, not targets to pack
code up to, nor a reason to split a concept.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "seq2seq"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
LAYERS = ["config", "text", "model", "accel", "storage", "report", "data", "adapters", "inference", "corpora", "documents",
          "training",
          "deploy", "serve", "cli"]


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


# ---- the module map: docs/architecture.md and the subpackages' docstrings name every module ----------------

def package_folders() -> dict[str, set[str]]:
    """{folder under seq2seq/ ("" for seq2seq/ itself, "model/encoders/"): the names of its .py files}."""
    folders: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        folder = path.parent.relative_to(PACKAGE).as_posix()
        folders.setdefault("" if folder == "." else folder + "/", set()).add(path.name)
    return folders


SECTION = re.compile(r"^#+ `seq2seq/((?:[a-z_]+/)*)`", re.M)
HEADING = re.compile(r"^#+ ", re.M)
ROW = re.compile(r"^\| `([A-Za-z_][A-Za-z0-9_]*\.py)` \|", re.M)


def documented_modules(text: str) -> dict[str, set[str]]:
    """docs/architecture.md's module tables: {folder under seq2seq/: the `<name>.py` rows of the section
    headed `seq2seq/<folder>`, up to the next heading}."""
    found: dict[str, set[str]] = {}
    for match in SECTION.finditer(text):
        following = HEADING.search(text, match.end())
        body = text[match.end(): following.start() if following else len(text)]
        found.setdefault(match.group(1), set()).update(ROW.findall(body))
    return found


def test_the_module_map_reader_sees_rows_and_sections():
    text = "#### `seq2seq/inference/`: x\n\n| module | role |\n| `search.py` | the loop |\n\n### Other\n| `a.py` | y |\n"
    assert documented_modules(text) == {"inference/": {"search.py"}}


def test_every_module_has_a_line_in_the_architecture_doc():
    """Each seq2seq/<folder>/<name>.py is a row `<name>.py` of the section of docs/architecture.md headed
    `seq2seq/<folder>/`; a row naming a module that is gone fails too."""
    documented = documented_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    actual = package_folders()
    missing = sorted(f"seq2seq/{folder}{name}" for folder, names in actual.items()
                     for name in names - documented.get(folder, set()))
    stale = sorted(f"seq2seq/{folder}{name}" for folder, names in documented.items()
                   for name in names - actual.get(folder, set()))
    assert not missing, ("modules without a line in docs/architecture.md (a row | `name.py` | role | in the "
                         "section of their subpackage):\n" + "\n".join(missing))
    assert not stale, "docs/architecture.md names modules that do not exist:\n" + "\n".join(stale)


PATH = re.compile(r"(?<![\w*./-])((?:[a-z_]+/)+[a-z_]+\.py)\b")


def unknown_paths(text: str, files: set[str]) -> list[str]:
    """The `folder/name.py` paths in `text` (under seq2seq/, or the tail of one: `encoders/base.py`) that
    name no file of `files` (paths under seq2seq/); paths under tests/, recipes/ and benchmarks/ are not
    the package's."""
    return sorted({path for path in PATH.findall(text) if not path.startswith(("tests/", "recipes/", "benchmarks/"))
                   and not any(f == path.removeprefix("seq2seq/") or f.endswith("/" + path.removeprefix("seq2seq/"))
                               for f in files)})


def test_the_path_reader_sees_paths_and_their_tails():
    files = {"model/encoders/base.py", "inference/search.py"}
    text = "encoders/base.py, seq2seq/inference/search.py, inference/gone.py, config/*_section.py, tests/t.py"
    assert unknown_paths(text, files) == ["inference/gone.py"]


def test_every_path_the_architecture_doc_names_exists():
    """The data-flow boxes and the prose name modules as paths (`cli/steering.py`, `encoders/base.py`);
    each is a file of seq2seq/."""
    files = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")}
    gone = unknown_paths(ARCHITECTURE.read_text(encoding="utf-8"), files)
    assert not gone, "docs/architecture.md names paths that are not modules of seq2seq/:\n" + "\n".join(gone)


LISTING = re.compile(r"^ {4}([a-z_][a-z0-9_]*)(?:\.py|/)? {2,}\S", re.M)


def listed_modules(docstring: str) -> set[str]:
    """The names a docstring lists as `    name  what it is` (also `name.py`, `name/`), one a line."""
    return set(LISTING.findall(docstring))


def test_the_listing_reader_sees_each_form():
    doc = "Title.\n\n    schema.py    x\n    encoders/    y\n    search  z\n                continued\n  * bullet  no\n"
    assert listed_modules(doc) == {"schema", "encoders", "search"}


def test_subpackage_docstrings_that_list_modules_list_them_all():
    """A subpackage's __init__ docstring that lists its modules lists every one (and its subpackages), and
    only modules that exist."""
    checked, problems = [], []
    for init in sorted(PACKAGE.rglob("*/__init__.py")):
        folder = init.parent
        own = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
        own |= {p.parent.name for p in folder.glob("*/__init__.py")}
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")), clean=False) or ""
        listed = listed_modules(docstring)
        if not listed & own:
            continue  # a docstring that lists no modules
        checked.append(module_name(init))
        if own - listed:
            problems.append(f"{module_name(init)} leaves out {sorted(own - listed)}")
        if listed - own:
            problems.append(f"{module_name(init)} lists {sorted(listed - own)}, which are not its modules")
    assert "seq2seq.inference" in checked  # the reader still finds the listings
    assert not problems, "\n".join(problems)


# ---- sizes: no module over MAX_MODULE_LINES lines, no function or method over MAX_FUNCTION_LINES ------------
# Guards, not targets: split a module when it holds two concepts, never to come under a number.

MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120

# Modules allowed over the limit (path under the repository: why it is long). A module that comes under the
# limit must leave this list, so that it only shrinks.
OVER_LIMIT: dict[str, str] = {}

# Functions and methods allowed over the limit ("path::Class.method"; nested: "path::outer.inner"); like
# OVER_LIMIT, one that comes under the limit must leave it.
LONG_FUNCTIONS: dict[str, str] = {}


def module_lines() -> dict[str, int]:
    """{path under the repository: its number of lines} of every module of seq2seq/."""
    return {p.relative_to(PACKAGE.parent).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
            for p in sorted(PACKAGE.rglob("*.py"))}


def function_lines(source: str) -> dict[str, int]:
    """{"function", "Class.method" or "outer.inner": its number of lines, `def` to its last line} of a module's
    source (decorators not counted; of two definitions of one name, the longer)."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                found[name] = max(found.get(name, 0), child.end_lineno - child.lineno + 1)
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_the_function_sizer_sees_functions_methods_and_nested_functions():
    source = "def f():\n    pass\n\n\nclass C:\n    @property\n    def m(self):\n        def inner():\n" \
             "            return 1\n        return inner()\n"
    assert function_lines(source) == {"f": 2, "C.m": 4, "C.m.inner": 2}


def test_no_module_is_over_the_line_limit():
    sizes = module_lines()
    over = sorted(f"{path}: {n} lines" for path, n in sizes.items() if n > MAX_MODULE_LINES and path not in OVER_LIMIT)
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them into modules of one job each):\n" + \
        "\n".join(over)
    done = sorted(f"{path}: {sizes.get(path, 'gone')}" for path in OVER_LIMIT
                  if sizes.get(path, 0) <= MAX_MODULE_LINES)
    assert not done, "OVER_LIMIT lists modules no longer over the limit; take them off the list:\n" + "\n".join(done)


def test_no_function_is_over_the_line_limit():
    sizes = {f"{path}::{name}": n for path in module_lines()
             for name, n in function_lines((PACKAGE.parent / path).read_text(encoding="utf-8")).items()}
    over = sorted(f"{name}: {n} lines" for name, n in sizes.items()
                  if n > MAX_FUNCTION_LINES and name not in LONG_FUNCTIONS)
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(over)
    done = sorted(name for name in LONG_FUNCTIONS if sizes.get(name, 0) <= MAX_FUNCTION_LINES)
    assert not done, "LONG_FUNCTIONS lists functions no longer over the limit; take them off the list:\n" + \
        "\n".join(done)
