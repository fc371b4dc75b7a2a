"""The import rules of docs/architecture.md, enforced.

Every module of src/gpudoctor belongs to one layer; a module imports only from its own layer or a
lower one, and the import graph has no cycle. Imports inside functions (lazy imports) count, as
do imports under ``if TYPE_CHECKING`` — a cycle that only type checkers see is still a cycle a
reader must untangle. A module added outside the known packages fails here until it is placed.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "gpudoctor"

# Lowest first. A name matches a module and everything under it (a package).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        (
            "gpudoctor",  # the package root: __version__ and the lazy Python API table only
            "gpudoctor.inputs",
            "gpudoctor.outputs",
            "gpudoctor.children",
            "gpudoctor.schemas",
            "gpudoctor.facts",
            "gpudoctor.findings",
            "gpudoctor.context",
            "gpudoctor.rootfs",
            "gpudoctor.escaping",
            "gpudoctor.lazy_re",
            "gpudoctor.frozen",
            "gpudoctor.yaml_tree",
            "gpudoctor.model",
            "gpudoctor.tables",
        ),
    ),
    ("workers", ("gpudoctor.workers",)),
    ("probes", ("gpudoctor.probes",)),
    ("engine", ("gpudoctor.engine",)),
    ("advice", ("gpudoctor.advice",)),
    ("measure", ("gpudoctor.bench", "gpudoctor.preflight", "gpudoctor.fleet")),
    ("render", ("gpudoctor.render",)),
    ("cli", ("gpudoctor.cli", "gpudoctor.__main__")),
]
GENERATED = ("_validate_",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(name: str) -> int | None:
    best: tuple[int, int] | None = None  # (length of the matching prefix, layer)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            # The package root names itself only; every other prefix names a module or package.
            covers = name == prefix or (prefix != "gpudoctor" and name.startswith(prefix + "."))
            if covers and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The gpudoctor modules this module imports anywhere in its body."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[: -(node.level - 1)]
                target = ".".join(base) + (f".{node.module}" if node.module else "")
            else:
                target = node.module or ""
            if not target.startswith("gpudoctor"):
                continue
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                found.add(candidate if candidate in known else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("gpudoctor"))
    found.discard(name)
    return {m for m in found if m in known}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def test_every_module_has_a_layer() -> None:
    unplaced = [name for name in modules() if layer_of(name) is None]
    assert not unplaced, f"modules outside the layers of docs/architecture.md: {unplaced}"


def test_no_module_imports_upward() -> None:
    upward = []
    for name, targets in graph().items():
        mine = layer_of(name)
        for target in sorted(targets):
            theirs = layer_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{name} ({LAYERS[mine][0]}) -> {target} ({LAYERS[theirs][0]})")
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_workers_import_nothing_of_gpudoctor() -> None:
    # A worker runs in the target interpreter, which may have no gpudoctor at all.
    workers = {n: t for n, t in graph().items() if layer_of(n) == 1}
    leaking = {n: sorted(t) for n, t in workers.items() if t - {"gpudoctor.workers"}}
    assert not leaking, f"worker scripts importing gpudoctor: {leaking}"


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module (or a self-loop)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_import_cycles() -> None:
    edges = graph()
    # The package root is imported first by every module of the package anyway; its edges are
    # `__version__` only (the lazy API table is checked below), so it cannot close a cycle.
    for targets in edges.values():
        targets.discard("gpudoctor")
    cycles = strongly_connected(edges)
    assert not cycles, "import cycles (lazy imports included): " + "; ".join(" <-> ".join(c) for c in cycles)


def test_cycle_finder_finds_a_cycle() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_package_root_imports_only_version_and_the_api() -> None:
    import gpudoctor

    targets = {module for module, _ in gpudoctor._LAZY.values()}
    assert all(layer_of(f"gpudoctor.{t}") == layer_of("gpudoctor.preflight") for t in targets), targets
    assert imports_of("gpudoctor", PACKAGE / "__init__.py", modules()) == set()


def test_every_package_says_what_it_may_import() -> None:
    silent = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        if "import" not in doc.lower():
            silent.append(str(init.relative_to(SRC)))
    assert not silent, f"package docstrings that do not say what the package may import: {silent}"


@pytest.mark.parametrize("name", sorted(modules()))
def test_hand_written_modules_stay_small(name: str) -> None:
    path = modules()[name]
    if any(marker in path.name for marker in GENERATED):
        pytest.skip("generated")
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= 560, f"{path.relative_to(SRC)} has {lines} lines; split it by concern"


def test_layers_are_the_documented_ones() -> None:
    doc = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [prefix for _, prefixes in LAYERS for prefix in prefixes if f"`{prefix}`" not in doc]
    assert not missing, f"docs/architecture.md does not name: {missing}"


def test_reports_do_not_drift_from_the_graph() -> None:
    # Guard against a checker that silently sees nothing (wrong root, parse of an empty set).
    edges = graph()
    assert len(edges) > 50
    assert "gpudoctor.facts" in edges["gpudoctor.findings"] or any(
        "gpudoctor.facts" in t for t in edges.values()
    )
    per_layer: defaultdict[int, int] = defaultdict(int)
    for name in edges:
        layer = layer_of(name)
        if layer is not None:
            per_layer[layer] += 1
    assert all(per_layer[i] for i in range(len(LAYERS))), per_layer
