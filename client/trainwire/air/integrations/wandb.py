"""``ray.air.integrations.wandb``: log a run's config, metrics and model to Weights & Biases.

``WandbLoggerCallback`` runs in the program that calls ``fit()``, fed by the run's events.
``WANDB_MODE=offline`` keeps everything in local files (``WANDB_DIR``) to sync later.
"""

from __future__ import annotations

import os
import threading
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
        upload_timeout: Seconds to wait, at the run's end, for W&B to finish its uploads (Ray's);
            past it the run's ``finish`` goes on in the background and ``fit()`` returns.
        video_kwargs: Passed to ``wandb.Video`` for a reported array of videos (5 dims, as Ray's).
        image_kwargs: Passed to ``wandb.Image`` for a reported image (3 dims) or images (4 dims).
        **kwargs: Passed to ``wandb.init`` (``entity``, ``tags``, ``mode``, ``dir``...).

    Reported arrays reach this process as nested lists (a report's metrics cross the service as
    JSON); one of 3, 4 or 5 dimensions is logged as Ray logs it, an image or a video.
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
        upload_timeout: int = 1800,
        video_kwargs: dict[str, Any] | None = None,
        image_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.project = project
        self.group = group
        self.api_key_file = api_key_file
        self.api_key = api_key
        self.excludes = set(excludes or [])
        self.log_config = log_config
        self.upload_checkpoints = upload_checkpoints or save_checkpoints
        self.upload_timeout = upload_timeout
        self.video_kwargs = dict(video_kwargs or {})
        self.image_kwargs = dict(image_kwargs or {})
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
        values.update(self._media(metrics))
        if self.log_config:
            values.update({f"config/{k}": v for k, v in _tracking.numeric_metrics(self._config).items()})
        self.wandb_run.log(values, step=_tracking.step_of(metrics, self._reports))

    def _media(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """Reported arrays of 3, 4 or 5 dimensions as W&B images and videos, as Ray's callback logs them."""
        import numpy as np
        import wandb

        from trainwire_core.structs import flatten_metrics

        out: dict[str, Any] = {}
        for key, value in flatten_metrics(dict(metrics)).items():
            if key in self.excludes or not isinstance(value, list):
                continue
            try:
                array = np.asarray(value, dtype=float)
            except (TypeError, ValueError):
                continue  # ragged or not numbers
            if array.ndim == 3:
                out[key] = wandb.Image(array, **self.image_kwargs)
            elif array.ndim == 4:
                images = [wandb.Image(a, **self.image_kwargs) for a in array]
                out[key] = images if len(images) > 1 else images[0]
            elif array.ndim == 5:
                videos = [wandb.Video(a, **self.video_kwargs) for a in array]
                out[key] = videos if len(videos) > 1 else videos[0]
        return out

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
            wandb_run, self.wandb_run = self.wandb_run, None
            exit_code = 0 if result.state == "SUCCEEDED" else 1
            # Uploads end within upload_timeout, as Ray's logging actor is joined; then fit() goes on.
            done = threading.Thread(target=wandb_run.finish, kwargs={"exit_code": exit_code}, daemon=True)
            done.start()
            done.join(self.upload_timeout)


def setup_wandb(
    config: dict[str, Any] | None = None,
    api_key: str | None = None,
    api_key_file: str | None = None,
    rank_zero_only: bool = True,
    **kwargs: Any,
) -> Any:
    """Starts a W&B run inside a training loop, as Ray's ``setup_wandb``.

    On a worker the run's id, name and group default to the trainwire run's (``trial_id``,
    ``trial_name``, ``group`` kwargs override them); with ``rank_zero_only`` every rank but 0 gets a
    disabled run, so each value is logged once. Outside a run, W&B's own defaults apply.

    Args:
        config: Logged as the W&B run's config.
        api_key: The API key (else W&B's own login or ``WANDB_API_KEY``).
        api_key_file: A file holding the API key.
        rank_zero_only: Start a real run on rank 0 only.
        **kwargs: Passed to ``wandb.init``; they win over the defaults.

    Returns:
        The ``wandb`` run (a disabled one on other ranks with ``rank_zero_only``).
    """
    import wandb

    from trainwire.train.session import get_session_or_none

    session = get_session_or_none()
    context = session.context if session is not None else None
    if rank_zero_only and context is not None and context.world_rank != 0:
        return wandb.init(mode="disabled", reinit="create_new")
    if api_key_file:
        with open(os.path.expanduser(api_key_file)) as f:
            api_key = f.read().strip()
    if api_key:
        os.environ["WANDB_API_KEY"] = api_key
    trial_id = kwargs.pop("trial_id", None) or (context.run_id if context is not None else None)
    trial_name = kwargs.pop("trial_name", None) or (context.run_name if context is not None else None)
    options: dict[str, Any] = {
        "id": trial_id,
        "name": trial_name,
        "resume": "allow",  # a restarted attempt carries on the same W&B run
        "reinit": "create_new",
        "allow_val_change": True,
        "config": dict(config or {}),
        "project": kwargs.pop("project", None) or os.environ.get("WANDB_PROJECT"),
        "group": kwargs.pop("group", None) or os.environ.get("WANDB_RUN_GROUP") or trial_name,
    }
    options.update(kwargs)
    return wandb.init(**options)
