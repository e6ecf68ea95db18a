"""A search outlives its coordinator: SIGKILL in the middle of a search, a new coordinator carries it on.

The coordinator runs as its own process joined to the session's Ray cluster. A user's script
in a directory of its own starts a six-trial search and waits in ``Tuner.fit()``. Once two
trials have ended, the coordinator is killed (SIGKILL) and a new one started on the same port,
metadata store and shared store. The search finishes with every trial accounted for exactly
once: six trials, six runs, no index run twice, none lost.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.integration.test_coordinator_restart import CoordinatorProcess, _end, _free_port
from trainwire.client import CoordinatorClient
from trainwire_core.v1 import common_pb2

pytestmark = pytest.mark.timeout(300)

TRIALS = 6

USER_SCRIPT = textwrap.dedent(
    f"""
    import json, sys, time

    import trainwire
    from trainwire import RunConfig, ScalingConfig, train, tune
    from trainwire.torch import TorchTrainer
    from trainwire.tune import TuneConfig, Tuner

    def loop(config):
        for step in range(4):
            time.sleep(0.5)
            train.report({{"loss": config["lr"] * (4 - step)}})

    trainwire.init(sys.argv[1])
    grid = Tuner(
        TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=1)),
        param_space={{"train_loop_config": {{"lr": tune.uniform(0.01, 1.0)}}}},
        tune_config=TuneConfig(metric="loss", mode="min", num_samples={TRIALS}, max_concurrent_trials=2),
        run_config=RunConfig(name=sys.argv[2], verbose=0),
    ).fit()
    rows = [{{"run_id": r.run_id, "config": r.config, "loss": r.metrics.get("loss")}} for r in grid]
    print("RESULT " + json.dumps({{"rows": rows, "errors": grid.num_errors}}), flush=True)
    """
)


def test_a_search_survives_a_coordinator_sigkill(ray_cluster, tmp_path):
    port = _free_port()
    coordinator = CoordinatorProcess(
        tmp_path, port, ray_cluster.get_runtime_context().gcs_address, str(tmp_path / "state.db")
    )
    address = f"127.0.0.1:{port}"
    name = f"search-survivor-{port}"
    user_dir = tmp_path / "laptop"
    user_dir.mkdir()
    (user_dir / "user.py").write_text(USER_SCRIPT)
    user = None
    client = CoordinatorClient(address)
    try:
        coordinator.start()
        user = subprocess.Popen(
            [sys.executable, "user.py", address, name],
            cwd=user_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, "no two trials ended within 120 s:\n" + coordinator.log()
            try:
                search = client.get_tune(name)
                if sum(t.state == common_pb2.SUCCEEDED for t in search.trials) >= 2:
                    break
            except Exception:  # noqa: BLE001 - not recorded yet
                pass
            time.sleep(0.2)
        coordinator.stop(signal.SIGKILL)
        coordinator.start()
        out, _ = user.communicate(timeout=240)
        text = out.decode(errors="replace")
        assert user.returncode == 0, text[-4000:] + coordinator.log()
        result = json.loads(text.split("RESULT ", 1)[1].splitlines()[0])

        search = client.get_tune(name)
        assert search.state == common_pb2.SUCCEEDED, search.state_reason
        assert [t.index for t in search.trials] == list(range(TRIALS))
        assert all(t.state == common_pb2.SUCCEEDED for t in search.trials), [t.state_reason for t in search.trials]
        run_ids = [t.run_id for t in search.trials]
        assert len(set(run_ids)) == TRIALS
        # Exactly one run per trial in the metadata store: none made twice across the restart.
        runs = [r for r in client.list_runs(page_size=1000).runs if r.tune_id == search.tune_id]
        assert sorted(r.trial_index for r in runs) == list(range(TRIALS))
        assert result["errors"] == 0 and sorted(row["run_id"] for row in result["rows"]) == sorted(run_ids)
        assert any(r.num_coordinator_restarts == 1 for r in runs), "no trial was running at the kill"
    finally:
        client.close()
        _end(user)
        coordinator.kill_group()
