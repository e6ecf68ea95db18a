"""``ray.air.checkpoint``: ``Checkpoint`` (``from_dict``/``to_dict``, ``from_directory``, ``from_uri``...)."""

from trainwire.checkpoint import Checkpoint

__all__ = ["Checkpoint"]
