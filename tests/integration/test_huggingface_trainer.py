"""HuggingFaceTrainer with Ray 2.x's signature: a real MiniLM fine-tuned in DDP on two workers, then
served as a text-classification pipeline in process, by BatchPredictor and by the predictor service
(called with the real tritonclient sending a BYTES tensor)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile

import numpy as np
import pandas as pd
import pytest

# The data, the offline MiniLM and its settings are the TorchTrainer loop's (it skips without them).
from test_huggingface import MAX_STEPS, OFFLINE, SAVE_STEPS, minilm, sentiment_data

from trainwire import RunConfig, ScalingConfig
from trainwire_core.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(420)

TEXTS = ["a great film", "I loved it", "a dull film", "I hated it", "wonderful acting", "wooden acting"]


def trainer_init_per_worker(train_dataset, eval_dataset, **config):
    """What a Ray 2.x HuggingFaceTrainer script has: build and return a transformers.Trainer."""
    os.environ.update(config["env"])
    import torch
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments

    from trainwire import train

    rank = train.get_context().get_world_rank()
    transformers.set_seed(rank)  # a different head per rank: DDP must make them agree
    tokenizer = AutoTokenizer.from_pretrained(config["model_path"])
    model = AutoModelForSequenceClassification.from_pretrained(config["model_path"], num_labels=2)

    def collate(rows: list[dict]) -> dict:
        enc = tokenizer([r["text"] for r in rows], padding=True, truncation=True, max_length=16, return_tensors="pt")
        enc["labels"] = torch.as_tensor([r["label"] for r in rows], dtype=torch.long)
        return dict(enc)

    class RecordHead(transformers.TrainerCallback):
        def on_save(self, args, state, control, model=None, **kwargs):
            head = torch.cat([p.detach().flatten() for p in model.classifier.parameters()])
            folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            os.makedirs(folder, exist_ok=True)
            record = {"rank": args.process_index, "world_size": args.world_size, "rows": len(train_dataset)}
            record["head_sha256"] = hashlib.sha256(head.numpy().tobytes()).hexdigest()
            with open(os.path.join(folder, f"worker_{rank}.json"), "w") as f:
                json.dump(record, f)

    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix=f"hf-trainer-rank{rank}-", dir=config["output_root"]),
        use_cpu=True,
        max_steps=config["max_steps"],
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        learning_rate=5e-4,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="steps",
        save_steps=SAVE_STEPS,
        remove_unused_columns=False,  # the collator tokenizes the text column itself
        ddp_find_unused_parameters=False,
        disable_tqdm=True,
        report_to="none",
    )
    return Trainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collate,
        processing_class=tokenizer,
        callbacks=[RecordHead()],
    )


@pytest.fixture(scope="module")
def output_root():
    """Where the workers' Trainers write their own checkpoint-* folders (removed at the end)."""
    with tempfile.TemporaryDirectory(prefix="trainwire-hf-test-") as d:
        yield d


def config(output_root: str, max_steps: int = MAX_STEPS) -> dict:
    return {
        "model_path": str(minilm.get_model_path()),
        "max_steps": max_steps,
        "env": OFFLINE,
        "output_root": output_root,
    }


@pytest.fixture(scope="module")
def hf_result(coordinator, output_root):
    from trainwire.huggingface import HuggingFaceTrainer

    data = sentiment_data()
    return HuggingFaceTrainer(
        trainer_init_per_worker,
        trainer_init_config=config(output_root),
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": data, "evaluation": data.iloc[:8]},
        run_config=RunConfig(name="hf-trainer-minilm", verbose=0),
    ).fit()


