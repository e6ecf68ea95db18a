"""The console in a real browser (Debian's chromium, driven by Playwright) against a live coordinator and predictor.

One coordinator, one predictor, two console processes (an ``admin`` and a ``read``-only token) and one
browser serve every test here; the runs are tiny. Screenshots of each page go to tests/console/artifacts/.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
from console_helpers import ADMIN_TOKEN, READER_TOKEN, wait_ended

pytestmark = pytest.mark.timeout(180)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).parent / "artifacts"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_console(address: str, token: str, predictor: str, metrics: str, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "trainwire_console", "--address", address, "--token", token, "--port", str(port)]
    cmd += ["--predictor", predictor, "--predictor-metrics", metrics]
    proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the console exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:
                if answer.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"the console did not answer within 30s:\n{log.read_text()}")


def _stop(proc: subprocess.Popen) -> None:
    """Ends the console's process group (it was started in a session of its own)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def live_loop(config):
    """Reports a falling loss and prints a line, a few times a second, until cancelled."""
    import time

    from trainwire import train

    for i in range(config["steps"]):
        print(f"step {i} of the live run", flush=True)
        train.report({"loss": 1.0 / (i + 1), "lr": 0.1})
        time.sleep(config["pause_s"])


@pytest.fixture(scope="module")
def predictor(console_coordinator):
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    store = console_coordinator.server.runs.store
    # Its Prometheus metrics too (metrics_port 0 is off, not any port), for the console's p99.
    settings = PredictorSettings(
        port=0, metrics_port=_free_port(), store=store.uri, index_refresh_s=0.2, compile_tree_models=False
    )
    thread = PredictorThread(settings)
    thread.start()
    yield thread.server
    thread.stop()


@pytest.fixture(scope="module")
def model_run(admin_client):
    """A tiny XGBoost model (one worker, 3 rounds): a run with a checkpoint the predictor serves."""
    from trainwire import RunConfig, ScalingConfig
    from trainwire.xgboost import XGBoostTrainer

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=200), "b": rng.normal(size=200)})
    frame["target"] = (frame.a + frame.b > 0).astype(int)
    trainer = XGBoostTrainer(
        params={"objective": "binary:logistic", "max_depth": 2, "nthread": 1},
        label_column="target",
        num_boost_round=3,
        datasets={"train": frame},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name="console-model", verbose=0),
    )
    run = admin_client.fit(trainer.build_request(admin_client))
    run = wait_ended(admin_client, run.run_id, 120)
    assert run.state == 5, run.state_reason  # SUCCEEDED
    return run


@pytest.fixture(scope="module")
def consoles(console_address, predictor, tmp_path_factory):
    """Two consoles on the same services: one with an admin token, one with a read-only token."""
    logs = tmp_path_factory.mktemp("console-logs")
    address, metrics = predictor.address, f"http://{predictor.metrics_address}/metrics"
    admin, admin_url = _start_console(console_address, ADMIN_TOKEN, address, metrics, logs / "admin.log")
    reader, reader_url = _start_console(console_address, READER_TOKEN, address, metrics, logs / "reader.log")
    yield {"admin": admin_url, "reader": reader_url}
    _stop(admin)
    _stop(reader)


def scored_loop(config):
    """Reports five metrics a step, with a checkpoint each; valid_loss is lowest at step 6 (the best checkpoint)."""
    import os
    import tempfile

    from trainwire import train

    for step in range(1, config["steps"] + 1):
        metrics = {
            "accuracy": step / config["steps"],
            "lr": 0.1,
            "train_loss": 1.0 / step,
            "training_iteration": step,
            "valid_loss": (step - 6) ** 2 / 25 + config["offset"],
        }
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "weights.txt"), "w") as f:
                f.write(str(step))
            train.report(metrics, checkpoint=train.Checkpoint.from_directory(d))


def valid_loss(step: int, offset: float) -> float:
    return (step - 6) ** 2 / 25 + offset


