"""A run's runtime environment on a worker host: packages unpacked, pip installed, once per node.

Packages come from the shared store (``packages/<sha256>.zip``), are checked again and
unpacked into a node cache keyed by their hash; a ``pip`` list gets a virtualenv per
distinct list, layered over the worker's own packages by a ``.pth`` file, so only what
is missing is installed. Ranks on one host share both; a file lock makes the first build
them and the others wait.

The worker actors are pooled, so ``activated`` undoes what it did: ``sys.path``, the
working directory, the variables, and the modules imported from the environment.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from trainwire_core.errors import TrainwireError
from trainwire_core.packages import extract_package, package_name
from trainwire_core.storage import Store
from trainwire_core.v1 import common_pb2

# Where a host caches unpacked packages and pip environments.
CACHE_DIR_ENV = "TRAINWIRE_WORKER_CACHE_DIR"
_READY = ".trainwire-ready"


class RuntimeEnvSetupError(TrainwireError):
    """A runtime environment could not be made on this host (pip's own output included)."""


@dataclass
class PreparedEnv:
    """What a run's loop runs in: paths first on ``sys.path``, a working directory, variables."""

    paths: list[str] = field(default_factory=list)
    site_dirs: list[str] = field(default_factory=list)
    working_dir: str = ""
    env_vars: dict[str, str] = field(default_factory=dict)


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_DIR_ENV) or Path(tempfile.gettempdir(), "trainwire", "cache"))


@contextlib.contextmanager
def _host_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build_once(dest: Path, build: Callable[[Path], None]) -> Path:
    """Builds ``dest`` on this host unless a complete one is there; concurrent callers wait."""
    if (dest / _READY).exists():
        return dest
    with _host_lock(dest):
        if (dest / _READY).exists():
            return dest
        tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            build(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(dest, ignore_errors=True)
        (tmp / _READY).touch()
        os.replace(tmp, dest)
    return dest


def package_dir(store: Store, sha256: str) -> Path:
    """The unpacked package on this host (downloaded, hash-checked and unpacked the first time)."""

    def build(tmp: Path) -> None:
        data = store.read_bytes(store.path(package_name(sha256)))
        if hashlib.sha256(data).hexdigest() != sha256:
            raise RuntimeEnvSetupError(f"package {sha256} in the store does not match its hash")
        extract_package(io.BytesIO(data), tmp)

    return _build_once(cache_root() / "packages" / sha256, build)


def _site_packages(venv: Path) -> Path:
    return venv / Path(sysconfig.get_path("purelib", vars={"base": str(venv)})).relative_to(venv)


def pip_env(requirements: list[str], on_status: Callable[[str], None]) -> Path:
    """The site-packages of a virtualenv with ``requirements`` installed, over this worker's packages."""
    key = hashlib.sha256("\n".join([sys.version, *requirements]).encode()).hexdigest()[:24]

    def build(venv: Path) -> None:
        on_status(f"installing runtime environment ({len(requirements)} packages)")
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True, text=True
        )
        site_dir = _site_packages(venv)
        # The worker's own packages (pip among them) stay visible, after the ones installed here.
        base = [p for p in site.getsitepackages() if os.path.isdir(p)]
        (site_dir / "_trainwire_worker_packages.pth").write_text(
            "".join(f"import site; site.addsitedir({p!r})\n" for p in base)
        )
        req_file = venv / "requirements.txt"
        req_file.write_text("\n".join(requirements) + "\n")
        proc = subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "-r",
                str(req_file),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            out = (proc.stdout + proc.stderr).strip().splitlines()
            raise RuntimeEnvSetupError(
                "pip could not install the runtime environment:\n" + "\n".join(out[-30:]),
            )

    return _site_packages(_build_once(cache_root() / "pip" / key, build))


def prepare(store: Store, env: common_pb2.RuntimeEnv, on_status: Callable[[str], None]) -> PreparedEnv:
    """Makes the run's environment on this host (cached per node) and says what to activate."""
    prepared = PreparedEnv(env_vars=dict(env.env_vars))
    if env.working_dir:
        prepared.working_dir = str(package_dir(store, env.working_dir))
        prepared.paths.append(prepared.working_dir)
    prepared.paths += [str(package_dir(store, sha)) for sha in env.py_modules]
    if env.pip:
        prepared.site_dirs.append(str(pip_env(list(env.pip), on_status)))
    return prepared


@contextlib.contextmanager
def activated(prepared: PreparedEnv) -> Iterator[None]:
    """Runs the body in the environment, then forgets the modules it brought.

    The caller puts ``sys.path``, the working directory and the variables back
    (``trainwire_worker.actor.process_restored``).
    """
    saved_path = list(sys.path)
    saved_modules = set(sys.modules)
    try:
        for site_dir in prepared.site_dirs:
            site.addsitedir(site_dir)  # runs the .pth files of what pip installed
        added = [p for p in sys.path if p not in saved_path]
        sys.path[:] = (
            prepared.paths + prepared.site_dirs + [p for p in added if p not in prepared.site_dirs] + saved_path
        )
        os.environ.update(prepared.env_vars)
        if prepared.working_dir:
            os.chdir(prepared.working_dir)
        yield
    finally:
        roots = tuple(os.path.join(p, "") for p in prepared.paths + prepared.site_dirs)
        if roots:
            # A later run may bring other versions of these modules: forget this run's.
            for name in set(sys.modules) - saved_modules:
                file = getattr(sys.modules.get(name), "__file__", None) or ""
                if file.startswith(roots):
                    del sys.modules[name]
