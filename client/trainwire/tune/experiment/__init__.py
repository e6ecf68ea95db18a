"""``ray.tune.experiment``: ``Experiment`` (for ``tune.run_experiments``) and ``Trial``, as callbacks see trials.

A trainwire ``Trial`` is the view of a trial that ``tune.Callback`` hooks and
``ResourceChangingScheduler``'s allocation function get: its id, config, status and last result.
"""

from typing import Any

from trainwire.tune.callback import Trial
from trainwire.tune.run import Experiment, _experiments

__all__ = ["Experiment", "Trial", "_convert_to_experiment_list"]


def _convert_to_experiment_list(experiments: Any) -> list[Experiment]:
    """A list of Experiments from one, a list of them or a dict of specs by name (None: none), as Ray's.

    Raises:
        TuneError: Anything else.
    """
    return [] if experiments is None else _experiments(experiments)