@pytest.fixture(scope="module")
def scored_runs(admin_client):
    """Two ended runs scored by valid_loss (lower is better), keeping 2 checkpoints besides the latest."""
    from trainwire import CheckpointConfig, RunConfig, ScalingConfig
    from trainwire.trainer import DataParallelTrainer

    runs = []
    for name, offset in (("console-scored-a", 0.25), ("console-scored-b", 0.5)):
        trainer = DataParallelTrainer(
            scored_loop,
            train_loop_config={"steps": 10, "offset": offset},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(
                name=name,
                verbose=0,
                checkpoint_config=CheckpointConfig(
                    num_to_keep=2, checkpoint_score_attribute="valid_loss", checkpoint_score_order="min"
                ),
            ),
        )
        runs.append(admin_client.fit(trainer.build_request(admin_client)))
    ended = [wait_ended(admin_client, run.run_id, 120) for run in runs]
    assert all(run.state == 5 for run in ended), [run.state_reason for run in ended]  # SUCCEEDED
    return ended


@pytest.fixture(scope="module")
def bare_console(console_address, tmp_path_factory):
    """A console started without --predictor."""
    logs = tmp_path_factory.mktemp("bare-console")
    proc, url = _start_console(console_address, ADMIN_TOKEN, "", "", logs / "bare.log")
    yield url
    _stop(proc)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail("chromium is not installed (make test installs it: apt-get install chromium)")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def test_runs_page_lists_a_run(page, consoles, model_run, submit):
    page.goto(consoles["admin"] + "/")
    row = page.locator(f"#run-{model_run.run_id}")
    row.wait_for()
    assert "console-model" in row.inner_text() and "SUCCEEDED" in row.inner_text()
    # A run started while the list is open joins it without a reload.
    new_run = submit(live_loop, "console-new", {"steps": 2, "pause_s": 0.05})
    page.locator(f"#run-{new_run.run_id}").wait_for(timeout=60_000)
    # Filtering by a state the run is not in hides it.
    page.goto(consoles["admin"] + "/?state=FAILED")
    assert page.locator(f"#run-{model_run.run_id}").count() == 0
    page.goto(consoles["admin"] + "/?name=console-mod")
    page.locator(f"#run-{model_run.run_id}").wait_for()
    page.screenshot(path=str(ARTIFACTS / "runs.png"), full_page=True)


def test_a_live_run_curve_grows_logs_follow_and_cancel_ends_it(page, browser, consoles, submit, admin_client):
    run = submit(live_loop, "console-live", {"steps": 400, "pause_s": 0.15})
    page.goto(f"{consoles['admin']}/runs/{run.run_id}")
    page.wait_for_function("window.trainwire.chartPoints() > 0", timeout=120_000)
    before = page.evaluate("window.trainwire.chartPoints()")
    page.wait_for_function(f"window.trainwire.chartPoints() > {before + 5}")
    # The logs follow: lines written after the page opened arrive.
    page.wait_for_function("document.querySelector('#logs').textContent.includes('step 3 of the live run')")
    later = page.evaluate("document.querySelector('#logs').children.length")
    page.wait_for_function(f"document.querySelector('#logs').children.length > {later}")
    page.screenshot(path=str(ARTIFACTS / "run.png"), full_page=True)

    # A read-only token is never offered the cancel button, on the same live run.
    reader = browser.new_page()
    reader.goto(f"{consoles['reader']}/runs/{run.run_id}")
    reader.locator("#run-state").wait_for()
    assert reader.locator("#cancel").count() == 0
    refused = reader.request.post(
        f"{consoles['reader']}/runs/{run.run_id}/cancel", headers={"X-Requested-By": "trainwire-console"}
    )
    assert refused.status == 403 and "may not cancel" in refused.text()
    reader.screenshot(path=str(ARTIFACTS / "run-read-only.png"))
    reader.close()

    # An open runs list sees the run change state (and colour) without a reload.
    runs_list = browser.new_page()
    runs_list.goto(consoles["admin"] + "/")
    state_cell = runs_list.locator(f"#run-{run.run_id} [data-field=state]")
    state_cell.wait_for()
    assert state_cell.inner_text() == "RUNNING"

    page.locator("#cancel").click()
    ended = wait_ended(admin_client, run.run_id, 60)
    assert ended.state == 7  # CANCELLED
    page.wait_for_function("document.querySelector('#run-state').textContent === 'CANCELLED'")
    assert page.locator("#cancel").count() == 0
    runs_list.wait_for_function(
        f"document.querySelector('#run-{run.run_id} [data-field=state]').classList.contains('CANCELLED')"
    )
    assert state_cell.inner_text() == "CANCELLED"
    runs_list.close()