def test_the_aliases_are_rays_names():
    from trainwire import huggingface

    assert huggingface.TransformersTrainer is huggingface.HuggingFaceTrainer
    assert huggingface.TransformersCheckpoint is huggingface.HuggingFaceCheckpoint
    assert huggingface.TransformersPredictor is huggingface.HuggingFacePredictor


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"trainer_init_per_worker": "not a function"}, "trainer_init_per_worker"),
        ({"trainer_init_per_worker": lambda config: None}, "trainer_init_per_worker"),
        ({"trainer_init_config": [1, 2]}, "trainer_init_config"),
        ({"datasets": {"train": sentiment_data(), "validation": sentiment_data()}}, "datasets"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    from trainwire.huggingface import HuggingFaceTrainer

    kwargs = {"trainer_init_per_worker": trainer_init_per_worker, **kwargs}
    with pytest.raises(InvalidArgumentError) as info:
        HuggingFaceTrainer(kwargs.pop("trainer_init_per_worker"), **kwargs)
    assert info.value.field == field


def _records(checkpoint) -> list[dict]:
    with checkpoint.as_directory() as d:
        return [json.load(open(os.path.join(d, "checkpoint", f"worker_{r}.json"))) for r in (0, 1)]


def test_each_worker_trains_on_its_own_shard_in_one_ddp_group(hf_result):
    r0, r1 = _records(hf_result.checkpoint)
    assert (r0["rank"], r1["rank"]) == (0, 1)
    assert r0["world_size"] == r1["world_size"] == 2
    assert r0["rows"] + r1["rows"] == len(sentiment_data())


def test_the_classifier_weights_agree_across_ranks(hf_result):
    r0, r1 = _records(hf_result.checkpoint)
    assert r0["head_sha256"] == r1["head_sha256"]


def test_every_evaluation_reports_and_every_save_checkpoints(hf_result):
    df = hf_result.metrics_dataframe
    # Evaluations at steps 1..4; saves at 2 and 4 report those steps' evaluations with their checkpoints.
    assert list(df["step"]) == [1, 2, 3, 4]
    assert np.isfinite(df["eval_loss"]).all()
    steps = [int(metrics["step"]) for _, metrics in hf_result.best_checkpoints]
    assert sorted(steps) == [SAVE_STEPS, MAX_STEPS]


def test_the_checkpoint_holds_model_tokenizer_and_training_arguments(hf_result):
    from transformers import AutoModelForSequenceClassification

    from trainwire.huggingface import HuggingFaceCheckpoint

    checkpoint = hf_result.checkpoint
    assert isinstance(checkpoint, HuggingFaceCheckpoint)
    model = checkpoint.get_model(AutoModelForSequenceClassification)
    assert model.config.num_labels == 2
    assert checkpoint.get_tokenizer()("a great film")["input_ids"]
    assert checkpoint.get_training_arguments().max_steps == MAX_STEPS


@pytest.fixture(scope="module")
def expected(hf_result) -> pd.DataFrame:
    from trainwire.huggingface import HuggingFacePredictor

    predictor = HuggingFacePredictor.from_checkpoint(hf_result.checkpoint)
    return predictor.predict(pd.DataFrame({"text": TEXTS}))


def test_the_predictor_gives_labels_and_scores_in_process(expected):
    assert list(expected.columns) == ["label", "score"]
    assert set(expected["label"]) <= {"LABEL_0", "LABEL_1"}
    assert ((expected["score"] > 0.5) & (expected["score"] <= 1)).all()


def test_batch_predictor_gives_the_same_answers(hf_result, expected):
    import ray

    from trainwire.batch_predictor import BatchPredictor
    from trainwire.huggingface import HuggingFacePredictor

    batch = BatchPredictor.from_checkpoint(hf_result.checkpoint, HuggingFacePredictor)
    out = batch.predict(ray.data.from_pandas(pd.DataFrame({"text": TEXTS})), batch_size=3).to_pandas()
    assert list(out["label"]) == list(expected["label"])
    np.testing.assert_allclose(out["score"], expected["score"], rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def predictor_address(store):
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    thread = PredictorThread(PredictorSettings(port=0, store=store.uri, index_refresh_s=0.2))
    thread.start()
    yield thread.server.address
    thread.stop()


def test_the_service_answers_tritonclient_bytes_tensors(hf_result, expected, predictor_address):
    grpcclient = pytest.importorskip("tritonclient.grpc")

    client = grpcclient.InferenceServerClient(predictor_address)
    model = hf_result.name
    meta = client.get_model_metadata(model, as_json=True)
    assert meta["platform"] == "huggingface"
    assert [(i["name"], i["datatype"]) for i in meta["inputs"]] == [("text", "BYTES")]
    texts = np.array([t.encode() for t in TEXTS], dtype=np.object_)
    tensor = grpcclient.InferInput("text", [len(TEXTS)], "BYTES")
    tensor.set_data_from_numpy(texts)
    answer = client.infer(model, [tensor])
    labels = [label.decode() for label in answer.as_numpy("label")]
    assert labels == list(expected["label"])
    np.testing.assert_allclose(answer.as_numpy("score"), expected["score"], rtol=0, atol=1e-6)


def test_a_second_run_resumes_from_the_checkpoint(hf_result, coordinator, output_root):
    from trainwire.huggingface import HuggingFaceTrainer

    data = sentiment_data()
    resumed = HuggingFaceTrainer(
        trainer_init_per_worker,
        trainer_init_config=config(output_root, max_steps=MAX_STEPS + SAVE_STEPS),
        scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": data, "evaluation": data.iloc[:8]},
        resume_from_checkpoint=hf_result.checkpoint,
        run_config=RunConfig(name="hf-trainer-resumed", verbose=0),
    ).fit()
    # The Trainer's own state came back: it went on from step 4 rather than starting again.
    assert list(resumed.metrics_dataframe["step"]) == [5, 6]


@pytest.mark.parametrize(
    ("name", "datatype", "values", "says"),
    [
        ("text", "INT32", np.array([1, 2], dtype=np.int32), "datatype"),
        ("sentence", "BYTES", np.array([b"a great film"], dtype=np.object_), "sentence"),
    ],
)
def test_a_bad_text_tensor_is_invalid_argument(hf_result, predictor_address, name, datatype, values, says):
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(predictor_address)
    tensor = grpcclient.InferInput(name, list(values.shape), datatype)
    tensor.set_data_from_numpy(values)
    with pytest.raises(InferenceServerException) as info:
        client.infer(hf_result.name, [tensor])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert says in info.value.message()
