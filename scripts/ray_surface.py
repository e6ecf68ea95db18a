"""Ray 2.60's public Train and Tune surface against trainwire's, name by name.

For each Ray module in ``MODULES`` it takes the public names (the module's ``__all__``, else the
classes and functions the module defines) and looks each up in trainwire's counterpart (the same
path with ``ray.`` changed to ``trainwire.``, as a ported script's imports change). A name differs
when trainwire lacks it, when a callable's signature cannot take every call Ray's takes, when a
plain constant has another value, or when an enum lacks one of Ray's members.

Signatures (a function's, a class's constructor's) are compared by what a call written for Ray
needs, not by equality:

- every Ray parameter exists under its name; a positional one at the same position, still
  positional (and still accepted by keyword when Ray's is);
- a parameter with a default in Ray has one in trainwire (a call may leave it out);
- ``*args`` / ``**kwargs`` in Ray exist in trainwire;
- trainwire's extra parameters have defaults (or are ``*args`` / ``**kwargs``): Ray's calls
  never fill them. A missing parameter is a difference even when trainwire's ``**kwargs`` would
  swallow it: accepted and ignored is not the same behaviour.

Defaults' values and annotations are not compared. ``docs/porting/ray-surface.md`` lists every
difference with the reason it stands; ``tests/project/test_ray_surface.py`` fails when the
computed differences and the table disagree.

Usage::

    python scripts/ray_surface.py           # the current differences, as the table's rows
    python scripts/ray_surface.py --check   # exit 1 when they and the table disagree
    python scripts/ray_surface.py --write   # rewrite the table, keeping the reasons it has
"""

from __future__ import annotations

import argparse
import enum
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "porting" / "ray-surface.md"

# Ray's modules a ported script imports. Their trainwire counterpart is the same path under
# ``trainwire.`` (what the import rewrite does), unless named here.
MODULES: tuple[str, ...] = (
    "ray.train",
    "ray.train.torch",
    "ray.train.xgboost",
    "ray.train.lightgbm",
    "ray.train.tensorflow",
    "ray.train.collective",
    "ray.train.horovod",
    "ray.train.huggingface.transformers",
    "ray.train.lightning",
    "ray.train.v2.api.data_parallel_trainer",
    "ray.train.v2.jax",
    "ray.tune",
    "ray.tune.schedulers",
    "ray.tune.search",
    "ray.tune.search.optuna",
    "ray.tune.stopper",
    "ray.tune.integration.xgboost",
    "ray.tune.integration.lightgbm",
    "ray.tune.logger",
    "ray.tune.result",
    "ray.tune.schedulers.pb2",
    "ray.tune.utils",
    "ray.tune.experiment",
    "ray.air",
    "ray.air.integrations.mlflow",
    "ray.air.integrations.wandb",
    "ray.air.integrations.keras",
    "ray.air.integrations.comet",
)

# The table's header rows, and what a row that still needs its reason says.
HEADER = "| module | name | difference | reason |\n|---|---|---|---|"
NO_REASON = "TODO: give the reason"
_ROW = re.compile(r"^\|\s*`?([\w.]+)`?\s*\|\s*`?([\w.*]+)`?\s*\|(.*)\|(.*)\|\s*$")


def counterpart(ray_module: str) -> str:
    """trainwire's module for one of Ray's: ``ray.`` becomes ``trainwire.``."""
    return "trainwire" + ray_module[len("ray") :]


@dataclass(frozen=True)
class Difference:
    """One of Ray's public names that trainwire lacks or that differs."""

    module: str
    name: str
    difference: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.module, self.name, self.difference)


@dataclass
class Surface:
    """What one comparison found."""

    differences: list[Difference]
    # Ray modules that do not import here (their optional framework is missing): not compared.
    skipped: dict[str, str]
    # How many of Ray's names were compared, and how many of them differ.
    compared: int


def public_names(module: Any) -> list[str]:
    """A module's public names: its ``__all__``, else the classes and functions it defines."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return sorted(set(names))
    return sorted(
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and getattr(obj, "__module__", None) == module.__name__
    )


def _signature(obj: Any) -> inspect.Signature | None:
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        return None
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        # Builtin constructors (an exception class that keeps BaseException's) have none.
        return None


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _says_nothing(sig: inspect.Signature) -> bool:
    return all(p.kind in _VARIADIC for p in sig.parameters.values())


def _init_signatures(init: Any) -> Iterable[inspect.Signature]:
    """An ``__init__``'s signature without ``self``, then those of functions it wraps."""
    candidates = [init]
    # Ray's deprecation and usage wrappers pass (*args, **kwargs) on to the original __init__.
    candidates += [c.cell_contents for c in getattr(init, "__closure__", None) or () if _is_function(c)]
    for candidate in candidates:
        sig = _signature(candidate)
        if sig is not None and sig.parameters:
            yield sig.replace(parameters=list(sig.parameters.values())[1:])


