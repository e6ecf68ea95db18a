"""MLflow models served as they are, against a real ``mlflow server``; MLflow's scoring protocol.

Models are logged and registered with MLflow's own API; answers are checked against
``mlflow.pyfunc.load_model(...).predict`` and ``/invocations`` against MLflow's own scoring
server code path (``mlflow.pyfunc.scoring_server.invocations``, in process).
"""

from __future__ import annotations

import json
import pathlib
import pickle
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pandas as pd
import pytest
from mlflow_server import mlflow_server

REFRESH_S = 0.5


# A predictor serving an MLflow registry starts per module.
pytestmark = pytest.mark.integration


def post(url: str, body: bytes, content_type: str = "application/json") -> tuple[int, Any]:
    request = urllib.request.Request(url, body, {"content-type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    x = pd.DataFrame(rng.normal(size=(120, 4)), columns=["a", "b", "c", "d"])
    return x


def label(x: pd.DataFrame) -> np.ndarray:
    return (x["a"] + 0.5 * x["b"] - x["c"] > 0).astype(int).to_numpy()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A registry with sklearn, xgboost and lightgbm models, and a predictor serving it over REST."""
    import lightgbm
    import mlflow
    import xgboost
    from sklearn.linear_model import LogisticRegression

    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    root = tmp_path_factory.mktemp("mlflow-models")
    x = frame()
    y = label(x)
    evil = _evil_model(root, root / "unpickled")
    with mlflow_server(root) as uri:
        mlflow.set_tracking_uri(uri)
        client = mlflow.MlflowClient(uri)
        common: dict[str, Any] = {"input_example": x.iloc[:2], "pip_requirements": []}  # no requirement inference
        with mlflow.start_run():
            mlflow.sklearn.log_model(LogisticRegression().fit(x, y), name="sk", registered_model_name="churn", **common)
            mlflow.sklearn.log_model(
                LogisticRegression(C=1e-3).fit(x, 1 - y), name="sk2", registered_model_name="churn", **common
            )
            mlflow.xgboost.log_model(
                xgboost.XGBClassifier(n_estimators=5, max_depth=2).fit(x, y),
                name="xgb",
                registered_model_name="xg",
                **common,
            )
            booster = lightgbm.train({"objective": "binary", "verbose": -1}, lightgbm.Dataset(x, y), 5)
            mlflow.lightgbm.log_model(booster, name="lgb", registered_model_name="lg", **common)
            mlflow.sklearn.log_model(
                LogisticRegression().fit(x, y),
                name="pk",
                registered_model_name="pickled",
                serialization_format="cloudpickle",
                **common,
            )
        client.set_registered_model_alias("churn", "champion", "1")
        thread = PredictorThread(
            PredictorSettings(
                port=0,
                http_port=0,
                store=str(root / "store"),
                index_refresh_s=REFRESH_S,
                mlflow_uri=uri,
                mlflow_models=json.dumps({"champion": "models:/churn@champion", "evil": str(evil)}),
                mlflow_default_model="champion",
            )
        )
        thread.start()
        try:
            yield f"http://{thread.server.http_address}", client, x, root
        finally:
            thread.stop()


def _evil_model(root: pathlib.Path, marker: pathlib.Path) -> pathlib.Path:
    """A local MLflow sklearn model whose pickle creates ``marker`` when unpickled."""

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    directory = root / "evil"
    directory.mkdir()
    (directory / "model.pkl").write_bytes(pickle.dumps(Evil()))
    (directory / "MLmodel").write_text(
        "flavors:\n  sklearn:\n    pickled_model: model.pkl\n    serialization_format: pickle\n"
        "  python_function:\n    loader_module: mlflow.sklearn\n    model_path: model.pkl\n"
    )
    return directory


def reference(uri: str, x: pd.DataFrame, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    """What MLflow's own pyfunc answers (MLflow gates its own skops and pickle loads behind a flag)."""
    import mlflow.pyfunc

    monkeypatch.setenv("MLFLOW_ALLOW_PICKLE_DESERIALIZATION", "true")
    return np.asarray(mlflow.pyfunc.load_model(uri).predict(x))


def oip_infer(http: str, model: str, version: str, x: pd.DataFrame) -> np.ndarray:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    inputs = [{"name": c, "datatype": "FP64", "shape": [len(x)], "data": x[c].tolist()} for c in x.columns]
    status, doc = post(http + path, json.dumps({"inputs": inputs}).encode())
    assert status == 200, doc
    return np.asarray(doc["outputs"][0]["data"])


@pytest.mark.parametrize(
    ("model", "version", "uri"),
    [
        ("mlflow:churn", "champion", "models:/churn@champion"),
        ("mlflow:churn", "2", "models:/churn/2"),
        ("mlflow:xg", "", "models:/xg/1"),
        ("mlflow:lg", "1", "models:/lg/1"),
    ],
)
def test_each_flavor_answers_as_mlflow_pyfunc(served, monkeypatch, model, version, uri):
    http, _, x, _ = served
    expected = reference(uri, x, monkeypatch)
    got = oip_infer(http, model, version, x)
    np.testing.assert_allclose(got, expected.ravel(), rtol=1e-6)


def test_signature_is_the_models_metadata(served):
    http, _, _, _ = served
    with urllib.request.urlopen(f"{http}/v2/models/mlflow:churn/versions/champion", timeout=60) as response:
        doc = json.loads(response.read())
    assert [(i["name"], i["datatype"]) for i in doc["inputs"]] == [(c, "FP64") for c in "abcd"]
    assert doc["versions"] == ["1", "2"]
    assert doc["platform"] == "sklearn"


def test_a_moved_alias_is_followed_within_the_refresh(served, monkeypatch):
    http, client, x, _ = served
    before = reference("models:/churn/1", x, monkeypatch)
    after = reference("models:/churn/2", x, monkeypatch)
    assert not np.array_equal(before, after)
    status, doc = post(f"{http}/invocations", json.dumps({"dataframe_split": x.to_dict(orient="split")}).encode())
    assert status == 200 and doc["predictions"] == before.tolist()
    client.set_registered_model_alias("churn", "champion", "2")
    try:
        moved = time.monotonic()
        while True:
            status, doc = post(
                f"{http}/models/champion/invocations", json.dumps({"instances": x.values.tolist()}).encode()
            )
            assert status == 200, doc
            if doc["predictions"] == after.tolist():
                break
            assert time.monotonic() - moved < REFRESH_S + 5, "the alias move was not followed"
            time.sleep(0.1)
    finally:
        client.set_registered_model_alias("churn", "champion", "1")


def test_invocations_answer_as_mlflow_models_serve(served, monkeypatch):
    """Each input format, against MLflow's own scoring server code path on the same body."""
    import mlflow.pyfunc
    from mlflow.pyfunc import scoring_server

    http, _, x, _ = served
    monkeypatch.setenv("MLFLOW_ALLOW_PICKLE_DESERIALIZATION", "true")
    model = mlflow.pyfunc.load_model("models:/xg/1")
    rows = x.iloc[:7]
    bodies = [
        ("application/json", {"dataframe_split": rows.to_dict(orient="split")}),
        ("application/json", {"dataframe_records": rows.to_dict(orient="records")}),
        ("application/json", {"instances": rows.to_dict(orient="records")}),
        ("application/json", {"inputs": {c: rows[c].tolist() for c in rows.columns}}),
        ("text/csv", None),
    ]
    for content_type, doc in bodies:
        body = rows.to_csv(index=False) if doc is None else json.dumps(doc)
        theirs = scoring_server.invocations(body, content_type, model, model.metadata.get_input_schema())
        assert theirs.status == 200, theirs.response
        status, ours = post(f"{http}/models/mlflow:xg/invocations", body.encode(), content_type)
        assert status == 200, ours
        assert ours == json.loads(theirs.response), content_type
    status, bad = post(f"{http}/models/mlflow:xg/invocations", b'{"instances": [], "inputs": []}')
    assert status == 400 and bad["error_code"] == "BAD_REQUEST"
    with urllib.request.urlopen(f"{http}/ping", timeout=10) as response:
        assert response.status == 200


def test_untrusted_pickles_never_unpickle(served):
    http, _, x, root = served
    for model in ("evil", "mlflow:pickled"):
        status, doc = post(f"{http}/models/{model}/invocations", json.dumps({"instances": x.values.tolist()}).encode())
        assert status == 400, doc
        assert "TRAINWIRE_PREDICTOR_MLFLOW_TRUST_PICKLES" in doc["message"]
    assert not (root / "unpickled").exists()


def test_pytorch_export_archives_load_and_torch_save_pickles_do_not(tmp_path, monkeypatch):
    """``pt2`` (MLflow 3's default) loads pickle-free and answers as MLflow's pyfunc; ``torch.save`` is refused."""
    import mlflow.pyfunc
    import mlflow.pytorch
    import torch

    from trainwire_core.errors import FailedPreconditionError
    from trainwire_predictor.mlflow_models import load_directory

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    x = frame().astype("float32")
    mlflow.pytorch.save_model(module, str(tmp_path / "pt2"), input_example=x.iloc[:2].to_numpy(), pip_requirements=[])
    framework, predictor = load_directory(tmp_path / "pt2", trust_pickles=False, trust_code=False)
    ours = predictor.predict_columns({c: x[c].to_numpy() for c in x.columns})["predictions"]
    monkeypatch.setenv("MLFLOW_ALLOW_PICKLE_DESERIALIZATION", "true")
    np.testing.assert_allclose(ours, np.asarray(mlflow.pyfunc.load_model(str(tmp_path / "pt2")).predict(x)).ravel())
    assert framework == "torch"
    mlflow.pytorch.save_model(module, str(tmp_path / "pickled"), serialization_format="pickle", pip_requirements=[])
    with pytest.raises(FailedPreconditionError, match="TRAINWIRE_PREDICTOR_MLFLOW_TRUST_PICKLES"):
        load_directory(tmp_path / "pickled", trust_pickles=False, trust_code=False)


def _tiny_tokenizer() -> Any:
    """A word-level tokenizer built in memory (no hub download)."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]", "[PAD]", "hello", "world", "the", "cat", "sat", "on", "mat", "a", "dog", "</s>"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", eos_token="</s>"
    )


def _save_pipelines(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """A text-generation (GPT-2 shaped) and a text-classification (BERT shaped) pipeline, tiny, from configs."""
    import mlflow.transformers
    import torch
    import transformers

    torch.manual_seed(0)
    tokenizer = _tiny_tokenizer()
    vocab = len(tokenizer.get_vocab())
    lm = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=vocab,
            n_embd=16,
            n_layer=1,
            n_head=2,
            n_positions=64,
            bos_token_id=11,
            eos_token_id=11,
            pad_token_id=1,
        )
    ).eval()
    lm.generation_config.do_sample = False  # greedy: answers comparable call to call
    lm.generation_config.max_new_tokens = 4
    classifier = transformers.BertForSequenceClassification(
        transformers.BertConfig(
            vocab_size=vocab,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            id2label={0: "neg", 1: "pos"},
            label2id={"neg": 0, "pos": 1},
        )
    ).eval()
    paths = {"gen": root / "gen", "cls": root / "cls"}
    for (name, task), model in zip(
        (("gen", "text-generation"), ("cls", "text-classification")), (lm, classifier), strict=True
    ):
        pipeline = transformers.pipeline(task, model=model, tokenizer=tokenizer)
        mlflow.transformers.save_model(pipeline, str(paths[name]), pip_requirements=[])
    return paths


def test_transformers_pipelines_answer_as_mlflow_pyfunc_over_oip_and_invocations(tmp_path):
    """Saved by mlflow.transformers, loaded from their safetensors and tokenizer files, texts in and out."""
    import mlflow.pyfunc
    from mlflow.pyfunc import scoring_server

    from trainwire_core.errors import FailedPreconditionError
    from trainwire_predictor.mlflow_models import TRANSFORMERS_PLATFORM, load_directory
    from trainwire_predictor.server import PredictorThread
    from trainwire_predictor.settings import PredictorSettings

    paths = _save_pipelines(tmp_path)
    texts = ["hello world", "the cat sat on a mat", "dog"]
    thread = PredictorThread(
        PredictorSettings(
            port=0,
            http_port=0,
            store=str(tmp_path / "store"),
            mlflow_models=json.dumps({name: str(path) for name, path in paths.items()}),
        )
    )
    thread.start()
    try:
        http = f"http://{thread.server.http_address}"
        for name, path in paths.items():
            reference = mlflow.pyfunc.load_model(str(path))
            expected = reference.predict(texts)
            with urllib.request.urlopen(f"{http}/v2/models/{name}", timeout=60) as response:
                metadata = json.loads(response.read())
            assert metadata["platform"] == TRANSFORMERS_PLATFORM
            [tensor] = metadata["inputs"]
            assert tensor["datatype"] == "BYTES"
            body = {"inputs": [{"name": tensor["name"], "datatype": "BYTES", "shape": [len(texts)], "data": texts}]}
            status, doc = post(f"{http}/v2/models/{name}/infer", json.dumps(body).encode())
            assert status == 200, doc
            outputs = {out["name"]: out for out in doc["outputs"]}
            if isinstance(expected, pd.DataFrame):  # text-classification: label and score columns
                assert outputs["label"]["datatype"] == "BYTES"
                assert outputs["label"]["data"] == expected["label"].tolist()
                np.testing.assert_allclose(outputs["score"]["data"], expected["score"], rtol=1e-6)
            else:  # text-generation: the generated texts
                assert outputs["predictions"]["datatype"] == "BYTES"
                assert outputs["predictions"]["data"] == list(expected)
                assert len(set(expected)) == len(texts)  # a model that answers, not one fixed string
            request = json.dumps({"inputs": texts})
            theirs = scoring_server.invocations(
                request, "application/json", reference, reference.metadata.get_input_schema()
            )
            assert theirs.status == 200, theirs.response
            status, ours = post(f"{http}/models/{name}/invocations", request.encode())
            assert status == 200, ours
            assert ours == json.loads(theirs.response), name
    finally:
        thread.stop()

    # A pipeline of the model's own code is refused unless the operator trusts the registry's code.
    mlmodel = paths["gen"] / "MLmodel"
    mlmodel.write_text(mlmodel.read_text().replace("pipeline_model_type: GPT2LMHeadModel", "pipeline_model_type: MyLM"))
    with pytest.raises(FailedPreconditionError, match="TRAINWIRE_PREDICTOR_MLFLOW_TRUST_CODE"):
        load_directory(paths["gen"], trust_pickles=False, trust_code=False)
