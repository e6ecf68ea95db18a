"""A client that keeps scoring through ``dns:///predictor:8001`` (every replica) for a while.

Run on the twin's client host while a predictor host is cut off; prints one JSON line with
each call's start time (seconds from the start), latency and outcome, and the wall time of the start.

    python deploy/round_robin.py RUN_ID --seconds 12 --timeout-s 2 [--ready-file F]
"""

from __future__ import annotations

import argparse
import json
import time

from sklearn.datasets import load_breast_cancer

from trainwire import PredictorClient


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--target", default="dns:///predictor:8001")
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--timeout-s", type=float, default=2.0)
    parser.add_argument("--ready-file", help="written after the first answer, so a test knows calls are flowing")
    args = parser.parse_args()
    df = load_breast_cancer(as_frame=True).frame
    df.columns = [c.replace(" ", "_") for c in df.columns]
    rows = df.drop(columns=["target"]).head(32)
    client = PredictorClient(args.target, timeout_s=args.timeout_s)
    calls = []
    start = time.monotonic()
    while time.monotonic() - start < args.seconds:
        began = time.monotonic()
        try:
            client.predict(args.model, rows)
            ok = True
        except Exception:  # noqa: BLE001 - counted, not raised
            ok = False
        calls.append({"at": began - start, "latency_s": time.monotonic() - began, "ok": ok})
        if ok and args.ready_file and len(calls) == 1:
            with open(args.ready_file, "w") as f:
                f.write(str(time.time()))
        time.sleep(0.05)
    print(json.dumps({"calls": calls, "started": time.time() - (time.monotonic() - start)}), flush=True)


if __name__ == "__main__":
    main()
