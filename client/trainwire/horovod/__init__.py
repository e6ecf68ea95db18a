"""Horovod support (``horovod.torch`` over gloo), as ``ray.train.horovod``.

Training loops call ``hvd.init()``, wrap their optimizer in ``hvd.DistributedOptimizer``
and broadcast the initial state, as under horovodrun; the workers get the rendezvous
and rank variables from the coordinator. Checkpoints are torch checkpoints (``model.pt``).
"""

from trainwire.horovod.checkpoint import HorovodCheckpoint
from trainwire.horovod.predictor import HorovodPredictor
from trainwire.horovod.trainer import HorovodConfig, HorovodTrainer

__all__ = ["HorovodCheckpoint", "HorovodConfig", "HorovodPredictor", "HorovodTrainer"]
