"""``tune.get_context()`` / ``TuneContext``, as Ray's: where a trial's code runs (inside a trial only)."""

from __future__ import annotations

from typing import Any

from trainwire.tune.placement_groups import PlacementGroupFactory

__all__ = ["TuneContext", "get_context"]


class TuneContext:
    """The trial a function or class trainable runs as (its run), as ``ray.tune.TuneContext``."""

    def _train(self) -> Any:
        from trainwire import train

        return train.get_context()

    def get_experiment_name(self) -> str:
        """The search's trial run's name (``<search name>_<index>``)."""
        return self._train().get_experiment_name()

    def get_trial_name(self) -> str:
        """The trial's name: its run's."""
        return self._train().get_trial_name()

    def get_trial_id(self) -> str:
        """The trial's id: its run id (as ResultGrid's ``trial_id``)."""
        return self._train().run_id

    def get_trial_resources(self) -> PlacementGroupFactory:
        """The trial's resources, as one bundle (not known in the worker: an empty CPU bundle)."""
        return PlacementGroupFactory([{"CPU": 1}])

    def get_trial_dir(self) -> str:
        """A local directory for the trial's files."""
        return self._train().get_trial_dir()

    def get_metadata(self) -> dict[str, Any]:
        """The trial's metadata (trainwire keeps none in the worker: {})."""
        return {}

    def get_world_size(self) -> int:
        return self._train().get_world_size()

    def get_world_rank(self) -> int:
        return self._train().get_world_rank()

    def get_local_rank(self) -> int:
        return self._train().get_local_rank()

    def get_local_world_size(self) -> int:
        return self._train().get_local_world_size()

    def get_node_rank(self) -> int:
        return self._train().get_node_rank()


def get_context() -> TuneContext:
    """The context of the trial this code runs in."""
    return TuneContext()
