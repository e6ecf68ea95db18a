"""Running a run: the controller and its states, placement, the worker pool, checkpoints, datasets.

As Ray Train V2's ``_internal/execution``: the controller drives one run's lifecycle as an
explicit state machine under injected policies; everything here takes what admission decided.
"""
