"""The distributions depend one way: services -> SDK -> core; the SDK alone brings no server or Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("trainwire_coordinator", "trainwire_worker", "trainwire_predictor")
HEAVY = ("ray", "torch", "tensorflow", "xgboost", "lightgbm", "sklearn", "transformers", "horovod")


def _imported_after(code: str) -> list[str]:
    probe = f"{code}; import sys; print(sorted({{m.split('.')[0] for m in sys.modules}}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return eval(out)  # a list literal printed by the probe


def test_importing_the_sdk_imports_no_service_and_no_framework():
    loaded = set(_imported_after("import trainwire, trainwire.cli, trainwire.xgboost, trainwire.torch"))
    assert not loaded & {*SERVICES, *HEAVY}, loaded & {*SERVICES, *HEAVY}


def test_importing_core_imports_no_other_trainwire_package():
    loaded = set(_imported_after("import trainwire_core.frameworks, trainwire_core.serving, trainwire_core.manifest"))
    assert not loaded & {"trainwire", *SERVICES, *HEAVY}


def test_installing_the_sdk_with_core_brings_no_ray_and_no_server(tmp_path):
    """What pip would install for the SDK alone (resolved with the pinned constraints, nothing installed)."""
    report = tmp_path / "report.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--dry-run",
            "--ignore-installed",
            "--no-build-isolation",
            "--report",
            str(report),
            "-c",
            str(ROOT / "constraints.txt"),
            str(ROOT / "core"),
            str(ROOT / "client"),
        ],
        check=True,
        capture_output=True,
    )
    names = {item["metadata"]["name"].lower().replace("_", "-") for item in json.loads(report.read_text())["install"]}
    assert {"trainwire", "trainwire-core", "grpcio", "pyarrow"} <= names
    servers = {"trainwire-coordinator", "trainwire-worker", "trainwire-predictor", "redis", "prometheus-client"}
    assert not names & servers
    assert not names & {"ray", "torch", "tensorflow", "xgboost", "xgboost-cpu", "lightgbm", "scikit-learn"}


def test_the_cli_lists_the_service_commands_their_distributions_register():
    env = {**os.environ, "COLUMNS": "200"}  # one line per command
    out = subprocess.run(
        [sys.executable, "-m", "trainwire.cli", "--help"], capture_output=True, text=True, check=True, env=env
    ).stdout
    for command, dist in [
        ("coordinator", "trainwire-coordinator"),
        ("predictor", "trainwire-predictor"),
        ("ray-node-health", "trainwire-worker"),
    ]:
        line = next(line for line in out.splitlines() if line.strip().startswith(command + " "))
        assert f"(from {dist})" in line, out


def test_each_distribution_registers_its_half_of_every_framework():
    from importlib.metadata import entry_points

    from trainwire_core import frameworks

    declared = set(frameworks.names())
    assert {ep.name for ep in entry_points(group=frameworks.COORDINATOR_BACKENDS_GROUP)} == declared
    # The worker registers only the frameworks with worker code of their own; the rest run the user's loop.
    assert {ep.name for ep in entry_points(group=frameworks.WORKER_BACKENDS_GROUP)} < declared
