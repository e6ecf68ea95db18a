"""Framework backends, looked up by name; the controller never branches on a framework."""

from trainwire_worker.backends.base import Backend, get_backend

__all__ = ["Backend", "get_backend"]
