"""Generation's libraries load with the first generative model, not with the server."""

from __future__ import annotations

import json
import subprocess
import sys

from trainwire_predictor.generative.lazy import LazyModule

HEAVY = ("torch", "transformers", "peft", "llguidance")


def test_importing_the_server_loads_no_generation_library():
    # A fresh interpreter: this test process may already hold torch from other tests.
    code = (
        "import json, sys\n"
        "import trainwire_predictor.server, trainwire_predictor.generative.embeddings\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_a_lazy_module_imports_on_first_use_and_keeps_what_it_read():
    code = (
        "import sys\n"
        "from trainwire_predictor.generative.lazy import LazyModule\n"
        "colorsys = LazyModule('colorsys')\n"
        "assert 'colorsys' not in sys.modules\n"
        "assert colorsys.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)\n"
        "assert 'colorsys' in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "ok"
    lazy = LazyModule("json")
    assert lazy.dumps is json.dumps
    assert vars(lazy)["dumps"] is json.dumps  # later reads skip __getattr__
