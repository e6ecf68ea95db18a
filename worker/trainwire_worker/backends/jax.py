"""JAX: the user's loop, in the ``jax.distributed`` group the coordinator's half initialised."""

from __future__ import annotations

from trainwire.jax.framework import FRAMEWORK
from trainwire_worker.backends.data_parallel import DataParallelBackend


class JaxBackend(DataParallelBackend):
    name = FRAMEWORK.name
    module = "jax"
    package = "jax"
    install = "pip install jax (GPU workers: pip install 'jax[cuda12]')"
