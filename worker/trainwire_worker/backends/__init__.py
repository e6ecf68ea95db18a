"""Each framework's worker half, found by name."""

from trainwire_worker.backends.base import WorkerBackend, get_backend

__all__ = ["WorkerBackend", "get_backend"]
