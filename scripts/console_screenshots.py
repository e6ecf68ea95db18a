"""Refreshes the console's screenshots in the docs (docs/assets/console-run.png, console-runs.png).

Starts a local Ray and a coordinator in this process, fits two small XGBoost models scored by
``valid-logloss`` (as a new user would), starts ``trainwire console`` on loopback, and takes the run
page and the runs list in Debian's chromium with Playwright. Each PNG is cut to a palette so it stays
small (under 200 KB).

    .venv/bin/python scripts/console_screenshots.py [--out docs/assets]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 200_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fit_two_runs(address: str) -> list[str]:
    """Two XGBoost fits of 60 rounds on noisy data: valid-logloss falls, then rises as they overfit."""
    import numpy as np
    import pandas as pd

    from trainwire import CheckpointConfig, RunConfig, ScalingConfig
    from trainwire.client import TERMINAL_STATES, CoordinatorClient
    from trainwire.xgboost import XGBoostTrainer

    rng = np.random.default_rng(7)
    frame = pd.DataFrame(rng.normal(size=(600, 6)), columns=[f"f{i}" for i in range(6)])
    frame["target"] = ((frame.f0 + frame.f1 * frame.f2 + rng.normal(scale=1.2, size=600)) > 0).astype(int)
    client = CoordinatorClient(address)
    ids = []
    for name, eta in (("xgb-depth6", 0.3), ("xgb-depth6-slow", 0.12)):
        trainer = XGBoostTrainer(
            params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "max_depth": 6, "eta": eta},
            label_column="target",
            num_boost_round=60,
            datasets={"train": frame.iloc[:400], "valid": frame.iloc[400:]},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(
                name=name,
                verbose=0,
                checkpoint_config=CheckpointConfig(
                    num_to_keep=3,
                    checkpoint_score_attribute="valid-logloss",
                    checkpoint_score_order="min",
                    checkpoint_frequency=5,
                ),
            ),
        )
        ids.append(client.fit(trainer.build_request(client)).run_id)
    deadline = time.monotonic() + 600
    while any(client.get_run(i).state not in TERMINAL_STATES for i in ids):
        if time.monotonic() > deadline:
            raise SystemExit("the fits did not end within 10 minutes")
        time.sleep(0.5)
    for run_id in ids:
        run = client.get_run(run_id)
        print(f"{run.name}: {run.state_reason or 'ended'}; best {run.best_checkpoints[0].checkpoint_id}")
    client.close()
    return ids


def shrink(path: Path) -> None:
    """Cuts the screenshot to a 128-colour palette (text and lines stay sharp) so it stays small."""
    from PIL import Image

    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    size = path.stat().st_size
    print(f"{path.relative_to(ROOT)}: {size / 1024:.0f} KiB")
    if size > MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes, over {MAX_BYTES}")


def screenshots(url: str, run_id: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        page.goto(f"{url}/runs/{run_id}")
        page.locator("#charts .chart .ckpt.best").wait_for(timeout=60_000)
        page.wait_for_timeout(500)
        page.screenshot(path=str(out / "console-run.png"))
        page.set_viewport_size({"width": 1280, "height": 300})
        page.goto(f"{url}/")
        page.locator("tr[data-run] [data-field=spark] svg").nth(1).wait_for(timeout=60_000)
        page.wait_for_timeout(300)
        page.screenshot(path=str(out / "console-runs.png"))
        browser.close()
    for name in ("console-run.png", "console-runs.png"):
        shrink(out / name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "assets")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import ray

    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    home = Path(tempfile.mkdtemp(prefix="console-shots-"))
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    coordinator = CoordinatorThread(
        CoordinatorSettings(host="127.0.0.1", port=0, store=str(home / "store"), state=str(home / "state.db"))
    )
    coordinator.start()
    console = None
    try:
        address = coordinator.server.address
        ids = fit_two_runs(address)
        port = free_port()
        log = open(home / "console.log", "wb")  # noqa: SIM115
        cmd = [sys.executable, "-m", "trainwire_console", "--address", address, "--port", str(port)]
        console = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        for _ in range(150):
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2):
                    break
            except OSError:
                time.sleep(0.2)
        screenshots(url, ids[0], args.out)
    finally:
        if console is not None:
            os.killpg(console.pid, signal.SIGTERM)
            console.wait(10)
        coordinator.stop()
        ray.shutdown()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
