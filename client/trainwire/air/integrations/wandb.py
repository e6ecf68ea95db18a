"""``ray.air.integrations.wandb``: log a run's config, metrics and model to Weights & Biases.

``WandbLoggerCallback`` runs in the program that calls ``fit()``, fed by the run's events.
``WANDB_MODE=offline`` keeps everything in local files (``WANDB_DIR``) to sync later.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from trainwire.air.integrations import _tracking
from trainwire.callbacks import RunCallback

if TYPE_CHECKING:
    from trainwire.result import Result
    from trainwire_core.v1 import coordinator_pb2


class WandbLoggerCallback(RunCallback):
    """Logs each run to W&B, as Ray's ``WandbLoggerCallback``.

    Args:
        project: The W&B project (default: ``WANDB_PROJECT``).
        group: The W&B group (default: ``WANDB_RUN_GROUP``).
        api_key_file: A file holding the API key.
        api_key: The API key (else W&B's own login or ``WANDB_API_KEY``).
        excludes: Metric names not to log.
        log_config: Also log the config as each step's ``config/...`` values (it is always the run's config).
        upload_checkpoints: Log the run's best (else latest) checkpoint as a ``model`` artifact.
        save_checkpoints: Same as ``upload_checkpoints`` (Ray's older name).
        **kwargs: Passed to ``wandb.init`` (``entity``, ``tags``, ``mode``, ``dir``...).
    """

    def __init__(
        self,
        project: str | None = None,
        group: str | None = None,
        api_key_file: str | None = None,
        api_key: str | None = None,
        excludes: list[str] | None = None,
        log_config: bool = False,
        upload_checkpoints: bool = False,
        save_checkpoints: bool = False,
        **kwargs: Any,
    ) -> None:
        self.project = project
        self.group = group
        self.api_key_file = api_key_file
        self.api_key = api_key
        self.excludes = set(excludes or [])
        self.log_config = log_config
        self.upload_checkpoints = upload_checkpoints or save_checkpoints
        self.kwargs = kwargs
        self.wandb_run: Any = None
        self._config: dict[str, Any] = {}
        self._reports = 0

    def on_run_start(self, run: coordinator_pb2.RunInfo, config: dict[str, Any]) -> None:
        import wandb

        key = self.api_key
        if key is None and self.api_key_file:
            with open(os.path.expanduser(self.api_key_file)) as f:
                key = f.read().strip()
        if key:
            os.environ["WANDB_API_KEY"] = key
        self._config, self._reports = dict(config), 0
        # One dict, so kwargs may name any of wandb.init's arguments (project, config...) without a clash.
        options = {
            "project": self.project or os.environ.get("WANDB_PROJECT"),
            "group": self.group or os.environ.get("WANDB_RUN_GROUP"),
            "name": run.name,
            "id": run.run_id,
            "reinit": "create_new",
            **self.kwargs,
        }
        options["config"] = {**self._config, **(options.get("config") or {}), "trainwire_run_id": run.run_id}
        self.wandb_run = wandb.init(**options)

    def on_metrics(self, run: coordinator_pb2.RunInfo, metrics: dict[str, Any]) -> None:
        if self.wandb_run is None:
            return
        self._reports += 1
        values = {k: v for k, v in _tracking.numeric_metrics(metrics).items() if k not in self.excludes}
        if self.log_config:
            values.update({f"config/{k}": v for k, v in _tracking.numeric_metrics(self._config).items()})
        self.wandb_run.log(values, step=_tracking.step_of(metrics, self._reports))

    def on_run_end(self, run: coordinator_pb2.RunInfo, result: Result) -> None:
        if self.wandb_run is None:
            return
        import wandb

        try:
            checkpoint = _tracking.model_checkpoint(result) if self.upload_checkpoints else None
            if checkpoint is not None:
                artifact = wandb.Artifact(f"checkpoint_{run.run_id}", type="model")
                with checkpoint.as_directory() as directory:
                    artifact.add_dir(directory)
                    self.wandb_run.log_artifact(artifact)
        finally:
            self.wandb_run.finish(exit_code=0 if result.state == "SUCCEEDED" else 1)
            self.wandb_run = None
