"""How many of trainwire's files a Fit passes through, from ``trainer.fit()`` to its ``Result``.

Every process of the fit (the SDK, an in-process coordinator, the Ray workers) records the
source files of trainwire's packages whose functions run while the fit runs (module and class
bodies, i.e. imports, do not count; nor does the coordinator's start-up). Run it on two checkouts to compare them:

    python bench/fit_walk.py                          # this checkout
    python bench/fit_walk.py --tree OTHER_CHECKOUT    # another one (its packages first on the path)

Prints one JSON line: the files, by package, and their number.
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
        _path = os.path.join(_out, f"{os.getpid()}.txt")

        def _profile(frame, event, arg):
            if event != "call" or not active:
                return
            code = frame.f_code
            name = code.co_filename
            # Functions only (CO_OPTIMIZED): module and class bodies run on import.
            if name in _seen or not code.co_flags & 1 or not name.startswith(_root):
                return
            _seen.add(name)
            with open(_path, "a") as f:
                f.write(name + "\\n")

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


def walk(tree: Path) -> dict[str, list[str]]:
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
            RAY_AUTH_MODE="disabled",
        )
        env.pop("RAY_ADDRESS", None)
        subprocess.run([sys.executable, "-c", FIT, str(home)], env=env, check=True, timeout=600, cwd=tmp)
        files = {line for f in out.iterdir() for line in f.read_text().splitlines()}
    by_package: dict[str, list[str]] = {}
    for name in sorted(files):
        rel = Path(name).relative_to(tree)
        if rel.parts[0] in PACKAGES and "_pb2" not in rel.name:
            by_package.setdefault(rel.parts[0], []).append(str(rel))
    return by_package


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(REPO), help="the checkout to measure (default: this one)")
    args = parser.parse_args()
    by_package = walk(Path(args.tree).resolve())
    counts = {package: len(files) for package, files in by_package.items()}
    print(json.dumps({"files": sum(counts.values()), "by_package": counts, "list": by_package}))


if __name__ == "__main__":
    main()