def _is_function(cell: Any) -> bool:
    try:
        return inspect.isfunction(cell.cell_contents)
    except ValueError:  # an empty cell
        return False


def callable_signature(obj: Any) -> inspect.Signature | None:
    """How ``obj`` is called: a function's signature, a class's constructor's.

    A class whose signature is only ``(*args, **kwargs)`` (a wrapper that passes everything
    on) is read through the wrapper and its bases; None when nothing says more.
    """
    sig = _signature(obj)
    if sig is None or not _says_nothing(sig) or not inspect.isclass(obj):
        return sig
    for klass in obj.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        for candidate in _init_signatures(init):
            if not _says_nothing(candidate):
                return candidate
    return None


def our_signature(obj: Any) -> inspect.Signature | None:
    """How a trainwire callable is called; a class's ``**kwargs`` read as passed to its bases.

    trainwire's trainers take their bases' arguments through ``**kwargs`` (``TorchTrainer(...,
    **kwargs)`` hands ``scaling_config`` to ``DataParallelTrainer``): those count as keyword
    parameters, and ``**kwargs`` stays only when the last base takes it too.
    """
    sig = _signature(obj)
    if sig is None or not inspect.isclass(obj):
        return sig
    params = list(sig.parameters.values())
    if not params or params[-1].kind is not inspect.Parameter.VAR_KEYWORD:
        return sig
    own_init = next((k.__dict__["__init__"] for k in obj.__mro__ if "__init__" in k.__dict__), None)
    tail: inspect.Parameter | None = params.pop()
    for klass in obj.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or init is own_init or klass is object:
            continue
        base = next(iter(_init_signatures(init)), None)
        if base is None:
            break
        names = {p.name for p in params}
        params += [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in base.parameters.values()
            if p.name not in names and p.kind not in _VARIADIC
        ]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in base.parameters.values()):
            tail = None
            break
    return sig.replace(parameters=params + ([tail] if tail else []))


def compare_signatures(ray_sig: inspect.Signature, ours: inspect.Signature) -> list[str]:
    """What a call written for ``ray_sig`` cannot do with ``ours`` (empty: every call works)."""
    problems: list[str] = []
    # Ray's private parameters (``_tuner_internal``, ...) are its internals, not its API.
    ray_params = [p for p in ray_sig.parameters.values() if not p.name.startswith("_")]
    our_params = list(ours.parameters.values())
    our_by_name = {p.name: p for p in our_params}
    our_positional = [p for p in our_params if p.kind in _POSITIONAL]
    missing: list[str] = []
    for index, param in enumerate(p for p in ray_params if p.kind in _POSITIONAL):
        mine = our_positional[index] if index < len(our_positional) else None
        if param.name not in our_by_name:
            missing.append(param.name)
        elif mine is None or mine.name != param.name:
            problems.append(f"{param.name} not positional #{index + 1}")
        elif param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and mine.kind is not param.kind:
            problems.append(f"{param.name} positional-only")
    for param in ray_params:
        mine = our_by_name.get(param.name)
        if param.kind is inspect.Parameter.KEYWORD_ONLY:
            if mine is None:
                missing.append(param.name)
            elif mine.kind not in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
                problems.append(f"{param.name} not keyword")
        elif param.kind in _VARIADIC:
            if not any(p.kind is param.kind for p in our_params):
                missing.append(("*" if param.kind is inspect.Parameter.VAR_POSITIONAL else "**") + param.name)
            continue
        if (
            mine is not None
            and param.default is not inspect.Parameter.empty
            and mine.default is inspect.Parameter.empty
            and mine.kind not in _VARIADIC
        ):
            problems.append(f"{param.name} has no default")
    ray_names = {p.name for p in ray_params}
    required_extra = [
        p.name
        for p in our_params
        if p.name not in ray_names and p.kind not in _VARIADIC and p.default is inspect.Parameter.empty
    ]
    parts = []
    if missing:
        parts.append("missing parameters " + ", ".join(missing))
    if required_extra:
        parts.append("extra required parameters " + ", ".join(required_extra))
    return parts + problems


def compare_name(ray_obj: Any, ours: Any) -> str | None:
    """How ``ours`` differs from Ray's object of the same name, or None."""
    if inspect.isclass(ray_obj) and issubclass(ray_obj, enum.Enum):
        if not (inspect.isclass(ours) and issubclass(ours, enum.Enum)):
            return "not an enum"
        lacking = sorted(set(ray_obj.__members__) - set(ours.__members__))
        return "missing members " + ", ".join(lacking) if lacking else None
    if isinstance(ray_obj, (str, int, float, bool)) and not callable(ray_obj):
        return None if ours == ray_obj else f"value {ours!r}, Ray's is {ray_obj!r}"
    if not callable(ray_obj):
        return None
    if not callable(ours):
        return "not callable"
    ray_sig = callable_signature(ray_obj)
    if ray_sig is None:
        return None
    our_sig = our_signature(ours)
    if our_sig is None:
        return None
    problems = compare_signatures(ray_sig, our_sig)
    return "signature: " + "; ".join(problems) if problems else None


