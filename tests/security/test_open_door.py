"""No open door by default: a service bound beyond loopback without a token refuses to start."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys

import pytest

from trainwire_core.serving import OpenDoorError, check_door, is_loopback


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.5", True), ("localhost", True), ("::1", True), ("[::1]", True)]
    + [("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("coordinator", False)],
)
def test_only_loopback_addresses_count_as_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_a_token_or_loopback_opens_no_door():
    check_door("the coordinator", "0.0.0.0", "s3cret", False, "TOKEN_VAR")
    check_door("the coordinator", "127.0.0.1", "", False, "TOKEN_VAR")


def test_no_token_beyond_loopback_is_refused_saying_how_to_set_one():
    with pytest.raises(OpenDoorError) as info:
        check_door("the predictor", "0.0.0.0", "", False, "TRAINWIRE_PREDICTOR_AUTH_TOKEN")
    message = str(info.value)
    assert "0.0.0.0" in message and "TRAINWIRE_PREDICTOR_AUTH_TOKEN" in message
    assert "--allow-unauthenticated" in message


def test_allowing_it_explicitly_is_logged_as_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="trainwire_core.serving"):
        check_door("the coordinator", "0.0.0.0", "", True, "TOKEN_VAR")
    assert any(r.levelno == logging.WARNING and "no token" in r.getMessage() for r in caplog.records)


def test_the_coordinator_refuses_before_it_starts_anything(tmp_path):
    from trainwire_coordinator.server import CoordinatorServer
    from trainwire_coordinator.settings import CoordinatorSettings

    settings = CoordinatorSettings(host="0.0.0.0", port=0, store=str(tmp_path / "store"), state=str(tmp_path / "db"))
    with pytest.raises(OpenDoorError, match="TRAINWIRE_COORDINATOR_AUTH_TOKEN"):
        asyncio.run(CoordinatorServer(settings).start())
    assert not (tmp_path / "db").exists()  # refused before it opened its metadata store


def test_the_predictor_refuses_before_it_starts_anything(tmp_path):
    from trainwire_predictor.server import PredictorServer
    from trainwire_predictor.settings import PredictorSettings

    settings = PredictorSettings(host="0.0.0.0", port=0, store=str(tmp_path / "store"))
    with pytest.raises(OpenDoorError, match="TRAINWIRE_PREDICTOR_AUTH_TOKEN"):
        asyncio.run(PredictorServer(settings).start())


@pytest.mark.parametrize("command", ["coordinator", "predictor"])
def test_the_command_exits_with_the_reason(tmp_path, command):
    done = subprocess.run(
        [sys.executable, "-m", "trainwire.cli", command, "--host", "0.0.0.0", "--port", "0", "--store", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "refuses to listen on 0.0.0.0 without a token" in done.stderr
    assert "listening on" not in done.stdout
