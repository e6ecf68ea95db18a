"""Tests mirror the modules: ``tests/<package>/test_<module>.py``, or a cross-cutting folder.

A test of one module is named after it (``tests/coordinator/test_run_state.py`` for
``trainwire_coordinator/execution/run_state.py``), optionally with an aspect after it
(``test_storage_s3.py``); the module may be named with its packages (``test_tune_pb2.py``,
``test_air_integrations.py``). Tests that start Ray or services across packages go in
``tests/integration/``; ``e2e/``, ``security/`` and ``project/`` hold what belongs to no one module.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

# tests/<folder> -> the package its tests mirror.
MIRRORS = {
    "client": "client/trainwire",
    "core": "core/trainwire_core",
    "coordinator": "coordinator/trainwire_coordinator",
    "worker": "worker/trainwire_worker",
    "predictor": "predictor/trainwire_predictor",
    "console": "console/trainwire_console",
}
# Folders of tests that belong to no one module.
CROSS_CUTTING = {"integration", "e2e", "security", "project"}
# Tests that do not mirror a module yet, each with the reason; a fixed one must leave the list.
NOT_YET = {
    # ``trainwire runs plot`` (client/trainwire/plotting.py), on the console's package-scoped runs.
    "tests/console/test_plot.py": "its fixtures are tests/console's; it belongs in tests/client/test_plotting.py",
}


def module_names(package: Path) -> set[str]:
    """Every name a test may take for a module of ``package``: its path's tails, joined by "_"."""
    names = set()
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.update("_".join(parts[i:]).lstrip("_") for i in range(len(parts)))
    names.discard("")
    return names


def mirrors(test: Path, names: set[str]) -> bool:
    """``test_<module>.py`` or ``test_<module>_<aspect>.py`` for one of ``names``."""
    words = test.stem.removeprefix("test_").split("_")
    return any("_".join(words[:i]) in names for i in range(1, len(words) + 1))


def misplaced() -> list[str]:
    names = {folder: module_names(ROOT / package) for folder, package in MIRRORS.items()}
    wrong = []
    for test in sorted(TESTS.rglob("test_*.py")):
        rel = test.relative_to(TESTS)
        folder = rel.parts[0]
        if len(rel.parts) == 1 or folder in CROSS_CUTTING:
            ok = len(rel.parts) > 1
        else:
            ok = folder in MIRRORS and len(rel.parts) == 2 and mirrors(test, names[folder])
        if not ok:
            wrong.append(str(test.relative_to(ROOT)))
    return wrong


def test_every_test_module_mirrors_a_module_or_sits_in_a_cross_cutting_folder():
    wrong = [path for path in misplaced() if path not in NOT_YET]
    assert not wrong, (
        "name each test after the module it tests (tests/<package>/test_<module>[_<aspect>].py), or move it to "
        f"one of tests/{{{', '.join(sorted(CROSS_CUTTING))}}}/ if it tests no one module: " + ", ".join(wrong)
    )


def test_no_two_test_modules_share_a_name():
    # Test folders are not packages: pytest imports each test module by its file name alone.
    by_name: dict[str, list[str]] = {}
    for test in TESTS.rglob("test_*.py"):
        by_name.setdefault(test.name, []).append(str(test.relative_to(ROOT)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"rename one of each (e.g. test_<module>_<aspect>.py): {shared}"


def test_the_not_yet_list_holds_only_tests_that_still_do_not_mirror():
    assert set(NOT_YET) <= set(misplaced()), set(NOT_YET) - set(misplaced())


def test_the_rule_tells_a_mirror_from_a_stray(tmp_path):
    package = tmp_path / "pkg"
    (package / "execution").mkdir(parents=True)
    for name in ("__init__.py", "execution/__init__.py", "execution/run_state.py", "storage.py"):
        (package / name).write_text("")
    names = module_names(package)
    assert mirrors(Path("test_run_state.py"), names)
    assert mirrors(Path("test_execution_run_state.py"), names)
    assert mirrors(Path("test_storage_s3.py"), names)  # an aspect of storage
    assert not mirrors(Path("test_lifecycle.py"), names)
    assert not mirrors(Path("test_state.py"), names)  # a tail of a word is not a module
