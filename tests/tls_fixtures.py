"""A deployment's certificates made as an operator makes them, for the TLS tests of every service."""

from __future__ import annotations

import subprocess
import sys


class PKI:
    """A deployment's CA, server certificate (compose names and loopback) and client certificate."""

    def __init__(self, directory) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "trainwire.cli", "tls", "init", str(directory)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        self.ca = str(directory / "ca.pem")
        self.server = (str(directory / "server.pem"), str(directory / "server-key.pem"))
        self.client = (str(directory / "client.pem"), str(directory / "client-key.pem"))