def _import(name: str) -> tuple[Any, str | None]:
    try:
        return importlib.import_module(name), None
    except ImportError as exc:
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]


def _our_module(name: str) -> Any:
    """trainwire's module, or None where it does not exist; one that exists but fails to import raises."""
    try:
        found = importlib.util.find_spec(name)
    except ModuleNotFoundError:  # a parent package is missing
        return None
    return importlib.import_module(name) if found is not None else None


def compute(modules: Iterable[str] = MODULES) -> Surface:
    """Compares each of Ray's modules with trainwire's counterpart."""
    differences: list[Difference] = []
    skipped: dict[str, str] = {}
    compared = 0
    for ray_name in modules:
        ray_module, why = _import(ray_name)
        if ray_module is None:
            skipped[ray_name] = why or ""
            continue
        ours = _our_module(counterpart(ray_name))
        for name in public_names(ray_module):
            compared += 1
            if ours is None or not hasattr(ours, name):
                differences.append(Difference(ray_name, name, "missing"))
                continue
            difference = compare_name(getattr(ray_module, name), getattr(ours, name))
            if difference:
                differences.append(Difference(ray_name, name, difference))
    return Surface(differences, skipped, compared)


def read_table(path: Path = TABLE) -> dict[tuple[str, str, str], str]:
    """The table's rows: ``(module, name, difference) -> reason``."""
    rows: dict[tuple[str, str, str], str] = {}
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        match = _ROW.match(line)
        if not match or match.group(1) in ("module", "---"):
            continue
        module, name, difference, reason = (g.strip() for g in match.groups())
        rows[(module, name, difference.replace("\\*", "*"))] = reason
    return rows


def check(surface: Surface, table: dict[tuple[str, str, str], str]) -> list[str]:
    """Where the computed differences and the table disagree (empty: they agree)."""
    found = {d.key for d in surface.differences}
    listed = {key for key in table if key[0] not in surface.skipped}
    problems = [f"new difference, not in the table: {' | '.join(key)}" for key in sorted(found - listed)]
    problems += [f"listed but no longer differs (drop the row): {' | '.join(key)}" for key in sorted(listed - found)]
    problems += [
        f"row without a reason: {' | '.join(key)}"
        for key in sorted(found & listed)
        if not table[key] or table[key] == NO_REASON
    ]
    return problems


def rows(surface: Surface, table: dict[tuple[str, str, str], str]) -> list[str]:
    """The table's rows for these differences, reasons taken from ``table``.

    A row whose difference text changed keeps the reason its (module, name) had.
    """
    by_name = {(module, name): reason for (module, name, _), reason in table.items()}
    out = []
    kept = {key: reason for key, reason in table.items() if key[0] in surface.skipped}
    for key, reason in sorted(kept.items()):
        out.append(_row(*key, reason))
    for diff in sorted(surface.differences, key=lambda d: d.key):
        reason = table.get(diff.key) or by_name.get((diff.module, diff.name)) or NO_REASON
        out.append(_row(diff.module, diff.name, diff.difference, reason))
    return sorted(out)


def _row(module: str, name: str, difference: str, reason: str) -> str:
    # ``*args`` / ``**kwargs`` escaped: Markdown would read the stars as emphasis.
    return f"| {module} | {name} | {difference.replace('*', chr(92) + '*')} | {reason} |"


def write_table(surface: Surface, path: Path = TABLE) -> None:
    """Rewrites the table between its header and the first line after it that is no row."""
    text = path.read_text()
    start = text.index(HEADER) + len(HEADER)
    rest = text[start:].split("\n")
    index = 1
    while index < len(rest) and rest[index].startswith("|"):
        index += 1
    body = "\n".join(rows(surface, read_table(path)))
    path.write_text(text[:start] + "\n" + body + "\n" + "\n".join(rest[index:]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="exit 1 when the table is not the differences")
    group.add_argument("--write", action="store_true", help="rewrite the table's rows, keeping its reasons")
    args = parser.parse_args(argv)
    surface = compute()
    table = read_table()
    for module, why in sorted(surface.skipped.items()):
        print(f"skipped {module}: {why}", file=sys.stderr)
    print(
        f"{surface.compared - len(surface.differences)} of {surface.compared} names as Ray's; "
        f"{len(surface.differences)} differ",
        file=sys.stderr,
    )
    if args.check:
        problems = check(surface, table)
        print("\n".join(problems) or "the table lists exactly the differences")
        return 1 if problems else 0
    if args.write:
        write_table(surface)
        return 0
    print(HEADER)
    print("\n".join(rows(surface, table)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
