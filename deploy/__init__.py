"""Deployment tooling: the compose twin (``python -m deploy.twin``)."""
