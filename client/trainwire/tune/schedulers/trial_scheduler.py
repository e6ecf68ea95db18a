"""``ray.tune.schedulers.trial_scheduler``: the base class of the schedulers and FIFO, where Ray defines them."""

from trainwire.tune.schedulers import FIFOScheduler, TrialScheduler

__all__ = ["FIFOScheduler", "TrialScheduler"]
