"""No import circles: no trainwire module imports, however indirectly, a module that imports it.

Every import counts, those inside functions and under ``TYPE_CHECKING`` too: a circle there
still ties two rooms together. The graph is grimp's, the one import-linter checks the layers on.
"""

from __future__ import annotations

import sys

import grimp

PACKAGES = (
    "trainwire_core",
    "trainwire",
    "trainwire_coordinator",
    "trainwire_worker",
    "trainwire_predictor",
    "trainwire_console",
)


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more modules that reach each other (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def test_strongly_connected_finds_a_circle_and_only_it():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(edges) == [["a", "b", "c"]]


def test_no_trainwire_module_is_in_an_import_circle():
    graph = grimp.build_graph(*PACKAGES)
    modules = graph.modules
    edges = {m: set(graph.find_modules_directly_imported_by(m)) & modules for m in modules}
    # The walk goes as deep as the longest import chain; the limit is put back for later tests.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        circles = strongly_connected(edges)
    finally:
        sys.setrecursionlimit(limit)
    detail = []
    for group in circles:
        members = set(group)
        for m in group:
            for d in sorted(edges[m] & members):
                lines = graph.get_import_details(importer=m, imported=d)
                detail.append(f"{m} -> {d} (line {lines[0]['line_number'] if lines else '?'})")
    assert circles == [], "import circles:\n" + "\n".join(detail)