def test_a_checkpoint_downloads_and_its_sha256_matches(page, consoles, model_run):
    page.goto(f"{consoles['admin']}/runs/{model_run.run_id}")
    page.locator("a.files").first.click()
    page.locator("td.sha256").first.wait_for()
    listed = {
        row.locator("a.file").inner_text(): row.locator("td.sha256").inner_text()
        for row in page.locator("table.files tbody tr").all()
    }
    assert listed
    page.screenshot(path=str(ARTIFACTS / "checkpoint.png"), full_page=True)
    # One file on its own, then the whole checkpoint as a zip.
    name = next(iter(listed))
    with page.expect_download() as info:
        page.locator("a.file", has_text=name).click()
    assert hashlib.sha256(Path(info.value.path()).read_bytes()).hexdigest() == listed[name]
    with page.expect_download() as info:
        page.locator("a.download").first.click()
    with zipfile.ZipFile(io.BytesIO(Path(info.value.path()).read_bytes())) as archive:
        for path, sha in listed.items():
            assert hashlib.sha256(archive.read(path)).hexdigest() == sha, path


def test_the_model_page_shows_statistics_that_grow(page, consoles, model_run):
    page.goto(f"{consoles['admin']}/models?model=console-model")
    row = page.locator("tr.model[data-model='console-model']").first
    row.wait_for(timeout=30_000)
    count = int(row.locator("[data-field=inference_count]").inner_text())
    # The predictors report the version's number; the page names its checkpoint and marks the served one.
    page.wait_for_function(
        "document.querySelector(\"tr.model[data-model='console-model'] [data-field=checkpoint]\") !== null"
    )
    version = row.locator("[data-field=version]")
    assert row.get_attribute("data-version").isdigit(), row.get_attribute("data-version")
    assert version.locator("[data-field=checkpoint]").inner_text() == model_run.latest_checkpoint.checkpoint_id
    assert "served" in version.inner_text()
    # A request from the page's form, as JSON columns.
    page.fill("#predict-form input[name=model]", "console-model")
    page.fill("#predict-form textarea[name=body]", '{"a": [0.5, -1.0], "b": [0.2, -0.3]}')
    page.click("#predict-form button[type=submit]")
    page.locator("#predict-result table.predictions, #predict-result pre.error").wait_for()
    assert page.locator("#predict-result pre.error").count() == 0, page.inner_text("#predict-result")
    assert page.locator("#predict-result table.predictions tbody tr").count() == 2
    # And one as a CSV row.
    page.select_option("#predict-form select[name=format]", "csv")
    page.fill("#predict-form textarea[name=body]", "a,b\n1.0,1.0")
    page.click("#predict-form button[type=submit]")
    page.wait_for_function("document.querySelectorAll('#predict-result table.predictions tbody tr').length === 1")
    page.wait_for_function(
        "document.querySelector(\"tr.model[data-model='console-model'] [data-field=inference_count]\")"
        f".textContent.trim() >= {count + 3}",
        timeout=30_000,
    )
    # The p99 of the requests, from the predictor's Prometheus histogram (ModelStatistics has none).
    page.wait_for_function(
        "/^\\d+\\.\\d\\d ms$/.test(document.querySelector("
        "\"tr.model[data-model='console-model'] [data-field=p99_latency_ms]\").textContent.trim())",
        timeout=30_000,
    )
    p99 = float(row.locator("[data-field=p99_latency_ms]").inner_text().split()[0])
    assert 0 < p99 <= 10_000, p99
    page.screenshot(path=str(ARTIFACTS / "models.png"), full_page=True)


def test_a_run_stream_resumes_after_the_last_event_id(consoles, model_run):
    """What a browser sends when its event stream reconnects: only the events after it come back."""

    def events(headers: dict[str, str]) -> list[tuple[str, str]]:
        request = urllib.request.Request(f"{consoles['admin']}/api/runs/{model_run.run_id}/events", headers=headers)
        with urllib.request.urlopen(request, timeout=30) as answer:
            text = answer.read().decode()
        out = []
        for block in text.strip().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            out.append((fields.get("id", ""), fields.get("event", "")))
        return out

    everything = events({})
    assert everything[-1][1] == "end" and len(everything) > 3
    ids = [int(i) for i, _ in everything[:-1]]
    assert ids == sorted(ids)
    resumed = events({"Last-Event-ID": str(ids[1])})
    assert [int(i) for i, _ in resumed[:-1]] == ids[2:]


