"""Installs the examples runner's hooks in every Python process of a run (see ray_examples_hooks)."""

import os

if os.environ.get("TRAINWIRE_RAY_EXAMPLES_DATA"):
    import ray_examples_hooks

    ray_examples_hooks.install()
