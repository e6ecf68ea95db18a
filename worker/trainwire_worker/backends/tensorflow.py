"""TensorFlow: ``TF_CONFIG`` on every worker, for ``MultiWorkerMirroredStrategy``."""

from __future__ import annotations

from trainwire.tensorflow.framework import FRAMEWORK
from trainwire_worker.backends.data_parallel import DataParallelBackend


class TensorflowBackend(DataParallelBackend):
    """The user's loop; its ``MultiWorkerMirroredStrategy()`` reads the ``TF_CONFIG`` set by the coordinator."""

    name = FRAMEWORK.name
    module = "tensorflow"
    # tf-keras requires the "tensorflow" distribution (not tensorflow-cpu, whose files would clash).
    package = "tensorflow tf-keras"
