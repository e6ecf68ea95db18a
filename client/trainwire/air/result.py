"""``ray.air.result``: ``Result``, what ``Trainer.fit()`` returns."""

from trainwire.result import Result

__all__ = ["Result"]
