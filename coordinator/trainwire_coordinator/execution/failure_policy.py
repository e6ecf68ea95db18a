"""Whether a failed worker group is restarted: injected into the controller."""

from __future__ import annotations

from trainwire.config import FailureConfig
from trainwire_core.v1 import common_pb2


class FailurePolicy:
    """Ray Train's rule: restart up to ``max_failures`` times (-1: always)."""

    def __init__(self, config: FailureConfig) -> None:
        self.config = config

    def should_restart(self, num_failures: int, error: common_pb2.WorkerError) -> bool:
        if self.config.fail_fast:
            return False
        return self.config.max_failures < 0 or num_failures <= self.config.max_failures
