"""A multi-file project as users write them: a package beside train.py, a data file, a pip requirement.

Written into a directory no trainwire service starts in, then run as ``python train.py`` there.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

TRAIN = """
import os, sys, time
import trainwire
from trainwire import RunConfig, ScalingConfig, train
from trainwire.torch import TorchTrainer
from mypkg.model import make_config

PROJECT = os.path.dirname(os.path.abspath(__file__))


def loop(config):
    import twtiny
    with open("data/labels.txt") as f:
        labels = f.read().split(",")
    cfg = make_config()
    print(f"rank {train.get_context().get_world_rank()} read {len(labels)} labels", flush=True)
    train.report({
        "labels": len(labels), "width": cfg["width"], "tiny": twtiny.VALUE, "mode": os.environ.get("MODE", ""),
        "project_on_path": PROJECT in sys.path, "cwd_is_project": os.getcwd() == PROJECT,
    })


env = {RUNTIME_ENV}
started = time.monotonic()
result = TorchTrainer(
    loop,
    scaling_config=ScalingConfig(num_workers=2),
    run_config=RunConfig(name="{NAME}", verbose=0, runtime_env=env),
).fit()
print("METRICS", result.metrics, time.monotonic() - started, flush=True)
"""


def write(root: Path, name: str, env: str) -> None:
    """Writes the project; ``env`` is the runtime_env as Python source (e.g. ``'{"working_dir": "."}'``)."""
    files = {
        "mypkg/__init__.py": "",
        "mypkg/model.py": "def make_config():\n    return {'width': 8}\n",
        "data/labels.txt": "cat,dog,bird",
        "train.py": textwrap.dedent(TRAIN).replace("{RUNTIME_ENV}", env).replace("{NAME}", name),
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def build_wheel(out: Path) -> Path:
    """A package the workers' environment does not have (``twtiny``), as a local wheel."""
    src = out / "twtiny-src"
    (src / "twtiny").mkdir(parents=True)
    (src / "twtiny" / "__init__.py").write_text("VALUE = 7\n")
    (src / "pyproject.toml").write_text(
        '[project]\nname = "twtiny"\nversion = "0.1"\n'
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        check=True,
    )
    return next(out.glob("twtiny-*.whl"))
