"""Where a gRPC request's time goes in the predictor: the event loop's CPU per request, layer by layer.

Five servers answer the same 32-row ModelInfer request of ``predictor_throughput.py`` (the
XGBoost booster, compiled) at ``--concurrency`` (32), one after another, ``--trials`` times:

- bare: a grpc.aio server answering fixed bytes (no parsing, no await): the transport's floor;
- handler: a grpc.aio server whose handler parses the request, awaits a future the loop sets
  and returns a fixed response message for grpc to serialize (what any real handler does);
- predictor, fixed answer: the predictor process (its options, services, uvloop) with
  ModelInfer converting the request to the data plane's form, then answering as ``handler``;
- predictor, model call stubbed: the whole data plane (resolution, traffic policy, batcher,
  statistics, encoding), with the compiled model's call returning zeros;
- predictor: as it ships.

For each: requests/s, the CPU per request of the server's event loop thread and of its other
threads (from ``/proc``), and of the whole machine (the load generator included). Each step's
difference is what that layer costs.

Run: .venv/bin/python bench/grpc_overhead.py [--concurrency 32] [--seconds 3] [--trials 3]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
import predictor_throughput as pt  # noqa: E402 - the sibling bench's model, servers and load generator

SERVERS = ("bare", "handler", "predictor, fixed answer", "predictor, model call stubbed", "predictor")
VARIANTS = {"predictor, fixed answer": "fixed", "predictor, model call stubbed": "stubbed", "predictor": ""}


async def answer_later(response: object) -> object:
    """Suspends once, as a handler that waits for its answer does."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(done.set_result, None)
    await done
    return response


def handler_server(port: int) -> None:
    """A grpc.aio server that parses, awaits and returns a fixed message (serialized by grpc)."""
    import grpc
    import uvloop

    from trainwire_core.inference import grpc_service_pb2 as pb

    response = pt.fixed_response()

    async def infer(request: object, context: object) -> object:
        return await answer_later(response)

    async def main() -> None:
        server = grpc.aio.server()
        method = grpc.unary_unary_rpc_method_handler(
            infer, pb.ModelInferRequest.FromString, pb.ModelInferResponse.SerializeToString
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {"ModelInfer": method}),)
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()

    uvloop.run(main())


def predictor_variant(variant: str, argv: list[str]) -> None:
    """``trainwire_predictor`` with its inference cut short at one layer (``fixed`` or ``stubbed``)."""
    import numpy as np

    import trainwire_predictor.grpc.servicer as servicer
    from trainwire.predictor import Predictor
    from trainwire_core.grpc_status import handle_errors
    from trainwire_predictor.grpc.codec import request_from_proto
    from trainwire_predictor.server import main

    if variant == "fixed":
        response = pt.fixed_response()

        async def model_infer(self: object, request: object, context: object) -> object:
            request_from_proto(request, servicer._routing_key(context))  # type: ignore[arg-type]
            return await answer_later(response)

        servicer.InferenceServicer.ModelInfer = handle_errors(model_infer)  # type: ignore[method-assign]
    elif variant == "stubbed":
        # After the compiled twin is checked against XGBoost on load: scoring returns zeros from then on.
        Predictor._score = lambda self, data, **kwargs: np.zeros(len(data), np.float32)  # type: ignore[method-assign]
    main(argv)


def cpu_ticks(pid: int) -> collections.Counter[str]:
    """CPU ticks of a process's event loop thread (its main thread) and of its other threads."""
    ticks: collections.Counter[str] = collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks["loop" if tid == str(pid) else "other"] += int(fields[11]) + int(fields[12])
    return ticks


def machine_busy_ticks() -> int:
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(values) - values[3] - values[4]


def start(name: str, workdir: Path, request: bytes) -> tuple[subprocess.Popen, int]:
    port = pt.free_port()
    if name in ("bare", "handler"):
        flag = "--bare-server" if name == "bare" else "--handler-server"
        proc = subprocess.Popen([sys.executable, __file__, flag, str(port)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()
        return proc, port
    log = open(workdir / f"{VARIANTS[name] or 'plain'}.log", "w")  # noqa: SIM115 - lives as long as the server
    argv = ["--port", str(port), "--store", str(workdir / "store")]
    proc = subprocess.Popen(
        [sys.executable, __file__, "--predictor", VARIANTS[name] or "plain", *argv], stdout=log, stderr=log
    )
    pt.wait_ready(port, request)
    return proc, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--bare-server", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--handler-server", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--predictor", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.bare_server:
        return pt.bare_server(args.bare_server)
    if args.handler_server:
        return handler_server(args.handler_server)
    if args.predictor:
        return predictor_variant("" if args.predictor == "plain" else args.predictor, rest)

    workdir = Path(tempfile.mkdtemp(prefix="trainwire-grpc-overhead-"))
    servers: dict[str, tuple[subprocess.Popen, int]] = {}
    cells: dict[str, list[dict[str, float]]] = {name: [] for name in SERVERS}
    hz = os.sysconf("SC_CLK_TCK")
    try:
        _, request = pt.train_model(workdir)
        request_file = workdir / "request.bin"
        request_file.write_bytes(request)
        for name in SERVERS:
            servers[name] = start(name, workdir, request)
        for trial in range(args.trials):
            for name in SERVERS[trial % len(SERVERS) :] + SERVERS[: trial % len(SERVERS)]:
                proc, port = servers[name]
                pt.load_in_subprocess(port, args.concurrency, 0.5, 0.5, request_file)  # warm
                before, busy_before = cpu_ticks(proc.pid), machine_busy_ticks()
                result = pt.load_in_subprocess(port, args.concurrency, args.seconds, 0.0, request_file)
                after, busy_after = cpu_ticks(proc.pid), machine_busy_ticks()
                us = 1e6 / hz / max(result["rps"] * args.seconds, 1)  # ticks -> µs per request
                cells[name].append(
                    {
                        "rps": result["rps"],
                        "loop": (after["loop"] - before["loop"]) * us,
                        "other": (after["other"] - before["other"]) * us,
                        "machine": (busy_after - busy_before) * us,
                    }
                )
        print(f"\nconcurrency {args.concurrency}, median of {args.trials} trials, {args.seconds:g} s each")
        print(f"{'server':<32} {'req/s':>7} {'of bare':>8} {'loop us':>8} {'others us':>10} {'machine us':>11}")
        bare = statistics.median(c["rps"] for c in cells["bare"])
        for name in SERVERS:
            m = {k: statistics.median(c[k] for c in cells[name]) for k in ("rps", "loop", "other", "machine")}
            print(
                f"{name:<32} {m['rps']:>7.0f} {m['rps'] / bare:>8.2f} {m['loop']:>8.0f} "
                f"{m['other']:>10.0f} {m['machine']:>11.0f}"
            )
    finally:
        for proc, _ in servers.values():
            proc.terminate()
        for proc, _ in servers.values():
            proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