def test_signing_in_with_another_token_and_forged_posts(page, consoles, model_run):
    """A user's own token replaces the console's (here: read-only) for that browser; other sites cannot post."""
    base = consoles["reader"]
    page.goto(base + "/")
    assert "the console's token: read" in page.inner_text("header") and "cancel" not in page.inner_text("header")
    page.goto(base + "/signin")
    page.fill("input[name=token]", "not-a-token")
    page.click("form.signin button")
    assert "does not take that token" in page.inner_text("main")
    page.fill("input[name=token]", ADMIN_TOKEN)
    page.click("form.signin button")
    page.locator(f"#run-{model_run.run_id}").wait_for()
    assert "your token: read · cancel" in " ".join(page.inner_text("header").split())
    # A cross-site form can post to the console but cannot add the header its own page sends.
    forged = page.request.post(f"{base}/runs/{model_run.run_id}/cancel")
    assert forged.status == 403 and "X-Requested-By" in forged.text()
    page.click("header form.inline button")
    page.wait_for_url(base + "/")
    assert "the console's token: read" in page.inner_text("header")


ATTACKER = "http://attacker.test"


def _form_token(base: str) -> str:
    """The form token of a fresh sign-in page: what anyone, an attacker too, gets for the asking."""
    answer = httpx.get(base + "/signin")
    token = answer.cookies["trainwire_csrf"]
    assert re.search(r'name="csrf_token" value="([^"]+)"', answer.text).group(1) == token
    return token


def _cross_site_post(page, action: str, fields: dict[str, str]):
    """The response to a form that another site's page posts to ``action`` in this browser (auto-submitted)."""
    inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
    html = f'<form method="post" action="{action}">{inputs}</form><script>document.forms[0].submit()</script>'
    page.route(ATTACKER + "/", lambda route: route.fulfill(status=200, content_type="text/html", body=html))
    with page.expect_response(lambda r: r.url == action and r.request.method == "POST") as info:
        page.goto(ATTACKER + "/")
    page.unroute(ATTACKER + "/")
    assert info.value.request.header_value("origin") == ATTACKER  # what the browser tells the console
    return info.value


def _console_cookies(page, base: str) -> dict[str, str]:
    return {c["name"]: c["value"] for c in page.context.cookies(base)}


def test_another_sites_form_cannot_sign_a_browser_in_or_out(page, consoles):
    """Login and logout forgery in the browser: even with a form token of its own planted in the
    browser (a cookie another port of the same host could set), the attacker's Origin is refused."""
    base = consoles["reader"]
    token = _form_token(base)
    page.context.add_cookies([{"name": "trainwire_csrf", "value": token, "url": base}])
    forged = _cross_site_post(page, base + "/signin", {"token": ADMIN_TOKEN, "csrf_token": token})
    assert forged.status == 403 and "another site" in forged.text()
    assert _console_cookies(page, base) == {"trainwire_csrf": token}
    page.goto(base + "/")
    assert "the console's token: read" in page.inner_text("header")

    # The user signs in on the console's own page; another site's sign-out leaves that session.
    page.goto(base + "/signin")
    page.fill("input[name=token]", ADMIN_TOKEN)
    page.click("form.signin button")
    page.locator("header form.inline button").wait_for()
    signed_in = _console_cookies(page, base)
    assert signed_in["trainwire_token"] == ADMIN_TOKEN and signed_in["trainwire_csrf"] != token
    forged = _cross_site_post(page, base + "/signout", {"csrf_token": signed_in["trainwire_csrf"]})
    assert forged.status == 403
    assert _console_cookies(page, base) == signed_in
    page.goto(base + "/")
    assert "your token: read · cancel" in " ".join(page.inner_text("header").split())


