"""How many of trainwire's files a Fit passes through, from ``trainer.fit()`` to its ``Result``.

Every process of the fit (the SDK, an in-process coordinator, the Ray workers, their task
threads included) records the source files of trainwire's packages whose functions run while
the fit runs (module and class bodies, i.e. imports, do not count; nor does the coordinator's
start-up), and each call that enters a file already on its thread's stack below another of
the tree's files (A calls B, which calls back into A): a re-entered file. Run it on two
checkouts to compare them:

    python bench/fit_walk.py                          # this checkout
    python bench/fit_walk.py --tree OTHER_CHECKOUT    # another one (its packages first on the path)

Prints one JSON line: the files, by package, their number, and the calls that re-enter a file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "client", "coordinator", "worker", "predictor")

# Installed in every process of the fit through PYTHONPATH: records the files of the tree whose
# functions run, appending each new one at once (worker actors are killed, not exited).
SITECUSTOMIZE = textwrap.dedent(
    """
    import os, sys, threading

    _root = os.environ.get("TRAINWIRE_WALK_ROOT")
    _out = os.environ.get("TRAINWIRE_WALK_OUT")
    # The driver turns recording on when fit() starts; the workers start during the fit.
    active = True
    if _root and _out:
        _seen = set()
        _loops = set()
        _path = os.path.join(_out, f"{os.getpid()}.txt")
        _hooked = False
        # The tree's packages (not its virtualenv): where the walk's files are.
        _packages = tuple(os.path.join(_root, p) + os.sep for p in os.environ["TRAINWIRE_WALK_PACKAGES"].split(","))
        _tasks = os.environ.get("TRAINWIRE_WALK_TASKS") == "1"
        _COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})

        def _hook_ray_tasks():
            # A threaded actor's tasks run on threads Ray's C++ core starts, which neither
            # sys.setprofile nor threading.setprofile reaches: each task turns recording on
            # for its own thread before it runs.
            manager = sys.modules["ray._private.function_manager"].FunctionActorManager
            original = manager.get_execution_info

            def get_execution_info(self, *args, **kwargs):
                if sys.getprofile() is None:
                    sys.setprofile(_profile)
                return original(self, *args, **kwargs)

            manager.get_execution_info = get_execution_info

        def _profile(frame, event, arg):
            global _hooked
            if event != "call" or not active:
                return
            # Once Ray's module has finished loading (it may be half-way through its import here).
            manager = _tasks and not _hooked and sys.modules.get("ray._private.function_manager")
            if manager and hasattr(manager, "FunctionActorManager"):
                _hooked = True
                _hook_ray_tasks()
            code = frame.f_code
            name = code.co_filename
            # Functions only (CO_OPTIMIZED): module and class bodies run on import.
            if not code.co_flags & 1 or not name.startswith(_packages):
                return
            # A comprehension a module or class body runs is part of that body (Python 3.12 inlines
            # it; 3.11 runs it as a function of its own): it runs on import too.
            if code.co_name in _COMPREHENSIONS and frame.f_back is not None and not frame.f_back.f_code.co_flags & 1:
                return
            lines = []
            if name not in _seen:
                _seen.add(name)
                lines.append(name)
            caller = frame.f_back.f_code.co_filename if frame.f_back else ""
            if caller != name:
                # A call into one of the tree's files from elsewhere: is that file already on this
                # thread's stack, below another of the tree's files? Then it is re-entered.
                chain, up = [], frame.f_back
                while up is not None:
                    file = up.f_code.co_filename
                    if file.startswith(_packages) and (not chain or chain[-1] != file):
                        chain.append(file)
                    up = up.f_back
                # (A file calling itself through a library, e.g. a dataclass's __post_init__, is one room.)
                if name in chain[1:]:
                    loop = " > ".join(reversed(chain[: chain.index(name, 1) + 1])) + " > " + name
                    if loop not in _loops:
                        _loops.add(loop)
                        lines.append("loop " + loop)
            if lines:
                with open(_path, "a") as f:
                    f.write("\\n".join(lines) + "\\n")

        sys.setprofile(_profile)
        threading.setprofile(_profile)
    """
)

FIT = textwrap.dedent(
    """
    import sys, tempfile
    import trainwire
    from trainwire import Checkpoint, RunConfig, ScalingConfig, train
    from trainwire.torch import TorchTrainer
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    def loop(config):
        import os, tempfile
        for epoch in range(2):
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "model.txt"), "w") as f:
                    f.write(str(epoch))
                train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(d))

    import sitecustomize

    sitecustomize.active = False  # the coordinator's start-up is not the fit's
    home = sys.argv[1]
    thread = CoordinatorThread(
        CoordinatorSettings(port=0, store=f"{home}/store", state=f"{home}/state.db", ray_num_cpus=2)
    )
    trainwire.init(thread.start())
    sitecustomize.active = True
    result = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(name="walk", verbose=0)).fit()
    sitecustomize.active = False
    assert result.checkpoint is not None
    trainwire.shutdown()
    thread.stop()
    """
)


def walk(tree: Path, tasks: bool = True) -> tuple[dict[str, list[str]], list[str]]:
    """The tree's files a fit runs functions of (by package), and the calls that re-enter a file."""
    with tempfile.TemporaryDirectory() as tmp:
        hooks, out, home = Path(tmp, "hooks"), Path(tmp, "out"), Path(tmp, "home")
        for d in (hooks, out, home):
            d.mkdir()
        (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
        paths = [str(tree / p) for p in PACKAGES if (tree / p).is_dir()] + [str(hooks)]
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(paths),
            TRAINWIRE_WALK_ROOT=str(tree),
            TRAINWIRE_WALK_OUT=str(out),
            TRAINWIRE_WALK_PACKAGES=",".join(PACKAGES),
            TRAINWIRE_WALK_TASKS="1" if tasks else "0",
            RAY_AUTH_MODE="disabled",
        )
        env.pop("RAY_ADDRESS", None)
        subprocess.run([sys.executable, "-c", FIT, str(home)], env=env, check=True, timeout=600, cwd=tmp)
        lines = {line for f in out.iterdir() for line in f.read_text().splitlines()}

    def ours(name: str) -> str | None:
        rel = Path(name).relative_to(tree)
        return str(rel) if rel.parts[0] in PACKAGES and "_pb2" not in rel.name else None

    by_package: dict[str, list[str]] = {}
    loops = set()
    for line in sorted(lines):
        if line.startswith("loop "):
            loops.add(" > ".join(str(Path(f).relative_to(tree)) for f in line[len("loop ") :].split(" > ")))
        elif rel := ours(line):
            by_package.setdefault(rel.split("/", 1)[0], []).append(rel)
    return by_package, sorted(loops)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(REPO), help="the checkout to measure (default: this one)")
    parser.add_argument(
        "--driver-threads-only",
        action="store_true",
        help="leave out the worker actors' task threads (how the walk was counted before they were recorded)",
    )
    args = parser.parse_args()
    by_package, loops = walk(Path(args.tree).resolve(), tasks=not args.driver_threads_only)
    counts = {package: len(files) for package, files in by_package.items()}
    print(json.dumps({"files": sum(counts.values()), "by_package": counts, "list": by_package, "reentered": loops}))


if __name__ == "__main__":
    main()
