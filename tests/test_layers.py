"""The rule of floors (docs/architecture.md), enforced on the import graph of repro/.

The graph is read from the source with `ast`, every import counted: at the top of a
module, inside a function (a lazy import still runs) and under `if TYPE_CHECKING:` (a
type is knowledge of the module that defines it). Three rules:

1. Floors. Imports go down, never up: a module imports its own side of its floor or a
   floor below it. The sides of one floor (`snapshot/` and `install/`, the pack side
   and the unpack side) never import each other. A deliberate exception is named in
   ALLOWED with its reason; an entry that no longer matches an import fails too.
2. No import cycle between modules (imports under TYPE_CHECKING left out: they never
   run).
3. The target side: `repro/probe/` and `repro/ladder/scripts/` run inside the target's
   interpreter (Python 3.8, none of repro's dependencies) and import nothing of repro.

A failure names each import as `file:line: importer -> imported` and the rule it breaks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPRO = Path(__file__).resolve().parent.parent / "repro"

# Top to bottom. A floor is a tuple of sides; a side, the modules and packages it holds.
# Every module of repro not named here sits on the bottom floor (errors, hashing, crc,
# _toml, interpreter, redaction, treeglob, smallfile, diffapply, units/, probe/, and
# repro/__init__.py itself), whose modules may use each other.
FLOORS: tuple[tuple[tuple[str, ...], ...], ...] = (
    (("repro.__main__", "repro.cli"),),  # click and rich: nowhere else
    (("repro.verbs",),),  # check, inspect, diff, sbom, demo: may use both sides
    # The pack side and the unpack side.
    (("repro.snapshot",), ("repro.install",)),
    (("repro.config",),),  # repro.toml; reads the ladder's rung names
    (("repro.ladder",),),
    (("repro.wheel",),),  # everything a wheel is, used by both sides
    (("repro.treecopy",), ("repro.servecmd",)),  # on archive/ and bundle/
    (("repro.archive",), ("repro.gpu",)),  # archive/writer.py reads bundle/layout.py
    (("repro.bundle",),),  # the format: layout, members, lock, SBOM, fetch, facts
)
# Named in FLOORS before its package is written (and the test passes without it).
NOT_YET: frozenset[str] = frozenset()
TARGET_SIDE = ("repro.probe", "repro.ladder.scripts")

# (importer, imported, why): the imports that run against the floors on purpose.
ALLOWED: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    file: str  # relative to the repository
    line: int
    lazy: bool = False  # inside a function
    type_checking: bool = False  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        how = " (under TYPE_CHECKING)" if self.type_checking else " (lazy)" if self.lazy else ""
        return f"{self.file}:{self.line}: {self.importer} -> {self.imported}{how}"


def repro_modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's __init__) for every .py file under `root`."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        found[".".join(parts)] = (path, package)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, package: bool, file: str, known: Iterable[str]) -> None:
        self.module, self.file, self.known = module, file, frozenset(known)
        self.base = module if package else module.rpartition(".")[0]
        self.functions = 0
        self.type_checking = 0
        self.found: list[Import] = []

    def _resolve(self, dotted: str) -> str | None:
        """The module of repro that `dotted` names, or the nearest package holding it."""
        while dotted and dotted not in self.known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    def _add(self, dotted: str, line: int) -> None:
        target = self._resolve(dotted)
        if target is not None and target != self.module:
            self.found.append(
                Import(
                    self.module,
                    target,
                    self.file,
                    line,
                    lazy=self.functions > 0,
                    type_checking=self.type_checking > 0,
                )
            )

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions += 1
        self.generic_visit(node)
        self.functions -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.type_checking += 1
        for child in node.body:
            self.visit(child)
        self.type_checking -= 1
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "repro" or alias.name.startswith("repro."):
                self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.base
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = ".".join(part for part in (base, node.module) if part)
        else:
            source = node.module or ""
        if source != "repro" and not source.startswith("repro."):
            return
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            self._add(submodule if submodule in self.known else source, node.lineno)


def import_graph(root: Path = REPRO) -> list[Import]:
    """Every import of a module of repro by another, in file and line order (once per
    line: `from repro.bundle.lock import Pin, LockFile` is one import of the module)."""
    modules = repro_modules(root)
    found: list[Import] = []
    for name, (path, package) in modules.items():
        visitor = _Imports(name, package, path.relative_to(root.parent).as_posix(), modules)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        found += visitor.found
    return list(dict.fromkeys(found))


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def place(module: str, floors: Sequence[Sequence[Sequence[str]]] = FLOORS) -> tuple[int, int]:
    """(floor, side) of a module, top first; the bottom floor is len(floors), one side."""
    for floor, sides in enumerate(floors):
        for side, prefixes in enumerate(sides):
            if any(_within(module, prefix) for prefix in prefixes):
                return floor, side
    return len(floors), 0


def _where(module: str, floors: Sequence[Sequence[Sequence[str]]]) -> str:
    floor, side = place(module, floors)
    if floor == len(floors):
        return f"the bottom floor ({len(floors) + 1} of {len(floors) + 1})"
    names = ", ".join(floors[floor][side])
    return f"floor {floor + 1} of {len(floors) + 1} ({names})"


def floor_violations(
    imports: Iterable[Import],
    floors: Sequence[Sequence[Sequence[str]]] = FLOORS,
    allowed: Iterable[tuple[str, str, str]] = ALLOWED,
) -> list[str]:
    """Each import that goes up a floor or across to the other side of its floor, and
    each import of repro by the target side's scripts, named with the rule it breaks."""
    excused = {(importer, imported) for importer, imported, _ in allowed}
    problems = []
    for item in imports:
        if any(_within(item.importer, prefix) for prefix in TARGET_SIDE):
            problems.append(
                f"{item}: a script run by the target's interpreter imports repro "
                "(rule: probe/ and ladder/scripts/ import nothing of repro)"
            )
            continue
        if (item.importer, item.imported) in excused:
            continue
        (floor, side), (their_floor, their_side) = (
            place(item.importer, floors),
            place(item.imported, floors),
        )
        if their_floor < floor:
            problems.append(
                f"{item}: {_where(item.importer, floors)} imports "
                f"{_where(item.imported, floors)}, a higher floor "
                "(rule: imports go down, never up)"
            )
        elif their_floor == floor and their_side != side:
            problems.append(
                f"{item}: {_where(item.importer, floors)} imports the other side of its "
                f"floor, {_where(item.imported, floors)} "
                "(rule: the sides of one floor never import each other)"
            )
    return problems


