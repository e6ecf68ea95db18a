"""Runtime environments: the code and settings that travel with a run, as Ray's ``runtime_env``.

``RunConfig(runtime_env={...})`` takes Ray's keys:

- ``working_dir``: a local directory. It is packed (``.gitignore`` and ``excludes`` honoured),
  uploaded once per content, unpacked on every worker host, put first on ``sys.path`` and
  made the training loop's working directory, so ``open("data/labels.txt")`` works there.
- ``py_modules``: local package directories, ``.py`` files or imported modules, each put on
  ``sys.path``.
- ``pip``: requirement lines, a requirements file, or ``{"packages": [...]}``. Installed once
  per node into a cached virtualenv over the workers' own packages.
- ``env_vars``: variables set for the training loop.
- ``excludes``: gitignore-style patterns left out of ``working_dir`` and ``py_modules``.

With no ``working_dir`` or ``py_modules`` that holds them, the modules the training code
imports from the caller's own directories (not installed anywhere) are shipped as
``py_modules`` on their own: a worker never meets a ``ModuleNotFoundError`` for code the
caller could see.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import sysconfig
import types
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pathspec

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.packages import MAX_PACKAGE_BYTES
from trainwire_core.v1 import common_pb2

KEYS = ("working_dir", "py_modules", "pip", "env_vars", "excludes")
# Always left out: version control and byte code (workers compile their own).
ALWAYS_EXCLUDED = (".git/", "__pycache__/", "*.pyc")
# The packages of trainwire itself, which every worker has.
_OWN_PACKAGES = ("trainwire", "trainwire_core", "trainwire_worker", "trainwire_coordinator", "trainwire_predictor")
_FIELD = "run_config.runtime_env"


def check(runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """Checks a runtime_env dict's keys and value types (on the caller's side, before anything is packed)."""
    if runtime_env is None:
        return {}
    if not isinstance(runtime_env, dict):
        raise InvalidArgumentError("runtime_env must be a dict (Ray's runtime_env keys)", field=_FIELD)
    for key in runtime_env:
        if key not in KEYS:
            hint = "; install packages with 'pip'" if key in ("conda", "uv", "container", "image_uri") else ""
            raise InvalidArgumentError(
                f"runtime_env key {key!r} is not supported (supported: {', '.join(KEYS)}){hint}",
                field=f"{_FIELD}.{key}",
            )
    wd = runtime_env.get("working_dir")
    if wd is not None and not Path(os.fspath(wd)).expanduser().is_dir():
        raise InvalidArgumentError(
            f"runtime_env working_dir {wd!r} is not a local directory", field=f"{_FIELD}.working_dir"
        )
    env_vars = runtime_env.get("env_vars") or {}
    if not isinstance(env_vars, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
    ):
        raise InvalidArgumentError("runtime_env env_vars must map str to str", field=f"{_FIELD}.env_vars")
    excludes = runtime_env.get("excludes") or []
    if isinstance(excludes, str) or not all(isinstance(p, str) for p in excludes):
        raise InvalidArgumentError("runtime_env excludes must be a list of patterns", field=f"{_FIELD}.excludes")
    return dict(runtime_env)


def pip_lines(pip: Any) -> list[str]:
    """Requirement lines from a list, a requirements file or ``{"packages": [...]}``."""
    if isinstance(pip, dict):
        pip = pip.get("packages", [])
    if isinstance(pip, str | os.PathLike):
        path = Path(os.fspath(pip)).expanduser()
        if not path.is_file():
            raise InvalidArgumentError(f"runtime_env pip file {os.fspath(pip)!r} does not exist", field=f"{_FIELD}.pip")
        pip = path.read_text().splitlines()
    if not isinstance(pip, list | tuple) or not all(isinstance(p, str) for p in pip):
        raise InvalidArgumentError("runtime_env pip must be a list of requirements or a file", field=f"{_FIELD}.pip")
    lines = (line.split(" #", 1)[0].strip() for line in pip)
    return [line for line in lines if line and not line.startswith("#")]


# --- packing ---------------------------------------------------------------------------
def _ignore_spec(lines: Iterable[str]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(list(lines))


def package_files(root: Path, excludes: list[str]) -> list[tuple[str, Path]]:
    """(archive name, path) of every file a directory contributes, less excluded and ignored ones."""
    user = _ignore_spec([*ALWAYS_EXCLUDED, *excludes])
    ignores: list[tuple[str, pathspec.GitIgnoreSpec]] = []  # (directory relative to root, its .gitignore)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        gitignore = Path(dirpath, ".gitignore")
        if gitignore.is_file():
            ignores.append((rel_dir, _ignore_spec(gitignore.read_text(errors="replace").splitlines())))

        def ignored(rel: str) -> bool:
            return user.match_file(rel) or any(
                rel.startswith(base) and spec.match_file(rel[len(base) :]) for base, spec in ignores
            )

        dirnames[:] = sorted(d for d in dirnames if not ignored(f"{rel_dir}{d}/"))
        for name in sorted(filenames):
            rel = f"{rel_dir}{name}"
            path = Path(dirpath, name)
            if not ignored(rel) and path.is_file():
                out.append((rel, path))
    return sorted(out)


def pack(files: list[tuple[str, Path]], what: str, max_bytes: int = MAX_PACKAGE_BYTES) -> bytes:
    """A deterministic zip of the files (the same content gives the same bytes, so it is stored once)."""
    sizes = [(path.stat().st_size, name) for name, path in files]
    total = sum(size for size, _ in sizes)
    if total > max_bytes:
        largest = ", ".join(f"{name} ({size / 1e6:.1f} MB)" for size, name in sorted(sizes, reverse=True)[:5])
        raise InvalidArgumentError(
            f"{what} holds {total / 1e6:.1f} MB, over the limit of {max_bytes / 1e6:.0f} MB; the largest files: "
            f"{largest}. Leave them out with runtime_env excludes or a .gitignore",
            field=_FIELD,
        )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, path in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if os.access(path, os.X_OK) else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes(), compresslevel=1)
    return buf.getvalue()


def _module_files(entry: Any, excludes: list[str]) -> tuple[str, list[tuple[str, Path]]]:
    """(description, files) of one py_modules entry: a package directory, a .py file or a module."""
    if isinstance(entry, types.ModuleType):
        paths = list(getattr(entry, "__path__", []))
        entry = paths[0] if paths else entry.__file__
    path = Path(os.fspath(entry)).expanduser().resolve()
    if path.is_dir():
        return str(path), [(f"{path.name}/{rel}", p) for rel, p in package_files(path, excludes)]
    if path.is_file() and path.suffix == ".py":
        return str(path), [(path.name, path)]
    raise InvalidArgumentError(
        f"runtime_env py_modules entry {os.fspath(entry)!r} is not a package directory, a .py file or a module "
        "(install wheels with 'pip')",
        field=f"{_FIELD}.py_modules",
    )


# --- local modules ---------------------------------------------------------------------
def is_installed_path(path: str) -> bool:
    """True for files of the standard library or site-packages (which the workers have too)."""
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(path.startswith(os.path.join(r, "")) for r in roots) or "site-packages" in Path(path).parts


def is_installed_module(module_name: str) -> bool:
    """True for modules of the standard library or site-packages (importable on workers)."""
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None) or ""
    return module is None or not path or is_installed_path(path)


def pickle_by_value(obj: Any, module_names: Iterable[str | None] = ()) -> bytes:
    """cloudpickle, shipping the code of the caller's own modules (workers and the coordinator cannot import them).

    Args:
        obj: What to pickle.
        module_names: The modules whose code ``obj`` carries; default: ``obj``'s own module.
    """
    import cloudpickle

    names = set(module_names) or {getattr(obj, "__module__", None) or type(obj).__module__}
    own = [sys.modules[n] for n in names if n and n in sys.modules and n != "__main__" and not is_installed_module(n)]
    for module in own:
        cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(obj)
    finally:
        for module in own:
            cloudpickle.unregister_pickle_by_value(module)


def _module_path(name: str) -> str | None:
    """The package directory or file of a top-level module, when it is the caller's own code."""
    top = name.split(".")[0]
    if top in _OWN_PACKAGES or top in sys.builtin_module_names:
        return None
    module = sys.modules.get(top)
    paths = list(getattr(module, "__path__", []))
    where = paths[0] if paths else getattr(module, "__file__", None)
    if not where or is_installed_path(where) or not os.path.exists(where):
        return None
    return where


