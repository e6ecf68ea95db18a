"""``trainwire runs plot`` and ``Result.plot``: a PNG of the right size whose curves are drawn."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from console_helpers import ADMIN_TOKEN, wait_ended

pytestmark = pytest.mark.timeout(120)


def curve_loop(config):
    from trainwire import train

    for i in range(config["n"]):
        train.report({"loss": 1.0 / (i + 1) * config["scale"], "accuracy": i / config["n"]})


def _read_png(path) -> np.ndarray:
    import matplotlib.image

    return matplotlib.image.imread(str(path))


def _drawn_colours(image: np.ndarray) -> set[tuple]:
    """The saturated colours in an image (matplotlib's line colours; axes and text are grey)."""
    rgb = (image[..., :3] * 255).astype(int)
    saturation = rgb.max(axis=-1) - rgb.min(axis=-1)
    return {tuple(c // 32) for c in rgb[saturation > 80]}


@pytest.fixture(scope="module")
def two_runs(submit, admin_client):
    runs = [submit(curve_loop, f"plot-{k}", {"n": 12, "scale": k}) for k in (1, 2)]
    return [wait_ended(admin_client, run.run_id) for run in runs]


def test_runs_plot_writes_a_png_of_both_runs(two_runs, console_address, tmp_path):
    out = tmp_path / "curves.png"
    cmd = [sys.executable, "-m", "trainwire.cli", "--address", console_address, "--token", ADMIN_TOKEN]
    cmd += ["runs", "plot", *(run.run_id for run in two_runs), "--metric", "loss", "--metric", "accuracy"]
    done = subprocess.run([*cmd, "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    image = _read_png(out)
    assert image.shape[:2] == (600, 1000)  # two panels of 300 px, 1000 px wide
    # Not blank: two runs' lines in two colours, over a white background.
    assert len(_drawn_colours(image)) >= 2
    assert (image[..., :3] < 0.99).mean() > 0.02


def test_runs_plot_against_time(two_runs, console_address, tmp_path):
    out = tmp_path / "time.png"
    cmd = [sys.executable, "-m", "trainwire.cli", "--address", console_address, "--token", ADMIN_TOKEN]
    done = subprocess.run(
        [*cmd, "runs", "plot", two_runs[0].name, "--x", "time", "-o", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert _read_png(out).shape[:2] == (600, 1000)  # every numeric metric: loss and accuracy


def test_result_plot(tmp_path):
    from trainwire.checkpoint import Checkpoint  # noqa: F401 - Result's module imports it
    from trainwire.result import Result

    frame = pd.DataFrame({"loss": [1.0, 0.5, 0.25, np.nan], "name": ["a", "b", "c", "d"]})
    result = Result({}, None, None, "", frame, name="r")
    path = result.plot(str(tmp_path / "r.png"))
    image = _read_png(path)
    assert image.shape[:2] == (300, 1000) and _drawn_colours(image)


def test_importing_trainwire_does_not_import_matplotlib():
    probe = "import trainwire, trainwire.cli, trainwire.plotting, sys; print('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip() == "False"


def slow_loop(config):
    import time

    from trainwire import train

    for i in range(400):
        train.report({"loss": 1.0 / (i + 1)})
        time.sleep(0.1)


def test_a_running_run_is_plotted_as_it_is_now(submit, admin_client, tmp_path):
    """The plot of a live run does not wait for it to end: it reads the reports made so far."""
    import time

    from trainwire.plotting import fetch_history, plot_histories

    run = submit(slow_loop, "plot-live")
    deadline = time.monotonic() + 90
    while admin_client.get_run(run.run_id).last_report_index < 3:
        assert time.monotonic() < deadline, "the run did not report"
        time.sleep(0.1)
    start = time.monotonic()
    history = fetch_history(admin_client, run.run_id)
    assert time.monotonic() - start < 5 and len(history.rows) >= 3
    assert _read_png(plot_histories([history], tmp_path / "live.png")).shape[:2] == (300, 1000)
    admin_client.cancel_run(run.run_id)
    assert wait_ended(admin_client, run.run_id).state == 7  # CANCELLED
