"""GPU checks for a machine with at least one CUDA GPU: one line ``PASS name`` or ``FAIL name: why`` each.

Run by ``bench/gpu_check.sh`` (which gives each check its own process and time limit). Every check
uses trainwire's own paths as a user would: an embedded coordinator on a local Ray that sees the
GPUs, ``ScalingConfig(use_gpu=True)``, and the SDK's predictors.

    python bench/gpu_check.py ddp-nccl | xgboost-cuda | torch-predictor-gpu
"""

from __future__ import annotations

import sys


def ddp_nccl() -> str:
    """TorchTrainer on every GPU: DDP over nccl, an allreduce whose total every rank checks."""
    import torch

    import trainwire
    from trainwire import ScalingConfig, train
    from trainwire.torch import TorchTrainer

    def loop() -> None:
        import torch.distributed as dist

        rank, world = train.get_context().get_world_rank(), train.get_context().get_world_size()
        device = torch.device("cuda", train.get_context().get_local_rank() % torch.cuda.device_count())
        value = torch.tensor([float(rank + 1)], device=device)
        dist.all_reduce(value)
        train.report({"total": value.item(), "expected": world * (world + 1) / 2, "backend": dist.get_backend()})

    trainwire.init()
    try:
        gpus = torch.cuda.device_count()
        result = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=gpus, use_gpu=True)).fit()
    finally:
        trainwire.shutdown()
    m = result.metrics
    assert m["backend"] == "nccl" and m["total"] == m["expected"], m
    return f"{gpus} GPU(s), allreduce total {m['total']:g}"


def xgboost_cuda() -> str:
    """XGBoostTrainer with ``device=cuda``: the booster trains on the GPU and beats chance."""
    import numpy as np
    import pandas as pd

    import trainwire
    from trainwire import ScalingConfig
    from trainwire.xgboost import XGBoostTrainer

    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(4096, 8)), columns=[f"f{i}" for i in range(8)])
    df["y"] = (df.f0 + df.f1 > 0).astype(int)
    trainwire.init()
    try:
        result = XGBoostTrainer(
            params={"objective": "binary:logistic", "device": "cuda", "tree_method": "hist", "eval_metric": "error"},
            label_column="y",
            num_boost_round=20,
            datasets={"train": df},
            scaling_config=ScalingConfig(num_workers=1, use_gpu=True),
        ).fit()
    finally:
        trainwire.shutdown()
    error = result.metrics["train-error"]
    assert error < 0.1, result.metrics
    return f"train error {error:.3f}"


def torch_predictor_gpu() -> str:
    """TorchPredictor(use_gpu=True) scores on the GPU and agrees with the CPU within 1e-4."""
    import numpy as np
    import torch

    from trainwire.torch import TorchCheckpoint, TorchPredictor

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    checkpoint = TorchCheckpoint.from_model(model)
    x = np.random.default_rng(0).normal(size=(256, 16)).astype("float32")
    gpu = TorchPredictor.from_checkpoint(checkpoint, model=model, use_gpu=True)
    cpu = TorchPredictor.from_checkpoint(checkpoint, model=model)
    assert gpu.device.type == "cuda"
    got, want = gpu.predict(x), cpu.predict(x)
    got, want = (np.asarray(v["predictions"] if isinstance(v, dict) else v) for v in (got, want))
    assert np.allclose(got, want, atol=1e-4)
    return f"max difference {float(np.abs(got - want).max()):.2e}"


CHECKS = {"ddp-nccl": ddp_nccl, "xgboost-cuda": xgboost_cuda, "torch-predictor-gpu": torch_predictor_gpu}

if __name__ == "__main__":
    name = sys.argv[1]
    try:
        print(f"PASS {name}: {CHECKS[name]()}", flush=True)
    except Exception as exc:  # noqa: BLE001 - a check reports its failure and exits non-zero
        print(f"FAIL {name}: {type(exc).__name__}: {exc}", flush=True)
        sys.exit(1)
