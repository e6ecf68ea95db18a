"""Hyperparameter searches run by the coordinator (Ray Tune's Tuner as a service)."""