def import_cycles(imports: Iterable[Import], *, type_checking: bool = False) -> list[list[str]]:
    """The circles of the graph of imports that run (TYPE_CHECKING ones left out unless
    `type_checking`), one per strongly connected component (Tarjan), each as a path back
    to its start."""
    edges: dict[str, list[str]] = {}
    for item in imports:
        if type_checking or not item.type_checking:
            edges.setdefault(item.importer, []).append(item.imported)
            edges.setdefault(item.imported, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:  # recursion depth: the longest chain of imports
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in edges[node]:
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return [_circle(sorted(component), edges) for component in components]


def _circle(component: Sequence[str], edges: Mapping[str, Sequence[str]]) -> list[str]:
    """A path from the component's first module back to it, inside the component."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    todo = [start]
    while todo:
        node = todo.pop(0)
        for other in edges[node]:
            if other == start:
                return [*paths[node], start]
            if other in members and other not in paths:
                paths[other] = [*paths[node], other]
                todo.append(other)
    raise AssertionError(f"no circle through {start}")  # a component always has one


# --- the contract, on repro as it is -------------------------------------------------------


def test_imports_go_down_the_floors() -> None:
    problems = floor_violations(import_graph())
    assert not problems, "imports against the rule of floors:\n" + "\n".join(problems)


def test_no_import_cycle() -> None:
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles (rule: no circle between modules):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


def test_no_circle_even_through_imports_for_type_checking() -> None:
    """The structure drawn from the imports has no circle either: a type imported under
    TYPE_CHECKING is knowledge of its module too (a protocol breaks such a circle)."""
    cycles = import_cycles(import_graph(), type_checking=True)
    assert not cycles, "import circles through TYPE_CHECKING imports:\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


def test_every_allowed_exception_is_still_an_import_with_a_reason() -> None:
    present = {(item.importer, item.imported) for item in import_graph()}
    for importer, imported, why in ALLOWED:
        assert (importer, imported) in present, f"{importer} -> {imported}: allowed, not there"
        assert why.strip(), f"{importer} -> {imported}: allowed without a reason"


def test_the_floors_name_packages_that_exist() -> None:
    modules = repro_modules(REPRO)
    named = [prefix for sides in FLOORS for side in sides for prefix in side]
    assert len(named) == len(set(named))
    missing = [p for p in named if p not in modules and p not in NOT_YET]
    assert not missing, f"FLOORS names what repro/ does not hold: {missing}"


# --- the checker, on small graphs made to break it ------------------------------------------

_FLOORS = (
    (("repro.verbs",),),
    (("repro.snapshot",), ("repro.install",)),
    (("repro.bundle",),),
)


def _imp(importer: str, imported: str, *, type_checking: bool = False) -> Import:
    return Import(importer, imported, "x.py", 7, lazy=True, type_checking=type_checking)


@pytest.mark.parametrize(
    ("item", "words"),
    [
        (
            _imp("repro.bundle.stream", "repro.install.fetch"),
            [
                "x.py:7: repro.bundle.stream -> repro.install.fetch (lazy)",
                "floor 3 of 4 (repro.bundle) imports floor 2 of 4 (repro.install)",
                "imports go down, never up",
            ],
        ),
        (
            _imp("repro.install.stages", "repro.snapshot.lock"),
            [
                "repro.install.stages -> repro.snapshot.lock",
                "the other side of its floor",
                "the sides of one floor never import each other",
            ],
        ),
        (
            _imp("repro.errors", "repro.verbs.view", type_checking=True),
            ["(under TYPE_CHECKING)", "the bottom floor (4 of 4) imports floor 1 of 4"],
        ),
        (
            _imp("repro.probe.environment", "repro.errors"),
            ["import nothing of repro", "repro.probe.environment -> repro.errors"],
        ),
    ],
)
def test_a_violation_is_named_with_its_rule(item: Import, words: list[str]) -> None:
    (problem,) = floor_violations([item], _FLOORS, ())
    for word in words:
        assert word in problem, problem


def test_downward_and_same_side_imports_pass_and_an_exception_is_allowed() -> None:
    fine = [
        _imp("repro.verbs.view", "repro.snapshot.scan.compare"),
        _imp("repro.install.stages", "repro.install.report"),
        _imp("repro.install.stages", "repro.bundle.lock"),
        _imp("repro.bundle.lock", "repro.errors"),
        _imp("repro.units.render", "repro.units.command"),
    ]
    assert floor_violations(fine, _FLOORS, ()) == []
    up = _imp("repro.bundle.stream", "repro.install.fetch")
    assert floor_violations([up], _FLOORS, ())
    assert not floor_violations([up], _FLOORS, [(up.importer, up.imported, "a reason")])


def test_a_cycle_is_found_and_type_checking_imports_break_none() -> None:
    graph = [
        _imp("repro.snapshot.pack", "repro.snapshot.stages.members"),
        _imp("repro.snapshot.stages.members", "repro.verbs.sbom"),
        _imp("repro.verbs.sbom", "repro.verbs.view"),
        _imp("repro.verbs.view", "repro.snapshot.pack"),
        _imp("repro.verbs.view", "repro.bundle.info"),
        _imp("repro.snapshot.stages.probe", "repro.snapshot.stages.workspace"),
        _imp("repro.snapshot.stages.workspace", "repro.snapshot.stages.probe", type_checking=True),
    ]
    assert import_cycles(graph) == [
        [
            "repro.snapshot.pack",
            "repro.snapshot.stages.members",
            "repro.verbs.sbom",
            "repro.verbs.view",
            "repro.snapshot.pack",
        ]
    ]
    assert import_cycles(graph[4:]) == []


def test_the_reader_resolves_relative_nested_and_type_checking_imports(tmp_path: Path) -> None:
    root = tmp_path / "repro"
    (root / "side").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "errors.py").write_text("")
    (root / "side" / "__init__.py").write_text("")
    (root / "side" / "b.py").write_text("")
    (root / "side" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"
        "from repro import errors\n"
        "import json\n"
        "if TYPE_CHECKING:\n"
        "    from repro.side.b import Thing\n"
        "def later():\n"
        "    import repro.errors\n"
    )
    found = {(i.imported, i.line, i.lazy, i.type_checking) for i in import_graph(root)}
    assert found == {
        ("repro.side.b", 2, False, False),
        ("repro.errors", 3, False, False),
        ("repro.side.b", 6, False, True),
        ("repro.errors", 8, True, False),
    }