def test_forged_sign_in_and_sign_out_posts_are_refused_and_set_no_cookie(consoles, model_run):
    """What a cross-site form, or a client without the form's token, sends to the real server."""
    base = consoles["reader"]
    token = _form_token(base)
    pair = {"Cookie": f"trainwire_csrf={token}"}
    form = {"token": ADMIN_TOKEN, "csrf_token": token}
    with httpx.Client(base_url=base, follow_redirects=False) as client:
        forged = [
            ({**pair, "Origin": ATTACKER}, form),
            ({**pair, "Origin": "null"}, form),
            ({**pair, "Referer": ATTACKER + "/page"}, form),
            ({**pair, "Origin": base.replace("127.0.0.1", "localhost")}, form),
            ({}, {"token": ADMIN_TOKEN}),  # no form token at all
            ({"Cookie": "trainwire_csrf=planted"}, form),  # one that is not the cookie's
        ]
        for headers, data in forged:
            answer = client.post("/signin", headers=headers, data=data)
            assert answer.status_code == 403, (headers, answer.text)
            assert answer.json()["error"] == "PERMISSION_DENIED" and "set-cookie" not in answer.headers

        session = {"Cookie": f"trainwire_token={ADMIN_TOKEN}; trainwire_csrf={token}"}
        for headers, data in [({**session, "Origin": ATTACKER}, {"csrf_token": token}), (session, {})]:
            answer = client.post("/signout", headers=headers, data=data)
            assert answer.status_code == 403 and "set-cookie" not in answer.headers
        # The scripts' header does not excuse another site's Origin either, on any POST.
        cancel = client.post(
            f"/runs/{model_run.run_id}/cancel", headers={"X-Requested-By": "trainwire-console", "Origin": ATTACKER}
        )
        assert cancel.status_code == 403 and "another site" in cancel.text

        # The console's own form, from a browser (its Origin) or from a script (no Origin, no Referer).
        for headers in [{**pair, "Origin": base}, pair]:
            answer = client.post("/signin", headers=headers, data=form)
            assert answer.status_code == 303, answer.text
            session_cookie = next(c for c in answer.headers.get_list("set-cookie") if c.startswith("trainwire_token="))
            assert "HttpOnly" in session_cookie and "SameSite=strict" in session_cookie
            assert "Secure" not in session_cookie  # plain HTTP here; Secure when the console is served over TLS
        answer = client.post("/signout", headers={**session, "Origin": base}, data={"csrf_token": token})
        assert answer.status_code == 303 and answer.headers["set-cookie"].startswith('trainwire_token="";')


def test_the_probe_says_whether_the_console_is_healthy(consoles):
    port = consoles["admin"].rsplit(":", 1)[1]
    probe = [sys.executable, "-m", "trainwire_console", "--probe", "--port"]
    assert subprocess.run([*probe, port], capture_output=True, timeout=30).returncode == 0
    assert subprocess.run([*probe, str(_free_port())], capture_output=True, timeout=30).returncode == 1


def _legends(page) -> list[str]:
    return page.eval_on_selector_all("#charts .u-legend", "els => els.map(e => e.textContent)")


