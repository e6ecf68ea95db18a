"""The embedded coordinator's process: ``trainwire.init()``'s local Ray, started with ``ray.init``'s keywords.

``python -m trainwire.embedded <coordinator arguments>`` starts Ray in this process with the
keywords ``init()`` passed (``RAY_OPTIONS_ENV``), then runs ``trainwire coordinator`` on it. The
coordinator stops that Ray when it stops, its parent's death included, as when it starts Ray itself.
"""

from __future__ import annotations

import base64
import os
import sys
from typing import Any

# The environment variable that carries init()'s ray.init keywords to this process (cloudpickled:
# some, such as _tracing_startup_hook, are not JSON).
RAY_OPTIONS_ENV = "TRAINWIRE_EMBEDDED_RAY_INIT"


def encode_options(options: dict[str, Any]) -> str:
    """``ray.init`` keywords as ``RAY_OPTIONS_ENV``'s value."""
    import cloudpickle

    return base64.b64encode(cloudpickle.dumps(options)).decode("ascii")


def decode_options(value: str) -> dict[str, Any]:
    """The ``ray.init`` keywords ``encode_options`` encoded."""
    import cloudpickle

    return cloudpickle.loads(base64.b64decode(value))


def main(argv: list[str] | None = None) -> int:
    """Starts Ray with the keywords in ``RAY_OPTIONS_ENV`` (when set), then the coordinator."""
    from trainwire.cli import main as cli_main

    encoded = os.environ.pop(RAY_OPTIONS_ENV, "")  # not for the workers' environments
    if encoded:
        import ray

        # What the coordinator's own start would give, unless the program asked otherwise.
        options = {"include_dashboard": False, "log_to_driver": True, **decode_options(encoded)}
        options.setdefault("address", os.environ.get("TRAINWIRE_COORDINATOR_RAY_ADDRESS") or None)
        ray.init(**options)  # the coordinator finds Ray initialised and uses this one
    return cli_main(["coordinator", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
