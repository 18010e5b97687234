"""The shape docs/architecture.md promises: rooms, not a flat hall; small modules; no cycles.

import-linter (`lint-imports` in .ci/run) checks the layers; this checks what it does not.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp

JOBQ = Path(__file__).resolve().parents[2] / "jobq"
#: The most lines a module of jobq may have.
CEILING = 450


def modules() -> list[Path]:
    return sorted(JOBQ.rglob("*.py"))


def test_no_module_is_over_the_ceiling() -> None:
    long = {
        str(p.relative_to(JOBQ)): n
        for p in modules()
        if (n := len(p.read_text().splitlines())) > CEILING
    }
    assert long == {}, f"modules over {CEILING} lines: split them by concept"


def test_every_module_lives_in_a_room() -> None:
    flat = [p.name for p in JOBQ.glob("*.py") if p.name != "__init__.py"]
    assert flat == [], "put each module in the package of its layer and capability"


def test_every_room_says_what_it_is_for() -> None:
    silent = [
        str(p.parent.relative_to(JOBQ))
        for p in JOBQ.rglob("__init__.py")
        if "_migrations" not in p.parts and not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert silent == []


def test_no_import_cycle_in_jobq_type_only_imports_included() -> None:
    graph = grimp.build_graph("jobq")  # imports under TYPE_CHECKING count too
    cycles = strongly_connected(graph)
    assert cycles == [], f"modules that import each other in a circle: {cycles}"


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """The groups of more than one module that import each other (Tarjan)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups
