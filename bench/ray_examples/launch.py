"""Runs one Ray script with its imports rewritten to trainwire: ``python launch.py SCRIPT [ARGS...]``.

The script runs as ``__main__`` with its own ``sys.argv``, as ``python SCRIPT`` would run it, its
directory on ``sys.path`` as in the Ray run (last: see ``ray_examples_hooks.install``); its code
is compiled from the rewritten syntax tree under its own file name, so tracebacks show Ray's lines.
"""

from __future__ import annotations

import os
import sys
import types

import ray_examples_hooks


def main() -> None:
    """Run the script named by ``sys.argv[1]`` with the remaining arguments."""
    script = os.path.abspath(sys.argv[1])
    sys.argv = [script, *sys.argv[2:]]
    if os.path.dirname(script) not in sys.path:  # run without the runner's environment
        sys.path.append(os.path.dirname(script))
    with open(script, "rb") as f:
        code = ray_examples_hooks.compile_rewritten(f.read(), script)
    module = types.ModuleType("__main__")
    module.__file__ = script
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    exec(code, module.__dict__)  # noqa: S102 - running the user's script is the point


if __name__ == "__main__":
    main()
