"""Horovod: the user's loop calls ``hvd.init()`` with the ``HOROVOD_*`` variables the coordinator set."""

from __future__ import annotations

from trainwire.horovod.framework import FRAMEWORK
from trainwire_worker.backends.data_parallel import DataParallelBackend


class HorovodBackend(DataParallelBackend):
    name = FRAMEWORK.name
    module = "horovod"
    package = "horovod"
    # PyPI's sdist does not build against torch 2.x unpatched.
    install = "scripts/build_horovod.sh (run by make setup: Horovod 0.28.1 patched for torch 2.x)"
