"""``ray.tune.experiment``: ``Experiment`` (for ``tune.run_experiments``) and ``Trial``, as callbacks see trials.

A trainwire ``Trial`` is the view of a trial that ``tune.Callback`` hooks and
``ResourceChangingScheduler``'s allocation function get: its id, config, status and last result.
"""

from trainwire.tune.callback import Trial
from trainwire.tune.run import Experiment

__all__ = ["Experiment", "Trial"]
