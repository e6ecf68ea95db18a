"""Helpers of the console tests."""

from __future__ import annotations

import time
from typing import Any

from trainwire.client import TERMINAL_STATES

ADMIN_TOKEN, READER_TOKEN = "console-ops-token", "console-reader-token"
TOKENS = {
    "ops": {"token": ADMIN_TOKEN, "scopes": ["admin"]},
    "reader": {"token": READER_TOKEN, "scopes": ["read"]},
}


def wait_ended(client: Any, run_id: str, timeout_s: float = 60.0) -> Any:
    """The run once it has ended (SUCCEEDED, FAILED or CANCELLED)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = client.get_run(run_id)
        if run.state in TERMINAL_STATES:
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not end within {timeout_s}s")
