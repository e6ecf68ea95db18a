"""Helpers for torch training loops, as in ``ray.train.torch``."""

from __future__ import annotations

from typing import Any


def get_device() -> Any:
    """The device of this worker: its GPU when one is assigned, else the CPU."""
    import torch

    from trainwire import train

    if torch.cuda.is_available():
        return torch.device("cuda", train.get_context().get_local_rank() % torch.cuda.device_count())
    return torch.device("cpu")


def prepare_model(
    model: Any,
    move_to_device: Any = True,
    parallel_strategy: str | None = "ddp",
    parallel_strategy_kwargs: dict[str, Any] | None = None,
) -> Any:
    """Moves the model to this worker's device and wraps it for data parallelism, as Ray's.

    Args:
        model: A ``torch.nn.Module``.
        move_to_device: True for this worker's device (``get_device()``), a ``torch.device``
            for that one, False to leave the model where it is.
        parallel_strategy: ``"ddp"`` (DistributedDataParallel), ``"fsdp"``
            (FullyShardedDataParallel, GPUs only) or None; only with more than one worker.
        parallel_strategy_kwargs: Passed to the wrapper's constructor (on a GPU, DDP's
            ``device_ids`` / ``output_device`` default to the worker's device).

    Raises:
        ValueError: An unknown ``parallel_strategy``.
        RuntimeError: ``"fsdp"`` without a GPU.
    """
    import torch

    if parallel_strategy not in ("ddp", "fsdp", None):
        raise ValueError(f"parallel_strategy must be 'ddp', 'fsdp' or None, got {parallel_strategy!r}")
    kwargs = dict(parallel_strategy_kwargs or {})
    device = move_to_device if isinstance(move_to_device, torch.device) else get_device()
    if move_to_device:
        model = model.to(device)
    distributed = torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
    if not parallel_strategy or not distributed:
        return model
    if parallel_strategy == "fsdp":
        if not torch.cuda.is_available():
            raise RuntimeError("FSDP is only available with GPU training: set use_gpu=True in the ScalingConfig")
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(model, **kwargs)
    from torch.nn.parallel import DistributedDataParallel

    if device.type == "cuda":
        kwargs = {"device_ids": [device], "output_device": device, **kwargs}
    return DistributedDataParallel(model, **kwargs)


def prepare_data_loader(data_loader: Any, add_dist_sampler: bool = True, move_to_device: bool = True) -> Any:
    """Gives each worker its own part of the data (a DistributedSampler), batches on its device."""
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

    if add_dist_sampler and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        if not isinstance(data_loader.dataset, IterableDataset):
            shuffle = isinstance(data_loader.sampler, RandomSampler)
            data_loader = DataLoader(
                data_loader.dataset,
                batch_size=data_loader.batch_size,
                sampler=DistributedSampler(data_loader.dataset, shuffle=shuffle),
                num_workers=data_loader.num_workers,
                collate_fn=data_loader.collate_fn,
                pin_memory=data_loader.pin_memory,
                drop_last=data_loader.drop_last,
            )
    if not move_to_device:
        return data_loader
    device = get_device()
    return _DeviceLoader(data_loader, device) if device.type != "cpu" else data_loader


class _DeviceLoader:
    def __init__(self, loader: Any, device: Any) -> None:
        self.loader, self.device = loader, device

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):  # noqa: ANN204
        for batch in self.loader:
            if isinstance(batch, list | tuple):
                yield type(batch)(b.to(self.device) for b in batch)
            else:
                yield batch.to(self.device)


def get_devices() -> list[Any]:
    """This worker's devices: its GPU when one is assigned, else ``[cpu]`` (Ray's ``get_devices``)."""
    return [get_device()]


# Ray 2.60 deprecated its own mixed-precision helpers: they raise, pointing to torch's AMP.
_AMP_DEPRECATION = (
    "The `accelerate`, `backward`, and `prepare_optimizer` utility methods in the `ray.train.torch` "
    "module are deprecated (as in Ray 2.60, whose API trainwire follows). Please use the native "
    "PyTorch mixed precision API directly (torch.autocast, torch.amp.GradScaler), or a library "
    "such as Lightning or HuggingFace Transformers/Accelerate."
)


def accelerate(amp: bool = False) -> None:
    """Deprecated in Ray: raises ``DeprecationWarning``, as Ray 2.60's does."""
    raise DeprecationWarning(_AMP_DEPRECATION)


def prepare_optimizer(optimizer: Any) -> Any:
    """Deprecated in Ray: raises ``DeprecationWarning``, as Ray 2.60's does."""
    raise DeprecationWarning(_AMP_DEPRECATION)


def backward(tensor: Any) -> None:
    """Deprecated in Ray: raises ``DeprecationWarning``, as Ray 2.60's does."""
    raise DeprecationWarning(_AMP_DEPRECATION)


def enable_reproducibility(seed: int = 0) -> None:
    """Limits nondeterminism, as Ray's: seeds torch, ``random`` and NumPy; deterministic algorithms.

    Also turns off cuDNN benchmarking and sets ``CUBLAS_WORKSPACE_CONFIG`` (deterministic
    CUDA matmuls need it). Results can still differ across machines and library versions.

    Args:
        seed: The seed for every library.
    """
    import os
    import random

    import numpy as np
    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
