"""Ray 2.60's public Train and Tune surface against trainwire's, name by name (scripts/ray_surface.py).

The computed differences must be exactly the rows of docs/porting/ray-surface.md, each with a
reason; the comparison rules are checked on small functions first.
"""

from __future__ import annotations

import functools
import importlib.util
import pathlib
import sys
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load_script() -> Any:
    spec = importlib.util.spec_from_file_location("ray_surface", ROOT / "scripts" / "ray_surface.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["ray_surface"] = module
    spec.loader.exec_module(module)
    return module


surface = _load_script()


def _diff(ray_fn: Any, ours: Any) -> str | None:
    return surface.compare_name(ray_fn, ours)


# --- the rules ---------------------------------------------------------------------------------


def test_a_call_written_for_ray_must_bind_the_same_way():
    def ray(a, b=1, *, c=None): ...

    def same(a, b=1, *, c=None, extra=0): ...  # an extra keyword with a default is fine

    def missing(a, *, c=None): ...

    def keyword_only(*, a, b=1, c=None): ...

    def no_default(a, b, *, c=None): ...

    def extra_required(a, b=1, *, c=None, d): ...

    def c_positional(a, b=1, c=None): ...  # Ray's keyword-only c, taken by keyword too

    assert _diff(ray, same) is None and _diff(ray, c_positional) is None
    assert _diff(ray, missing) == "signature: missing parameters b"
    assert _diff(ray, keyword_only) == "signature: a not positional #1; b not positional #2"
    assert _diff(ray, no_default) == "signature: b has no default"
    assert _diff(ray, extra_required) == "signature: extra required parameters d"


def test_variadics_private_parameters_and_swallowing_kwargs():
    def ray(a, *args, _internal=None, **kwargs): ...

    def ours(a, *args, **kwargs): ...

    def no_var(a): ...

    def swallow(**kwargs): ...

    assert _diff(ray, ours) is None
    assert _diff(ray, no_var) == "signature: missing parameters *args, **kwargs"

    def ray_named(a, *, flag=False): ...

    # Accepted and ignored is not Ray's behaviour: a parameter only **kwargs takes is missing.
    assert _diff(ray_named, swallow) == "signature: missing parameters a, flag"


def test_classes_kwargs_passed_to_bases_and_wrapped_ray_constructors():
    class Base:
        def __init__(self, loop, *, scaling_config=None, run_config=None): ...

    class Framework(Base):
        def __init__(self, loop, *, framework_config=None, **kwargs): ...

    class RayFramework:
        def __init__(self, loop, *, framework_config=None, scaling_config=None, run_config=None): ...

    assert _diff(RayFramework, Framework) is None
    assert "**kwargs" not in str(surface.our_signature(Framework))

    class RayCheckpoint:
        def __init__(self, path, filesystem=None): ...

    class RayDeprecated(RayCheckpoint):
        original = RayCheckpoint.__init__

        @functools.wraps(original)
        def __init__(self, *args, **kwargs):  # Ray's deprecation wrappers look like this
            RayDeprecated.original(self, *args, **kwargs)

    del RayDeprecated.__init__.__wrapped__

    class Ours:
        def __init__(self, path, filesystem=None, extra=1): ...

    assert str(surface.callable_signature(RayDeprecated)) == "(path, filesystem=None)"
    assert _diff(RayDeprecated, Ours) is None


def test_constants_and_enums():
    import enum

    class RayMode(enum.Enum):
        A = "A"
        B = "B"

    class OurMode(enum.Enum):
        A = "A"

    assert _diff("train", "train") is None
    assert _diff("_preprocessor", "preprocessor.pkl") == "value 'preprocessor.pkl', Ray's is '_preprocessor'"
    assert _diff(RayMode, OurMode) == "missing members B"
    assert _diff(RayMode, RayMode) is None


def test_check_names_new_stale_and_reasonless_rows(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        f"# t\n\n{surface.HEADER}\n"
        "| ray.a | Gone | missing | fixed since |\n"
        "| ray.a | F | signature: missing parameters \\*\\*kwargs | why |\n"
        f"| ray.a | G | missing | {surface.NO_REASON} |\n"
        "| ray.skipped | H | missing | kept |\n\ntext after\n"
    )
    found = surface.Surface(
        differences=[
            surface.Difference("ray.a", "F", "signature: missing parameters **kwargs"),
            surface.Difference("ray.a", "G", "missing"),
            surface.Difference("ray.a", "New", "missing"),
        ],
        skipped={"ray.skipped": "no framework"},
        compared=5,
    )
    table = surface.read_table(page)
    assert table[("ray.a", "F", "signature: missing parameters **kwargs")] == "why"
    problems = surface.check(found, table)
    assert problems == [
        "new difference, not in the table: ray.a | New | missing",
        "listed but no longer differs (drop the row): ray.a | Gone | missing",
        "row without a reason: ray.a | G | missing",
    ]
    surface.write_table(found, page)
    rewritten = surface.read_table(page)
    assert set(rewritten) == {key for key in table if key[1] != "Gone"} | {("ray.a", "New", "missing")}
    assert rewritten[("ray.skipped", "H", "missing")] == "kept" and page.read_text().endswith("text after\n")


def test_counterparts_are_the_rewritten_imports():
    assert surface.counterpart("ray.train.torch") == "trainwire.train.torch"
    assert surface.counterpart("ray.air.integrations.mlflow") == "trainwire.air.integrations.mlflow"


# --- the real surface --------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_the_table_lists_exactly_the_differences_from_ray():
    found = surface.compute()
    assert found.compared > 140, found.compared
    problems = surface.check(found, surface.read_table())
    assert not problems, (
        "docs/porting/ray-surface.md and Ray 2.60's surface disagree (python scripts/ray_surface.py --write "
        "regenerates the rows, keeping reasons):\n" + "\n".join(problems)
    )
    # trainwire's counterparts of every compared module exist, apart from those the table lists as missing.
    missing_modules = {d.module for d in found.differences if d.difference == "missing"}
    for ray_name in set(surface.MODULES) - set(found.skipped) - missing_modules:
        assert importlib.util.find_spec(surface.counterpart(ray_name)) is not None, ray_name
