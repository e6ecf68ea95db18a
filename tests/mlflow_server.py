"""A real ``mlflow server`` for the tracker tests: its own process group, sqlite backend, local artifacts."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

START_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mlflow_binary() -> str:
    # The mlflow next to this interpreter (the project's virtualenv), else whichever is on PATH.
    beside = pathlib.Path(sys.executable).with_name("mlflow")
    return str(beside) if beside.exists() else "mlflow"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def mlflow_server(workdir: pathlib.Path) -> Iterator[str]:
    """Runs ``mlflow server`` on a free loopback port until the block ends; yields its ``http://`` URI."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / "mlflow-server.log"
    command = [
        _mlflow_binary(),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        f"sqlite:///{workdir / 'mlflow.db'}",
        "--artifacts-destination",
        str(workdir / "artifacts"),
        "--workers",
        "1",
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url):
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}")
            if time.monotonic() > deadline:
                log_text = log_path.read_text(errors="replace")
                pytest.fail(f"mlflow server did not answer /health within {START_TIMEOUT_S:.0f}s:\n{log_text}")
            time.sleep(0.25)
        yield url
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """Ends the server and the workers it forked (its whole process group)."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    # The group may outlive its leader for a moment (uvicorn workers): finish them too.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real MLflow tracking server for the module's tests."""
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as url:
        yield url
