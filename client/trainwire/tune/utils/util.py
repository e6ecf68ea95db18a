"""``ray.tune.utils.util``'s diagnostics: ``diagnose_serialization``, ``validate_save_restore``,
``wait_for_gpu`` and ``UtilMonitor``, as Ray's.

Where Ray reaches for its cluster (its serializer, actors, ``ray.get_gpu_ids()``) trainwire does what
its own search does: a trainable is pickled as a search ships it (:func:`pickle_by_value`), a
Trainable class is checked in this process, and a trial's GPUs are those ``CUDA_VISIBLE_DEVICES``
names. GPUtil (for the GPU parts) and psutil (for CPU and RAM) are optional, as in Ray.
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["UtilMonitor", "diagnose_serialization", "validate_save_restore", "wait_for_gpu"]

logger = logging.getLogger(__name__)

# Ray's result key for the iteration count (ray.air.constants.TRAINING_ITERATION).
TRAINING_ITERATION = "training_iteration"


def _import_gputil() -> Any:
    """The GPUtil module, or None when it is not installed (as Ray's)."""
    try:
        import GPUtil
    except ImportError:
        return None
    return GPUtil


def _import_psutil() -> Any:
    """The psutil module, or None: the client does not require it."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil


class UtilMonitor(threading.Thread):
    """Samples CPU, RAM and each GPU's load and memory every ``delay`` seconds in a daemon thread.

    ``get_data()`` returns the means since the last call under ``"perf"``: ``cpu_util_percent``,
    ``ram_util_percent`` (psutil) and ``gpu_util_percent<id>``, ``vram_util_percent<id>`` (GPUtil).

    Args:
        start: Start sampling now.
        delay: Seconds between samples.
    """

    def __init__(self, start: bool = True, delay: float = 0.7) -> None:
        self.stopped = True
        self.GPUtil = _import_gputil()
        self._psutil = _import_psutil()
        if self.GPUtil is None and start:
            logger.warning("Install gputil for GPU system monitoring.")
        if self._psutil is None and start:
            logger.warning("Install psutil to monitor system performance.")
        if self.GPUtil is None and self._psutil is None:
            # As Ray's: nothing to sample, so no thread (get_data() returns {}).
            return
        super().__init__()
        self.delay = delay
        self.values: defaultdict[str, list[float]] = defaultdict(list)
        self.lock = threading.Lock()
        self.daemon = True
        if start:
            self.start()

    def _read_utilization(self) -> None:
        with self.lock:
            if self._psutil is not None:
                self.values["cpu_util_percent"].append(float(self._psutil.cpu_percent(interval=None)))
                self.values["ram_util_percent"].append(float(self._psutil.virtual_memory().percent))
            if self.GPUtil is not None:
                gpu_list = []
                try:
                    gpu_list = self.GPUtil.getGPUs()
                except Exception:
                    logger.debug("GPUtil failed to retrieve GPUs.")
                for gpu in gpu_list:
                    self.values["gpu_util_percent" + str(gpu.id)].append(float(gpu.load))
                    self.values["vram_util_percent" + str(gpu.id)].append(float(gpu.memoryUtil))

    def get_data(self) -> dict[str, Any]:
        """The means of the samples since the last call, as ``{"perf": {...}}`` ({} when stopped)."""
        if self.stopped:
            return {}
        with self.lock:
            ret_values = copy.deepcopy(self.values)
            for val in self.values.values():
                del val[:]
        return {"perf": {k: np.mean(v) for k, v in ret_values.items() if len(v) > 0}}

    def run(self) -> None:
        """Samples until ``stop()``."""
        self.stopped = False
        while not self.stopped:
            self._read_utilization()
            time.sleep(self.delay)

    def stop(self) -> None:
        """Ends the sampling (the thread exits after its current sleep)."""
        self.stopped = True


def _check_serializability(key: str, value: Any, module_names: set[str | None]) -> None:
    """Pickles ``value`` as a search ships the trainable that names it (Ray's registry check)."""
    from trainwire.runtime_env import pickle_by_value

    pickle_by_value(value, module_names)


def diagnose_serialization(trainable: Callable) -> bool | set[str]:
    """Finds why a function trainable does not pickle, printing each name it closes over, as Ray's.

    The trainable is pickled as a search sends it (cloudpickle, the caller's own modules by value);
    when that fails, each global and nonlocal it uses is pickled on its own.

    Args:
        trainable: The function given to ``tune.Tuner``.

    Returns:
        True when it pickles, else the set of names that do not (empty when none alone fails).
    """
    own_module = {getattr(trainable, "__module__", None)}

    def check_variables(objects: dict[str, Any], failure_set: set[str], printer: Callable[[str], None]) -> None:
        for var_name, variable in objects.items():
            msg = None
            try:
                _check_serializability(var_name, variable, own_module)
                status = "PASSED"
            except Exception as e:
                status = "FAILED"
                msg = f"{e.__class__.__name__}: {str(e)}"
                failure_set.add(var_name)
            # Ray's line, stray quote included.
            printer(f"{str(variable)}[name='{var_name}'']... {status}")
            if msg:
                printer(msg)

    print(f"Trying to serialize {trainable}...")
    try:
        _check_serializability("__test:" + str(trainable), trainable, own_module)
        print("Serialization succeeded!")
        return True
    except Exception as e:
        print(f"Serialization failed: {e}")

    print(f"Inspecting the scope of the trainable by running `inspect.getclosurevars({str(trainable)})`...")
    closure = inspect.getclosurevars(trainable)
    failure_set: set[str] = set()
    if closure.globals:
        print(f"Detected {len(closure.globals)} global variables. Checking serializability...")
        check_variables(dict(closure.globals), failure_set, lambda s: print("   " + s))
    if closure.nonlocals:
        print(f"Detected {len(closure.nonlocals)} nonlocal variables. Checking serializability...")
        check_variables(dict(closure.nonlocals), failure_set, lambda s: print("   " + s))

    if not failure_set:
        print(
            "Nothing was found to have failed the diagnostic test, though "
            "serialization did not succeed. Feel free to raise an "
            "issue on github."
        )
    else:
        print(
            f"Variable(s) {failure_set} was found to be non-serializable. "
            "Consider either removing the instantiation/imports "
            "of these objects or moving them into the scope of "
            "the trainable. "
        )
    return failure_set


def _visible_gpu_ids() -> list[str]:
    """The trial's GPUs: what ``CUDA_VISIBLE_DEVICES`` names (Ray sets it from ``ray.get_gpu_ids()``)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "NoDevFiles"]


def wait_for_gpu(
    gpu_id: int | str | None = None,
    target_util: float = 0.01,
    retry: int = 20,
    delay_s: int = 5,
    gpu_memory_limit: float | None = None,
) -> bool:
    """Waits until a GPU's memory use is at most ``target_util``, as Ray's; needs GPUtil.

    Args:
        gpu_id: The GPU's ordinal id or UUID (default: the first GPU ``CUDA_VISIBLE_DEVICES`` names).
        target_util: The memory fraction to wait for (0: wait until the GPU is free).
        retry: How many times to check, ``delay_s`` seconds apart.
        delay_s: Seconds between checks.
        gpu_memory_limit: Deprecated, unused (as in Ray).

    Returns:
        True once the GPU is free enough.

    Raises:
        RuntimeError: GPUtil is not installed, no GPU is given or visible, or the GPU stays busy.
        ValueError: ``gpu_id`` is of another type, or no GPU has that id.
    """
    GPUtil = _import_gputil()
    if GPUtil is None:
        raise RuntimeError("GPUtil must be installed if calling `wait_for_gpu`.")

    if gpu_id is None:
        gpu_id_list = _visible_gpu_ids()
        if not gpu_id_list:
            raise RuntimeError(
                "No GPU ids found from `CUDA_VISIBLE_DEVICES` (Ray: `ray.get_gpu_ids()`). "
                "Did you set Tune resources correctly?"
            )
        gpu_id = gpu_id_list[0]

    gpu_attr = "id"
    if isinstance(gpu_id, str):
        if gpu_id.isdigit():
            gpu_id = int(gpu_id)
        else:
            # Not an ordinal: a UUID such as 'GPU-04546190-b68d-65ac-101b-035f8faed77d'.
            gpu_attr = "uuid"
    elif not isinstance(gpu_id, int):
        raise ValueError(f"gpu_id ({type(gpu_id)}) must be type str/int.")

    def gpu_id_fn(g: Any) -> Any:
        return getattr(g, gpu_attr)

    gpu_ids = {gpu_id_fn(g) for g in GPUtil.getGPUs()}
    if gpu_id not in gpu_ids:
        raise ValueError(
            f"{gpu_id} not found in set of available GPUs: {gpu_ids}. "
            "`wait_for_gpu` takes either GPU ordinal ID (e.g., '0') or "
            "UUID (e.g., 'GPU-04546190-b68d-65ac-101b-035f8faed77d')."
        )

    for _ in range(int(retry)):
        gpu_object = next(g for g in GPUtil.getGPUs() if gpu_id_fn(g) == gpu_id)
        if gpu_object.memoryUtil > target_util:
            logger.info(f"Waiting for GPU util to reach {target_util}. Util: {gpu_object.memoryUtil:0.3f}")
            time.sleep(delay_s)
        else:
            return True
    raise RuntimeError("GPU memory was not freed.")


def validate_save_restore(trainable_cls: type, config: dict | None = None, num_gpus: int = 0) -> bool:
    """Checks that a Trainable class resumes where it saved, as Ray's.

    Two instances are built in this process (Ray builds two actors): the first trains three
    iterations and saves; the second restores that checkpoint and must report iterations 4 and 5.

    Args:
        trainable_cls: The ``tune.Trainable`` subclass.
        config: The config both instances get.
        num_gpus: Accepted for Ray's signature (Ray's actors' GPUs; here the instances use this process).

    Returns:
        True when the round trip resumes.

    Raises:
        AssertionError: A result lacks ``training_iteration``, or the restored one does not carry on.
    """
    trainable_1 = trainable_cls(config=config)
    trainable_2 = trainable_cls(config=config)
    try:
        for _ in range(3):
            res = trainable_1.train()
        assert res.get(TRAINING_ITERATION), (
            "Validation will not pass because it requires `training_iteration` to be returned."
        )
        with tempfile.TemporaryDirectory(prefix="validate-save-restore-") as checkpoint_dir:
            trainable_2.restore(trainable_1.save(checkpoint_dir))
        res = trainable_2.train()
        assert res[TRAINING_ITERATION] == 4
        res = trainable_2.train()
        assert res[TRAINING_ITERATION] == 5
    finally:
        trainable_1.stop()
        trainable_2.stop()
    return True
