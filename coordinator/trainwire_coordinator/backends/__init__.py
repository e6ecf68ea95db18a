"""Each framework's coordinator half, found by name; the controller never branches on a framework."""

from trainwire_coordinator.backends.base import CoordinatorBackend, WorkerGroup, get_backend

__all__ = ["CoordinatorBackend", "WorkerGroup", "get_backend"]
