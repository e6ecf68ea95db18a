"""Worker output streamed back: captured per rank, kept in the store, followed from the CLI and fit()."""

from __future__ import annotations

import os
import subprocess
import sys

import grpc
import pytest

from trainwire import FailureConfig, RunConfig, ScalingConfig
from trainwire.torch import TorchTrainer
from trainwire_coordinator.run_streams import LogReader
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.storage import Store
from trainwire_core.v1 import coordinator_pb2, coordinator_pb2_grpc
from trainwire_worker.log_capture import ChunkWriter

LINES = 1000


def chatty_loop(config: dict) -> None:
    import logging

    from trainwire import train

    rank = train.get_context().get_world_rank()
    for i in range(LINES):
        print(f"rank {rank} line {i}")
    logging.getLogger("chatty").warning("rank %d done", rank)
    train.report({"rank": rank})


def test_every_line_of_two_ranks_comes_back_in_order(coordinator_address, client, capsys):
    result = TorchTrainer(
        chatty_loop, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(name="chatty", verbose=0)
    ).fit()
    run_id = result.path.rstrip("/").rsplit("/", 1)[-1]
    # fit() printed them as they came, prefixed as Ray prefixes its workers' lines.
    shown = capsys.readouterr()
    assert "(rank=0, attempt=1) rank 0 line 999" in shown.out and "(rank=1, attempt=1) rank 1 line 0" in shown.out
    assert "(rank=1, attempt=1) rank 1 done" in shown.err
    # The CLI shows every line, in order within each rank.
    env = {**os.environ, "TRAINWIRE_ADDRESS": coordinator_address}
    done = subprocess.run(
        [sys.executable, "-m", "trainwire.cli", "runs", "logs", run_id, "-f"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        mine = [x for x in done.stdout.splitlines() if x.startswith(f"(rank={rank}, attempt=1) rank {rank} line")]
        assert mine == [f"(rank={rank}, attempt=1) rank {rank} line {i}" for i in range(LINES)]
    only_one = subprocess.run(
        [sys.executable, "-m", "trainwire.cli", "runs", "logs", run_id, "--rank", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "(rank=0," not in only_one.stdout and "(rank=1, attempt=1) rank 1 line 5" in only_one.stdout
    # A stream resumed from a line's cursor goes on after that line: nothing lost or repeated.
    lines = list(client.watch_logs(run_id, follow=False))
    resumed = list(client.watch_logs(run_id, follow=False, after=lines[700].cursor))
    assert [x.text for x in lines[701:]] == [x.text for x in resumed]


def dying_loop(config: dict) -> None:
    import signal

    from trainwire import train

    ctx = train.get_context()
    print("last words", flush=True)
    if train.get_checkpoint() is None and ctx.get_world_rank() == 1:
        import tempfile

        from trainwire import Checkpoint

        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "x"), "w").write("1")
            train.report({"step": 1}, checkpoint=Checkpoint.from_directory(d))
        # A report is a queue put: give it a moment to leave before the process dies (the next
        # attempt resumes from it); the line below is then the last thing this rank does.
        import time

        time.sleep(1.0)
        print("before the kill", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    train.report({"step": 2})


def test_the_last_lines_before_a_sigkill_are_kept(client):
    result = TorchTrainer(
        dying_loop,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="dying", verbose=0, failure_config=FailureConfig(max_failures=2)),
    ).fit()
    run_id = result.path.rstrip("/").rsplit("/", 1)[-1]
    lines = list(client.watch_logs(run_id, ranks=[1], follow=False))
    first = [x.text for x in lines if x.attempt == 0]
    assert "before the kill" in first
    assert any(x.attempt == 1 for x in lines)


def test_a_bad_cursor_or_rank_is_refused_by_field(coordinator_address, client):
    run = next(iter(client.list_runs().runs))
    channel = grpc.insecure_channel(coordinator_address)
    stub = coordinator_pb2_grpc.CoordinatorStub(channel)
    for request, field in [
        (coordinator_pb2.WatchLogsRequest(run_id=run.run_id, after="../../etc"), "after"),
        (coordinator_pb2.WatchLogsRequest(run_id=run.run_id, ranks=[-1]), "ranks"),
    ]:
        with pytest.raises(grpc.RpcError) as info:
            list(stub.WatchLogs(request))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in info.value.details()
    channel.close()


def test_rotation_keeps_the_newest_lines_and_readers_skip_what_went(tmp_path):
    store = Store(str(tmp_path))
    run_dir = store.run_dir("r1")
    writer = ChunkWriter(store, f"{run_dir}/logs/rank-0/attempt-1", max_bytes=300)
    for i in range(20):
        writer.add(float(i), "stdout", f"line {i}")
        writer.flush()
    writer.done()
    reader = LogReader(store, run_dir, [], "")
    texts = [x.text for x in reader.read_new()]
    assert texts and texts[-1] == "line 19" and "line 0" not in texts
    assert texts == [f"line {i}" for i in range(20 - len(texts), 20)]
    assert reader.all_done() and reader.read_new() == []
    with pytest.raises(InvalidArgumentError):
        LogReader(store, run_dir, [], "0.1:x")
