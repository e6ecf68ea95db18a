"""``XGBoostConfig``, as ``ray.train.xgboost.XGBoostConfig``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trainwire_core.errors import InvalidArgumentError


@dataclass
class XGBoostConfig:
    """How the workers of an ``XGBoostTrainer`` with a training function communicate.

    Every worker runs the function inside XGBoost's collective (``CommunicatorContext``), with
    rank 0 running its tracker: an ``xgboost.train`` call there trains data-parallel, each
    worker on its shard, histograms and evaluation metrics reduced across the workers.

    Args:
        xgboost_communicator: The collective's backend; only "rabit" (as in Ray).
    """

    xgboost_communicator: str = "rabit"

    def __post_init__(self) -> None:
        if self.xgboost_communicator != "rabit":
            raise InvalidArgumentError(
                f'xgboost_communicator must be "rabit", got {self.xgboost_communicator!r}',
                field="xgboost_config.xgboost_communicator",
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