def _referenced_modules(obj: Any, seen: set[int], out: set[str]) -> None:
    """Modules that ``obj``'s code refers to, following the functions and classes of local modules."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, types.ModuleType):
        out.add(obj.__name__)
        return
    module = getattr(obj, "__module__", None)
    if isinstance(module, str):
        out.add(module)
        if module != "__main__" and _module_path(module) is None:
            return  # installed code: the workers have it, and what it imports
    if isinstance(obj, types.FunctionType):
        names = set()
        stack = [obj.__code__]
        while stack:
            code = stack.pop()
            names.update(code.co_names)
            stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        for name in names:
            if name in obj.__globals__:
                _referenced_modules(obj.__globals__[name], seen, out)
            elif name in sys.modules:
                out.add(name)  # imported inside the function (``import mypkg.model`` names "mypkg.model")
        for cell in obj.__closure__ or ():
            with contextlib.suppress(ValueError):  # an empty cell
                _referenced_modules(cell.cell_contents, seen, out)
        for default in obj.__defaults__ or ():
            _referenced_modules(default, seen, out)
    elif isinstance(obj, type):
        for value in vars(obj).values():
            if isinstance(value, types.FunctionType | staticmethod | classmethod):
                _referenced_modules(getattr(value, "__func__", value), seen, out)
    elif isinstance(obj, dict):
        for value in obj.values():
            _referenced_modules(value, seen, out)
    elif isinstance(obj, list | tuple):
        for value in obj:
            _referenced_modules(value, seen, out)


def local_modules(objs: list[Any]) -> dict[str, str]:
    """Top-level local modules the objects' code uses: name -> package directory or .py file.

    Local means imported from a file outside the standard library and site-packages (the
    caller's own code, which the workers cannot import unless it travels with the run).
    """
    names: set[str] = set()
    for obj in objs:
        _referenced_modules(obj, set(), names)
    # The code objects' own modules travel by value (pickle_by_value): only what they import is shipped.
    by_value = {getattr(obj, "__module__", "") for obj in objs}
    found: dict[str, str] = {}
    for name in sorted(names - by_value):
        top = name.split(".")[0]
        where = _module_path(top)
        if where and top not in found and top != "__main__":
            found[top] = where
    return found


# --- the proto -------------------------------------------------------------------------
def build(
    runtime_env: dict[str, Any] | None, client: Any, code: Iterable[Any], *, verbose: bool = True
) -> common_pb2.RuntimeEnv | None:
    """Packs and uploads what the run needs; returns the RuntimeEnv for its FitRequest (None: nothing travels).

    Args:
        runtime_env: The user's dict (Ray's keys).
        client: A CoordinatorClient (uploads packages it does not have yet).
        code: The objects that are pickled for the workers (the training loop, ...).
        verbose: Say which local modules are shipped on their own.
    """
    env = check(runtime_env)
    excludes = list(env.get("excludes") or [])
    msg = common_pb2.RuntimeEnv()
    covered: list[Path] = []
    if env.get("working_dir") is not None:
        root = Path(os.fspath(env["working_dir"])).expanduser().resolve()
        data = pack(package_files(root, excludes), f"working_dir {str(root)!r}")
        msg.working_dir = client.upload_package(data).sha256
        covered.append(root)
    for entry in env.get("py_modules") or []:
        where, files = _module_files(entry, excludes)
        msg.py_modules.append(client.upload_package(pack(files, f"py_modules entry {where!r}")).sha256)
        covered.append(Path(where) if Path(where).is_dir() else Path(where).parent)
    shipped = []
    for name, where in local_modules(code).items():
        path = Path(where).resolve()
        if any(path == c or c in path.parents for c in covered):
            continue
        try:
            _, files = _module_files(path, excludes)
            data = pack(files, f"local module {name!r}")
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"the training code imports the local module {name!r} ({where}), which the workers do not have, and "
                f"it cannot travel on its own: {exc.message} Set RunConfig(runtime_env={{'py_modules': [...]}}) "
                "or 'working_dir', or install it on the workers",
                field=f"{_FIELD}.py_modules",
            ) from exc
        msg.py_modules.append(client.upload_package(data).sha256)
        shipped.append(name)
    if shipped and verbose:
        print(
            f"trainwire: shipping local module(s) {', '.join(shipped)} with the run "
            "(RunConfig(runtime_env=...) chooses what travels)",
            file=sys.stderr,
        )
    if env.get("pip") is not None:
        msg.pip.extend(pip_lines(env["pip"]))
    for key, value in (env.get("env_vars") or {}).items():
        msg.env_vars[key] = value
    return msg if msg.ByteSize() else None
