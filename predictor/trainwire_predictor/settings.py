"""Predictor settings, read from ``TRAINWIRE_PREDICTOR_*`` environment variables."""

from __future__ import annotations

import os

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_store() -> str:
    return os.path.join(os.path.expanduser("~"), ".trainwire", "store")


class PredictorSettings(BaseSettings):
    """Settings of one predictor process."""

    model_config = SettingsConfigDict(env_prefix="TRAINWIRE_PREDICTOR_", protected_namespaces=())

    host: str = "127.0.0.1"
    # 8001 is the usual Open Inference Protocol gRPC port (Triton, KServe).
    port: int = 8001
    # The same protocol over REST (KServe v2 JSON, binary tensor data) on this port of ``host``,
    # same process, tokens and TLS; 8000 is the usual one. 0 picks a free port; unset: off.
    http_port: int | None = None
    # Shared store URI (file://, s3://) or a local path; the same the coordinator writes.
    store: str = default_store()
    # TLS: PEM paths of the server's certificate chain and key; with a client CA, mutual TLS.
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    # When set, inference calls need ``authorization: Bearer <auth_token>``; health and reflection stay open.
    auth_token: str = ""
    # Listen beyond loopback without auth_token (refused unless set).
    allow_unauthenticated: bool = False
    # Named tokens with scopes (trainwire_core.auth): a JSON object, or the path of a file holding one.
    tokens: str = ""
    # Prometheus metrics (nv_inference_*) over HTTP on this port of ``host``; 0: off.
    metrics_port: int = 0
    # The largest gRPC message and REST request body (a larger body is answered 413).
    max_message_bytes: int = 64 * 1024 * 1024
    # Loaded checkpoints kept in memory (least recently used dropped first).
    model_cache_size: int = 16
    # ... and at most this many bytes of them (their checkpoint files' sizes; 0: no limit). A
    # model with requests in flight is never dropped: the cache stays over budget until it is idle.
    model_cache_bytes: int = 0
    # Threads that run model compute off the event loop.
    worker_threads: int = 4
    # Predictor processes on the same ports (SO_REUSEPORT), each with its own event loop and model
    # cache, kept by a parent that restarts one that dies; metrics and statistics are summed over them.
    workers: int = Field(default=1, ge=1)
    # A model call measured to take at most this long for its rows (a compiled tree model on
    # small requests) runs on the event loop instead: shorter than the hand-off to a thread.
    # 0: every call goes to the threads.
    inline_budget_us: float = 200.0
    # Dynamic batching of models that are not batch invariant (Triton's dynamic_batching): a JSON
    # object naming models or frameworks, each {"max_batch_size": 64, "max_queue_delay_us": 200, "instances": 2,
    # "preferred_batch_sizes": [...]} or null (one call per request); each framework has a default.
    dynamic_batching: str = ""
    # How old a cached run index may get before it is read again.
    index_refresh_s: float = 1.0
    # Compile XGBoost and LightGBM models with Treelite + TL2cgen (cached beside the checkpoint);
    # off, or where compiling fails, the framework's own predict serves.
    compile_tree_models: bool = True
    # Shadow traffic (a model's traffic policy): copies scored at once (more are dropped and
    # counted), and the threads that score them apart from the served requests' threads.
    shadow_max_inflight: int = 32
    shadow_threads: int = 2
    # Language models' token generation (OIP generate, the OpenAI API, ModelStreamInfer): the most
    # new tokens a request may ask for, and the default when it names none.
    generate_max_tokens: int = 1024
    generate_default_max_tokens: int = 16
    # Sequences one model decodes together (continuous batching), and requests that may wait for a slot.
    generate_max_batch: int = 32
    generate_max_waiting: int = 1024
    # ... and requests of one tenant (a token's name; anonymous callers are one) that may wait for a
    # slot of one model; 0: only generate_max_waiting. Slots and the queue are shared by weighted
    # fair queueing over tenants (a token's "weight" in the tokens table; equal by default).
    generate_max_waiting_per_tenant: int = Field(default=0, ge=0)
    # Bytes of prompt prefixes' keys and values each language model keeps (16-token blocks, least
    # recently used out): a prompt that starts as one seen before prefills only its own tail. 0: off.
    generate_prefix_cache_bytes: int = Field(default=256 << 20, ge=0)
    # Bytes of LoRA adapters' matrices each base model keeps loaded (adapters saved alone, served on
    # their base; least recently used out, never one in use). 0: no adapters served.
    generate_lora_bytes: int = Field(default=256 << 20, ge=0)
    # The longest one generation runs; a request may ask for less (timeout_s, or its gRPC deadline).
    generate_timeout_s: float = 300.0
    # Torch threads of each model's decode thread; 0: all cores but one, which the event loop keeps
    # (on 2 cores, one decode thread beside the loop is 1.4x faster than two fighting it).
    generate_threads: int = Field(default=0, ge=0)
    # Pack the linear layers' float32 weights once for oneDNN's matrix products (a decode step of a
    # few rows runs about 2x faster); each layer keeps its own weight too, so they take twice the memory.
    generate_pack_weights: bool = True
    # The longest prompt, checked before any work on it: characters (a chat's contents together;
    # 0: 32 per position of the model's context), then tokens (0: the model's context).
    generate_max_prompt_chars: int = Field(default=0, ge=0)
    generate_max_prompt_tokens: int = Field(default=0, ge=0)
    # MLflow models (docs/serving/mlflow.md): the tracking server whose registered models serve as
    # ``mlflow:<name>`` (version: a number or an alias); "" : none.
    mlflow_uri: str = ""
    # Served names of MLflow models: a JSON object (or the path of a file holding one) of name ->
    # ``models:/name/3``, ``models:/name@alias``, ``runs:/<id>/<path>`` or a local model directory.
    mlflow_models: str = ""
    # Load the registry's pickled models (scikit-learn pickle/cloudpickle, LightGBM's scikit-learn
    # models, torch.save): only for a registry whose writers the operator trusts with code.
    mlflow_trust_pickles: bool = False
    # Load python_function models (their own code; implies mlflow_trust_pickles).
    mlflow_trust_code: bool = False
    # The model ``POST /invocations`` (MLflow's scoring protocol) answers for: a served name,
    # ``mlflow:<name>`` or a run name; "" : only ``/models/{name}/invocations``.
    mlflow_default_model: str = ""
    # A model repository directory served beside the store's runs (docs/serving/model-repository.md),
    # laid out as Triton's and MLServer's: a local directory or s3:// URI; "" : none.
    model_repository: str = ""
    # Load the model repository's scikit-learn pickles and joblib files: only for a repository
    # whose writers the operator trusts with code.
    model_repository_trust_pickles: bool = False
