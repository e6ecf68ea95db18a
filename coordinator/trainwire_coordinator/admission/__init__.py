"""Letting a run in: the checks a Fit passes (scopes, code policy, paths, runtime environments,
datasets, capacity), and what it uploads (runtime environments, datasets, checkpoints)."""