def test_a_scored_run_draws_its_score_first_with_its_checkpoints(page, consoles, scored_runs, admin_client):
    run = scored_runs[0]
    best = run.best_checkpoints[0]
    assert best.index == 6  # valid_loss is lowest at step 6: what the marker must show
    page.goto(f"{consoles['admin']}/runs/{run.run_id}")
    page.locator("#charts .chart .ckpt.best").wait_for()
    page.wait_for_function("window.trainwire.chartPoints() >= 10")
    titles = page.eval_on_selector_all("#charts .chart h3", "els => els.map(e => e.textContent)")
    # The score attribute is checked and drawn first, though it is neither first reported nor first by name.
    assert titles[0] == "valid_loss", titles
    assert page.locator("#metric-choices input[value=valid_loss]").is_checked()
    # training_iteration is the x axis: it is neither drawn nor offered against itself.
    assert "training_iteration" not in titles
    assert page.locator("#metric-choices label[data-metric=training_iteration]").is_hidden()

    # At rest every legend shows the latest value: the run's name with a number, never uPlot's "--".
    legends = _legends(page)
    assert legends and not any("--" in text for text in legends), legends
    score_legend = page.locator("#charts .chart").first.locator(".u-legend")
    assert f"{valid_loss(10, 0.25):.4g}" in score_legend.text_content()
    assert "console-scored-a" in score_legend.text_content()

    # The best checkpoint's marker sits on the curve at its step; the served one is named.
    marker = page.locator("#charts .chart").first.locator(".ckpt.best")
    assert marker.get_attribute("data-step") == str(best.index)
    assert marker.get_attribute("data-checkpoint") == best.checkpoint_id
    expected = page.evaluate(
        """([step, value]) => {
            const u = window.trainwire.plotOf("valid_loss");
            const box = u.over.getBoundingClientRect();
            return [box.left + u.valToPos(step, "x"), box.top + u.valToPos(value, "y")];
        }""",
        [best.index, valid_loss(best.index, 0.25)],
    )
    box = marker.bounding_box()
    centre = (box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    assert abs(centre[0] - expected[0]) < 1.5 and abs(centre[1] - expected[1]) < 1.5, (centre, expected)
    assert "served" in marker.inner_text()
    kept = page.locator("#charts .chart").first.locator(".ckpt")
    assert kept.count() == len({c.checkpoint_id for c in [*run.best_checkpoints, run.latest_checkpoint]}) == 3
    assert best.checkpoint_id in page.inner_text("#checkpoint-key")
    row = page.locator(f"#checkpoint-rows td[data-checkpoint={best.checkpoint_id}]")
    assert "best" in row.inner_text() and "served" in row.inner_text()

    # On hover the legend follows the cursor: at step 6 it shows that step's value.
    page.mouse.move(expected[0], expected[1] - 20)
    page.wait_for_function(
        f"document.querySelector('#charts .u-legend').textContent.endsWith('{valid_loss(6, 0.25):.4g}')"
    )
    assert "training iteration6" in score_legend.text_content()
    page.mouse.move(0, 0)
    page.wait_for_function("!document.querySelector('#charts .u-legend').textContent.includes('--')")

    # Against time the step may be drawn (it is not the axis then).
    page.select_option("#curve-form select[name=x]", "time")
    assert page.locator("#metric-choices label[data-metric=training_iteration]").is_visible()
    page.screenshot(path=str(ARTIFACTS / "run-scored.png"), full_page=True)


def test_the_runs_list_shows_scores_and_compares_two_runs(page, consoles, scored_runs):
    a, b = scored_runs
    page.goto(consoles["admin"] + "/?name=console-scored")
    for run, offset in ((a, 0.25), (b, 0.5)):
        row = page.locator(f"#run-{run.run_id}")
        row.locator("[data-field=spark] svg polyline").wait_for()
        assert row.locator("[data-field=score]").inner_text().startswith("valid_loss")
        # The best value of the score attribute over the run's reports (lowest: its order is min).
        assert row.locator("[data-field=best]").inner_text() == f"{offset:g}"
    page.screenshot(path=str(ARTIFACTS / "runs-scored.png"), full_page=True)
    assert page.locator("#compare").is_disabled()
    page.locator(f"#run-{a.run_id} input.pick").check()
    page.locator(f"#run-{b.run_id} input.pick").check()
    page.locator("#compare").click()
    page.wait_for_url(f"**/runs/{a.run_id}?compare={b.run_id}")
    page.wait_for_function("window.trainwire.chartPoints() >= 2 * 4 * 10")
    # The page's own run keeps its checkpoints on the score curve.
    page.locator("#charts .chart").first.locator(".ckpt.best").wait_for()
    legend = page.locator("#charts .chart").first.locator(".u-legend").text_content()
    assert "console-scored-a" in legend and "console-scored-b" in legend
    # Both runs' latest values at rest.
    assert f"{valid_loss(10, 0.25):.4g}" in legend and f"{valid_loss(10, 0.5):.4g}" in legend
    assert not any("--" in text for text in _legends(page))
    page.screenshot(path=str(ARTIFACTS / "compare.png"), full_page=True)


def test_models_is_in_the_navigation_and_says_how_to_connect_a_predictor(page, bare_console):
    page.goto(bare_console + "/")
    page.locator("header nav a", has_text="Models").click()
    page.wait_for_url("**/models")
    help_text = page.locator("#no-predictor").inner_text()
    assert "--predictor" in help_text and "No predictor is connected" in help_text
    assert page.locator("#predict-form").count() == 0
