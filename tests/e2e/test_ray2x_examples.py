"""Ray Train V2 scripts (compat/ray2x): each runs as a program of its own on the embedded default.

Each script is written against Ray Train V2's API (Ray 2.51+) in the shape of a section of
Ray's current docs; the only lines that name trainwire are its imports, each marked with a
``# trainwire:`` comment saying what Ray's line is. They run as a Ray user runs them:
``python script.py`` with no TRAINWIRE_ADDRESS (trainwire starts its own coordinator) and
no RAY_ADDRESS, from a directory no service uses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

COMPAT = Path(__file__).resolve().parents[2] / "compat" / "ray2x"
EXAMPLES = [
    "async_checkpointing.py",
    "asynchronous_validation.py",
    "fault_tolerance.py",
    "local_mode.py",
    "torch_quick_start.py",
    "user_callback.py",
]


def test_every_script_is_listed_and_changes_only_marked_import_lines():
    assert sorted(p.name for p in COMPAT.glob("*.py")) == EXAMPLES
    for path in COMPAT.glob("*.py"):
        lines = path.read_text().splitlines()
        assert lines[0].startswith("# Ray Train V2 (Ray 2.51+)"), path.name
        named = [line for line in lines[2:] if "trainwire" in line]
        assert named and all("# trainwire:" in line for line in named), path.name
        assert all(line.startswith(("import trainwire", "from trainwire")) for line in named), path.name


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", EXAMPLES)
def test_ray2x_script_runs_with_only_its_imports_changed(script, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINWIRE_", "RAY_ADDRESS"))}
    env["HOME"] = str(tmp_path)  # the embedded coordinator's state file, its own
    proc = subprocess.Popen(
        [sys.executable, str(COMPAT / script)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{script} did not finish in 240 s:\n{out[-4000:]}")
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{out[-6000:]}"
