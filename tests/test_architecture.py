"""Architecture rules (docs/ARCHITECTURE.md): no import cycle among
boo_build's modules or packages, function-level and ``TYPE_CHECKING`` imports
included; the layers (``LAYERS``): the shared core imports neither the loader
nor the build, the loader nothing of the build; no module uses another
module's underscore names; and a module over ``LONG_MODULE`` lines says at its
top why it is one module.

The checks read the source with ``ast`` (nothing is imported), so they see
imports inside functions too: module A importing B while B imports A, at any
depth, is a cycle here even when Python would tolerate it at run time. An
import under ``if TYPE_CHECKING:`` never runs, but it is a dependency all the
same (a type checker, a reader, a refactoring follows it): it counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "boo_build"
LONG_MODULE = 600
WHY_ONE_MODULE = "One module:"  # the paragraph of a long module's docstring that says why


# ------------------------------------------------------------------ checker
def package_modules(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (``__init__`` names its package)."""
    package_dir = Path(package_dir)
    root = package_dir.name
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [root, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(tree: ast.AST, type_checking: bool = True):
    """Every Import/ImportFrom node, at any depth; under ``if TYPE_CHECKING:`` too unless
    ``type_checking`` is false."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for child in ast.iter_child_nodes(node):
            if not type_checking and _type_checking_block(child):
                todo.extend(child.orelse)  # the else branch does run
            else:
                todo.append(child)


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The module a dotted name imports: itself, or its longest known prefix."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _from_source(node: ast.ImportFrom, mod: str, is_pkg: bool) -> str:
    """The dotted module a ``from ... import`` in module ``mod`` reads from (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(package_dir: Path, type_checking: bool = True) -> dict[str, dict[str, int]]:
    """module -> {imported module of the same package -> line of the first such import};
    ``type_checking``: imports under ``if TYPE_CHECKING:`` count."""
    modules = package_modules(package_dir)
    root = Path(package_dir).name
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path)), type_checking):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                source = _from_source(node, mod, is_pkg)
                # ``from X import y``: y is the submodule X.y when there is one, else a name in X.
                for a in node.names:
                    sub = f"{source}.{a.name}"
                    targets.append(sub if sub in modules else source)
            for t in targets:
                if t != root and not t.startswith(root + "."):
                    continue
                hit = _known(t, modules)
                if hit is not None:
                    graph[mod].setdefault(hit, node.lineno)
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm: the components of more than one module, or of one importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _cycle_through(start: str, comp: list[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """A shortest cycle from ``start`` back to it inside its component (breadth-first search)."""
    members = set(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in no cycle of {comp}")


def import_cycles(package_dir: Path) -> list[str]:
    """Cycles as lines ``a -> b (line 12) -> a (line 40)``, the line of each import: for each
    component of modules that import each other, shortest cycles until each member is in one."""
    return cycles_of(import_graph(package_dir))


def cycles_of(graph: dict[str, dict[str, int]]) -> list[str]:
    """``import_cycles`` of any graph of that form (node -> {node -> line})."""
    lines = []
    for comp in strongly_connected(graph):
        covered: set[str] = set()
        for start in comp:
            if start in covered:
                continue
            cyc = _cycle_through(start, comp, graph)
            covered.update(cyc)
            lines.append(" -> ".join([cyc[0]] + [f"{b} (line {graph[a][b]})" for a, b in zip(cyc, cyc[1:])]))
    return lines


def package_of(module: str, root: str) -> str:
    """The node of ``module`` in the package graph: its subpackage of the root
    (``pkg.build.tasks`` -> ``pkg.build``), or itself for a module directly under
    the root (``pkg.records``) and for the root's ``__init__`` (``pkg``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else module


def package_graph(package_dir: Path) -> dict[str, dict[str, int]]:
    """``import_graph`` between packages (``package_of``): node -> {node it imports -> line},
    the line of the first import making that edge; imports within a node left out. A
    package of boo_build is a layer (loader, ops, stages, build, report...): two that
    import each other, at any depth, inside functions and under ``if TYPE_CHECKING:`` too,
    are one layer in two folders."""
    root = Path(package_dir).name
    graph: dict[str, dict[str, int]] = {}
    for mod, deps in import_graph(package_dir).items():
        node = package_of(mod, root)
        edges = graph.setdefault(node, {})
        for dep, line in deps.items():
            other = package_of(dep, root)
            if other != node:
                edges.setdefault(other, line)
    for deps in list(graph.values()):
        for d in deps:
            graph.setdefault(d, {})
    return graph


def package_cycles(package_dir: Path) -> list[str]:
    """``import_cycles`` between packages (``package_graph``): lines ``a -> b (line 3) -> a (line 9)``,
    the line of the first import of each edge in a module of its package."""
    return cycles_of(package_graph(package_dir))


# The layers, lowest first: each may import its own and those below it, never above.
# The shared core is what the build and the loader both need (signatures, dtypes,
# shapes, the op descriptions the signatures consult, targets, reasons, errors);
# the loader runs kernels in applications and needs nothing of the build. The bundle
# format (``loader/format.py``) is the loader's: the build writes what it reads.
CORE = ("dtypes", "shapes", "signature", "ops", "targets", "reasons", "errors", "torch_classes", "bundle_names",
        "compared", "probe", "inline_norms", "graph_ops", "residual_adds")
LOADER = ("loader",)
BUILD = ("stages", "build", "report", "manifest", "measure", "trace", "cli", "records", "candidates", "layout",
         "files", "store")
LAYERS = (("core", CORE), ("loader", LOADER), ("build", BUILD))


def layer_of(module: str, root: str, layers=LAYERS) -> str | None:
    """The layer of ``module`` (its first component under the root; None: the root's own ``__init__``)."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    for name, members in layers:
        if parts[1] in members:
            return name
    raise AssertionError(f"{module}: in no layer of tests/test_architecture.py LAYERS (add it to one)")


def layer_violations(package_dir: Path, layers=LAYERS) -> list[str]:
    """``module imports dep (line N): layer -> higher layer`` for each import of a module
    of a layer above the importer's (``layers``: lowest first)."""
    root = Path(package_dir).name
    rank = {name: i for i, (name, _) in enumerate(layers)}
    out = []
    for mod, deps in import_graph(package_dir).items():
        mine = layer_of(mod, root, layers)
        for dep, line in deps.items():
            theirs = layer_of(dep, root, layers)
            if mine is not None and theirs is not None and rank[theirs] > rank[mine]:
                out.append(f"{mod} imports {dep} (line {line}): {mine} -> {theirs}")
    return sorted(out)


def long_modules(package_dir: Path, limit: int = LONG_MODULE) -> list[tuple[str, int]]:
    """(file relative to the package's parent, lines) of each module over ``limit``
    lines whose docstring does not say why it is one module (``WHY_ONE_MODULE``)."""
    out = []
    for path in sorted(Path(package_dir).rglob("*.py")):
        text = path.read_text()
        n = len(text.splitlines())
        doc = ast.get_docstring(ast.parse(text)) or ""
        if n > limit and WHY_ONE_MODULE not in doc:
            out.append((str(path.relative_to(Path(package_dir).parent)), n))
    return out


def private_imports(package_dir: Path) -> list[str]:
    """``file:line module._name`` for each use of another module's underscore name:
    ``from m import _name``, and ``m._name`` where ``m`` names a module of the package
    imported by that file (dunder names are not private)."""
    modules = package_modules(package_dir)
    root = Path(package_dir).name
    out = []
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        bound: dict[str, str] = {}  # local name -> a module of the package
        for node in _imports(tree):
            if isinstance(node, ast.ImportFrom):
                source = _from_source(node, mod, is_pkg)
                if source != root and not source.startswith(root + "."):
                    continue
                for a in node.names:
                    if f"{source}.{a.name}" in modules:
                        bound[a.asname or a.name] = f"{source}.{a.name}"
                    elif a.name.startswith("_") and not a.name.startswith("__") and source != mod:
                        out.append(f"{path.relative_to(Path(package_dir).parent)}:{node.lineno} {source}.{a.name}")
            else:
                for a in node.names:
                    if a.name in modules and a.asname:
                        bound[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and node.attr.startswith("_") and not node.attr.startswith("__")
                    and bound[node.value.id] != mod):
                out.append(f"{path.relative_to(Path(package_dir).parent)}:{node.lineno} "
                           f"{bound[node.value.id]}.{node.attr}")
    return sorted(out)


# -------------------------------------------------------------------- rules
def test_no_import_cycles():
    cycles = import_cycles(PACKAGE)
    assert not cycles, "import cycles among boo_build's modules (function-level imports count):\n" + \
        "\n".join(cycles)


def test_no_package_cycles():
    """boo_build's packages (layers: loader, ops, stages, build, report, ...) import each other one way."""
    cycles = package_cycles(PACKAGE)
    assert not cycles, "packages of boo_build importing each other (function-level imports count):\n" + \
        "\n".join(cycles)


def test_a_long_module_says_why_it_is_one():
    long = long_modules(PACKAGE)
    assert not long, (f"modules over {LONG_MODULE} lines without a '{WHY_ONE_MODULE}' paragraph in their "
                      "docstring:\n" + "\n".join(f"{p}: {n}" for p, n in long))


def test_no_module_uses_another_modules_underscore_names():
    found = private_imports(PACKAGE)
    assert not found, "underscore names used outside their module (make them public or move the code):\n" + \
        "\n".join(found)


# ------------------------------------------------------- the checker itself
def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root / "pkg"


@pytest.fixture
def planted(tmp_path):
    return _write(tmp_path, {
        "pkg/__init__.py": "VERSION = '1'\n",
        # a -> b at the top, b -> a inside a function: a cycle
        "pkg/a.py": "from . import b\n",
        "pkg/b.py": "def f():\n    from .a import x\n    return x\n",
        # a three-module cycle through a subpackage, absolute and relative, ``from .. import c``
        "pkg/c.py": "import pkg.sub.d\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/d.py": "from .e import g\n",
        "pkg/sub/e.py": "class K:\n    def m(self):\n        from .. import c\n",
        # a cycle through an import for types only (f <-> g); a name from the package's __init__,
        # stdlib, one-way imports: none
        "pkg/f.py": "import json\nfrom typing import TYPE_CHECKING\nfrom . import VERSION\nfrom .a import b\n"
                    "if TYPE_CHECKING:\n    from .g import G\n",
        "pkg/g.py": "from .f import json\n",
        "pkg/h.py": "def f():\n    from .h import f\n",  # imports itself
        "pkg/long.py": "x = 1\n" * (LONG_MODULE + 1),
        "pkg/long_why.py": f'"""Long.\n\n{WHY_ONE_MODULE} the parts share one lock."""\n' + "x = 1\n" * LONG_MODULE,
        "pkg/short.py": "x = 1\n" * LONG_MODULE,
        # private names: imported from another module, used through an imported module, and fine uses
        "pkg/priv.py": "from .a import _hidden\nfrom . import short\nfrom . import short as s2\n"
                       "y = short._x + s2._y + short.__name__\n_own = 1\nz = _own\n",
    })


def test_checker_finds_planted_cycles(planted):
    graph = import_graph(planted)
    assert graph["pkg.a"] == {"pkg.b": 1}
    assert graph["pkg.b"] == {"pkg.a": 2}  # inside a function
    assert graph["pkg.f"] == {"pkg": 3, "pkg.a": 4, "pkg.g": 6}  # a name of __init__; TYPE_CHECKING counts
    assert import_graph(planted, type_checking=False)["pkg.f"] == {"pkg": 3, "pkg.a": 4}
    assert graph["pkg.sub.e"] == {"pkg.c": 3}
    assert graph["pkg.c"] == {"pkg.sub.d": 1}
    assert strongly_connected(graph) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.sub.d", "pkg.sub.e"], ["pkg.f", "pkg.g"],
                                         ["pkg.h"]]
    cycles = import_cycles(planted)
    assert cycles == ["pkg.a -> pkg.b (line 1) -> pkg.a (line 2)",
                      "pkg.c -> pkg.sub.d (line 1) -> pkg.sub.e (line 1) -> pkg.c (line 3)",
                      "pkg.f -> pkg.g (line 6) -> pkg.f (line 1)",
                      "pkg.h -> pkg.h (line 2)"]


def test_checker_finds_planted_package_cycles(planted, tmp_path):
    # planted: pkg.c -> pkg.sub (pkg.sub.d), and pkg.sub (pkg.sub.e) -> pkg.c; a and b: one package each
    graph = package_graph(planted)
    assert graph["pkg.sub"] == {"pkg.c": 3} and graph["pkg.c"] == {"pkg.sub": 1}
    assert package_cycles(planted) == ["pkg.a -> pkg.b (line 1) -> pkg.a (line 2)",
                                       "pkg.c -> pkg.sub (line 1) -> pkg.c (line 3)",
                                       "pkg.f -> pkg.g (line 6) -> pkg.f (line 1)"]
    # two packages importing each other through different modules, one inside a function: one cycle;
    # a TYPE_CHECKING import back: another
    two = _write(tmp_path / "two", {
        "pkg/__init__.py": "", "pkg/x/__init__.py": "", "pkg/y/__init__.py": "",
        "pkg/x/one.py": "from ..y import two\n", "pkg/y/two.py": "x = 1\n",
        "pkg/y/three.py": "def f():\n    from ..x.four import g\n", "pkg/x/four.py": "g = 1\n",
        "pkg/z/__init__.py": "", "pkg/z/five.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                   "    from ..x import one\n",
        "pkg/x/six.py": "from ..z import five\n"})
    assert package_cycles(two) == ["pkg.x -> pkg.y (line 1) -> pkg.x (line 2)",
                                   "pkg.z -> pkg.x (line 3) -> pkg.z (line 1)"]


def test_checker_finds_planted_long_module(planted):
    assert long_modules(planted) == [("pkg/long.py", LONG_MODULE + 1)]


def test_checker_finds_planted_private_names(planted):
    assert private_imports(planted) == ["pkg/priv.py:1 pkg.a._hidden", "pkg/priv.py:4 pkg.short._x",
                                        "pkg/priv.py:4 pkg.short._y"]


def test_the_layers_import_downwards():
    """The shared core imports neither the loader nor the build; the loader imports
    nothing of the build (``LAYERS``), at any depth, ``TYPE_CHECKING`` included."""
    found = layer_violations(PACKAGE)
    assert not found, "imports of a higher layer (docs/ARCHITECTURE.md, the layers):\n" + "\n".join(found)


def test_checker_finds_planted_layer_violations(tmp_path):
    layers = (("core", ("sig", "ops")), ("loader", ("loader",)), ("build", ("stages", "cli")))
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "", "pkg/sig.py": "", "pkg/loader/__init__.py": "", "pkg/stages/__init__.py": "",
        "pkg/cli.py": "from . import stages\n",  # build -> build: fine
        "pkg/ops/__init__.py": "from .. import sig\n",  # core -> core: fine
        "pkg/ops/calls.py": "def f():\n    from ..loader import bundle\n",  # core -> loader, in a function
        "pkg/loader/bundle.py": "from typing import TYPE_CHECKING\nfrom .. import sig\nif TYPE_CHECKING:\n"
                                "    from ..stages import plan\n",  # loader -> build, for types only: counts
        "pkg/stages/plan.py": "from ..loader import bundle\n"})  # build -> loader: fine
    assert layer_violations(pkg, layers) == ["pkg.loader.bundle imports pkg.stages.plan (line 4): loader -> build",
                                             "pkg.ops.calls imports pkg.loader.bundle (line 2): core -> loader"]
    (pkg / "misc.py").write_text("")
    with pytest.raises(AssertionError, match="pkg.misc: in no layer"):
        layer_violations(pkg, layers)
