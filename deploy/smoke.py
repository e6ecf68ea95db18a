"""A deployment smoke test: an XGBoost fit on the cluster, then predictions from every predictor replica.

Run it from a client host of a deployment (compose, the twin's ``client`` namespace):

    TRAINWIRE_ADDRESS=coordinator:50051 python deploy/smoke.py \
        --predictor predictor-1:8001 --predictor predictor-2:8001 --console http://console:8265

Prints one JSON line with the run, what each replica answered, how long an alias move took to
reach every replica, and what the console's pages showed of the run; exits non-zero when a
replica's answers differ from the in-process predictor's, when a moved alias is not served by
every replica within the predictors' index refresh (plus a second for the calls), or when the
console does not show the run as it ended.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.parse
import urllib.request

import grpc
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

import trainwire
from trainwire import CheckpointConfig, PredictorClient, RunConfig, ScalingConfig
from trainwire.client import CoordinatorClient
from trainwire.model_registry import ModelRegistryClient
from trainwire.predictor_client import encode_request
from trainwire.xgboost import XGBoostPredictor, XGBoostTrainer
from trainwire_core.inference import grpc_service_pb2_grpc
from trainwire_core.serving import open_channel
from trainwire_core.tls import ClientTLS
from trainwire_core.v1 import common_pb2

ALIAS = "production"


def _predict(address: str, model: str, features, timeout_s: float) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Asks one replica, retrying while it has not yet seen the committed checkpoint."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with PredictorClient(address) as client:
                return client.predict(model, features)["predictions"].to_numpy()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _served_versions(predictors: list[str], model: str, version: str, features) -> list[str]:  # type: ignore[no-untyped-def]
    """The checkpoint each replica answers ``version`` (an alias) with, asked directly: one row each."""
    token = os.environ.get("TRAINWIRE_PREDICTOR_TOKEN")
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    request = encode_request(model, features.iloc[:1], version)
    served = []
    for address in predictors:
        with open_channel(address, [], ClientTLS.from_files()) as channel:
            stub = grpc_service_pb2_grpc.GRPCInferenceServiceStub(channel)
            try:
                served.append(stub.ModelInfer(request, timeout=5, metadata=metadata).model_version)
            except grpc.RpcError as err:
                served.append(f"error: {err.code().name}")
    return served


def _alias_move(predictors: list[str], model: str, versions: list[str], features, timeout_s: float) -> dict:  # type: ignore[no-untyped-def]
    """Points the alias at one kept checkpoint, then moves it to another; how long every replica took to follow."""
    with ModelRegistryClient(os.environ["TRAINWIRE_ADDRESS"]) as registry:
        for version in versions:
            registry.set_alias(model, ALIAS, version)
            moved, deadline = time.monotonic(), time.monotonic() + timeout_s
            while (served := _served_versions(predictors, model, ALIAS, features)) != [version] * len(predictors):
                if time.monotonic() > deadline:
                    raise AssertionError(f"alias {ALIAS!r} -> {version}: the replicas serve {served}")
                time.sleep(0.05)
            seen_s = time.monotonic() - moved
    return {
        "alias": ALIAS,
        "moved_to": versions[-1],
        "moves": len(versions),
        "seen_by_every_replica_s": round(seen_s, 2),
    }


def _get(url: str, timeout_s: float = 10.0) -> str:
    """A plain HTTP GET, never through a proxy (the deployment's names resolve inside it only)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout_s) as answer:
        return answer.read().decode()


def _console(base: str, run_id: str, name: str, version: str, timeout_s: float) -> dict:
    """What the console's pages show of a run, fetched over HTTP as a browser would (no browser).

    Raises:
        AssertionError: a page does not show the run, or not as SUCCEEDED.
    """
    base = base.rstrip("/")
    # The runs list, filtered by name: the run's row, with its state.
    runs = _get(f"{base}/runs?name={urllib.parse.quote(name)}")
    row = re.search(rf'<tr id="run-{re.escape(run_id)}".*?</tr>', runs, re.S)
    assert row, f"{base}/runs does not list run {run_id}"
    row_state = re.search(r'data-field="state">(\w+)<', row.group(0))
    # The run's page (HTML) and its curves (JSON, read by the console from WatchRun).
    page = _get(f"{base}/runs/{run_id}")
    page_state = re.search(r'id="run-state"[^>]*>(\w+)<', page)
    assert run_id in page and page_state, f"{base}/runs/{run_id} does not show the run"
    deadline = time.monotonic() + timeout_s
    while True:
        series = json.loads(_get(f"{base}/api/runs/{run_id}/series?metrics=valid-logloss&width=800"))
        points = len(series["series"].get("valid-logloss", {}).get("y", []))
        if (series["complete"] and points) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    # The models the predictors serve, as the console sees them through their service name.
    models = _get(f"{base}/models")
    # The row of the version the replicas served by default (the alias check asked another one):
    # versions are checkpoint numbers, each shown with its checkpoint id.
    row = (
        rf'data-model="{re.escape(name)}" data-version="\d+">'
        rf'(?:(?!</tr>).)*?data-field="checkpoint">{re.escape(version)}<.*?</tr>'
    )
    model_row = re.search(row, models, re.S)
    inferences = re.search(r'data-field="inference_count">(\d+)<', model_row.group(0)) if model_row else None
    # p99 from the replicas' Prometheus histograms (dns:///predictor:8002), "–" when none answered.
    p99 = re.search(r'data-field="p99_latency_ms"[^>]*>([\d.]+) ms<', model_row.group(0)) if model_row else None
    # Its own copy of the browser libraries (npm ci, copied into the package), no CDN.
    htmx = _get(f"{base}/static/vendor/htmx.min.js")
    shown = {
        "list_state": row_state.group(1) if row_state else None,
        "page_state": page_state.group(1),
        "series_state": series["state"],
        "series_name": series["name"],
        "valid_logloss_points": points,
        "model_inferences": int(inferences.group(1)) if inferences else None,
        "model_p99_ms": float(p99.group(1)) if p99 else None,
        "htmx_bytes": len(htmx),
    }
    assert shown["list_state"] == shown["page_state"] == shown["series_state"] == "SUCCEEDED", shown
    assert shown["series_name"] == name and points > 0 and len(htmx) > 10_000, shown
    assert model_row, f"{base}/models does not list the model {name!r} version {version!r}"
    assert shown["model_p99_ms"] is not None, f"{base}/models shows no p99 latency: {model_row.group(0)}"
    return shown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--predictor", action="append", default=[], help="host:port of a predictor replica")
    parser.add_argument("--console", help="the console's base URL (http://console:8265): its pages must show the run")
    parser.add_argument("--name", default="smoke")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument(
        "--index-refresh-s", type=float, default=1.0, help="the predictors' TRAINWIRE_PREDICTOR_INDEX_REFRESH_S"
    )
    args = parser.parse_args(argv)

    df = load_breast_cancer(as_frame=True).frame
    df.columns = [c.replace(" ", "_") for c in df.columns]
    train_df, valid_df = train_test_split(df, test_size=0.3, random_state=0)

    trainwire.init()  # TRAINWIRE_ADDRESS
    started = time.monotonic()
    result = XGBoostTrainer(
        params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
        label_column="target",
        num_boost_round=20,
        datasets={"train": train_df, "valid": valid_df},
        scaling_config=ScalingConfig(num_workers=args.num_workers),
        # Two checkpoints kept (rounds 10 and 20): versions for the alias to move between.
        run_config=RunConfig(
            name=args.name, checkpoint_config=CheckpointConfig(num_to_keep=2, checkpoint_frequency=10), verbose=0
        ),
    ).fit()
    fit_s = time.monotonic() - started
    features = valid_df.drop(columns=["target"])
    local = XGBoostPredictor.from_checkpoint(result.checkpoint).predict(features)["predictions"].to_numpy()

    report = {
        "run_id": result.run_id,
        "fit_s": round(fit_s, 1),
        "valid_logloss": result.metrics.get("valid-logloss"),
        "checkpoint": result.checkpoint.uri,
        "predictors": {},
    }
    coordinator = CoordinatorClient(os.environ["TRAINWIRE_ADDRESS"])
    run = coordinator.get_run(result.run_id)
    report["state"] = common_pb2.RunState.Name(run.state)
    coordinator.close()
    ok = True
    for address in args.predictor:
        served = _predict(address, args.name, features, timeout_s=60)
        same = bool(np.allclose(served, local))
        accuracy = float(((served > 0.5) == valid_df["target"].to_numpy()).mean())
        report["predictors"][address] = {"rows": len(served), "same_as_local": same, "accuracy": round(accuracy, 3)}
        ok = ok and same
    kept = [c.checkpoint_id for c in run.best_checkpoints]
    if len(args.predictor) > 0 and len(kept) >= 2:
        # Every replica must serve a moved alias within its index refresh (a second for the calls).
        try:
            report["alias_move"] = _alias_move(args.predictor, args.name, kept[:2], features, timeout_s=30)
            ok = ok and report["alias_move"]["seen_by_every_replica_s"] <= args.index_refresh_s + 1.0
        except (AssertionError, trainwire.TrainwireError) as err:
            report["alias_move"] = {"error": f"{type(err).__name__}: {err}"}
            ok = False
    if args.console:
        started = time.monotonic()
        try:
            report["console"] = _console(
                args.console, result.run_id, args.name, run.latest_checkpoint.checkpoint_id, timeout_s=30
            )
            report["console"]["seconds"] = round(time.monotonic() - started, 2)
        except (AssertionError, OSError, ValueError) as err:
            report["console"] = {"error": f"{type(err).__name__}: {err}"}
            ok = False
    trainwire.shutdown()
    print(json.dumps(report), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
