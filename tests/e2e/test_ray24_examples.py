"""Ray 2.4's own examples, ported (compat/ray24): each runs as a program of its own on the embedded default.

Each port changed only imports, internet data (local data of the same shape), sizes, and
the lines the installed Ray Data needs; every such line says so in a ``# trainwire:``
comment. The scripts run as a Ray user runs them: ``python script.py``, with no
TRAINWIRE_ADDRESS (so trainwire starts its own coordinator) and no RAY_ADDRESS.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

COMPAT = Path(__file__).resolve().parents[2] / "compat" / "ray24"
# script -> command-line arguments (the smoke-test flags the examples have, or smaller sizes)
EXAMPLES = {
    "torch_quick_start.py": [],
    "torch_linear_example.py": ["--smoke-test"],
    "torch_regression_example.py": ["--smoke-test"],
    "torch_fashion_mnist_example.py": ["--smoke-test"],
    "torch_trainer_docstring.py": [],
    "tensorflow_quick_start.py": [],
    "tensorflow_regression_example.py": ["--smoke-test"],
    "tensorflow_mnist_example.py": ["--smoke-test"],
    "tensorflow_trainer_docstring.py": [],
    "horovod_example.py": ["--num-workers", "2", "--num-epochs", "2"],
    "xgboost_trainer_docstring.py": [],
    "lightgbm_trainer_docstring.py": [],
    "sklearn_trainer_docstring.py": [],
    "checkpoint_docstring.py": [],
    "batch_predictor_predict_docstring.py": [],
    "batch_predictor_pipelined_docstring.py": [],
    "rl_trainer_docstring.py": [],
    "huggingface_trainer_docstring.py": [],
}


def test_every_port_is_listed_and_says_where_it_came_from():
    assert sorted(p.name for p in COMPAT.glob("*.py")) == sorted(EXAMPLES)
    for path in COMPAT.glob("*.py"):
        lines = path.read_text().splitlines()
        assert lines[0].startswith("# Ported from ") and "Ray 2.4.0" in lines[0], path.name
        # Every line that names trainwire is a marked change.
        unmarked = [line for line in lines[2:] if "trainwire" in line and "# trainwire:" not in line]
        assert not unmarked, (path.name, unmarked)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_ray24_example_runs_unchanged_but_for_its_marked_lines(script, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINWIRE_", "RAY_ADDRESS"))}
    env["HOME"] = str(tmp_path)  # the embedded coordinator's state file, its own
    env["HF_HUB_OFFLINE"] = "1"  # the HuggingFace port's tokenizer ships in a package; nothing from a hub
    proc = subprocess.Popen(
        [sys.executable, str(COMPAT / script), *EXAMPLES[script]],
        cwd=tmp_path,  # no service starts here
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=480)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{script} did not finish in 480 s:\n{out[-4000:]}")
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{out[-6000:]}"
