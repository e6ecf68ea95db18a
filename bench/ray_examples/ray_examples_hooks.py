"""What the examples runner changes in a Ray script: its imports (trainwire mode) and its downloads.

Loaded in every Python process of a run (the driver, Ray's workers, trainwire's workers) by the
``sitecustomize.py`` beside it, which the runner puts first on ``PYTHONPATH``; it does nothing
unless ``TRAINWIRE_RAY_EXAMPLES_DATA`` is set.

Imports are rewritten in the script's syntax tree (``rewrite_imports``), not aliased in
``sys.modules``: ``sys.modules`` is one table for the whole process, and both Ray's own libraries
(``ray.data``, ``ray.tune`` internals) and trainwire import the real ``ray.train`` / ``ray.tune``;
an alias would hand them trainwire's modules. Rewriting the script's own code (and the example
helper modules it imports, ``ray.{train,tune}.examples.*``) changes what the user wrote and
nothing else. Line numbers are kept, so tracebacks point at Ray's source.

Downloads are replaced by local data of the same shape: torchvision's MNIST / FashionMNIST /
CIFAR datasets, Keras' ``mnist`` / ``fashion_mnist`` / ``cifar10`` ``load_data``, and
``ray.data.read_*`` and ``pandas.read_*`` of ``s3://[anonymous@]<bucket>/...`` for Ray's example
buckets (``air-example-data``, ``ray-example-data``: files the runner writes).
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

DATA_ENV = "TRAINWIRE_RAY_EXAMPLES_DATA"
MODE_ENV = "TRAINWIRE_RAY_EXAMPLES_MODE"
SCRIPT_DIR_ENV = "TRAINWIRE_RAY_EXAMPLES_SCRIPT_DIR"
MAPPED = ("train", "tune", "air")  # ray.<name> -> trainwire.<name>
MAPPED_FUNCTIONS = ("init", "shutdown")  # ray.<name>() -> trainwire.<name>()
EXAMPLE_BUCKETS = ("air-example-data", "ray-example-data")  # Ray's public buckets of example data
FAKE_SIZES = {"train": 1024, "test": 256}


# --- the import rewrite -------------------------------------------------------------------


def map_module(name: str) -> str | None:
    """The trainwire module for a Ray module name, or None to keep Ray's.

    ``ray.train.torch`` -> ``trainwire.train.torch``; Ray's example helper packages
    (``ray.tune.examples.*``) stay Ray's (they are loaded rewritten, see ``ExampleModuleFinder``).
    """
    parts = name.split(".")
    if len(parts) < 2 or parts[0] != "ray" or parts[1] not in MAPPED:
        return None
    if len(parts) >= 3 and parts[2] == "examples":
        return None
    return "trainwire." + ".".join(parts[1:])


class _RayToTrainwire(ast.NodeTransformer):
    def visit_Import(self, node: ast.Import) -> Any:
        out: list[ast.stmt] = []
        for alias in node.names:
            target = map_module(alias.name)
            if target is None:
                out.append(ast.Import(names=[alias]))
            elif alias.asname:
                out.append(ast.Import(names=[ast.alias(name=target, asname=alias.asname)]))
            else:
                # ``import ray.train`` binds ``ray``; keep that name, and ``ray.train.x`` uses
                # are rewritten to ``trainwire.train.x`` by visit_Attribute.
                out.append(ast.Import(names=[ast.alias(name="ray")]))
                out.append(ast.Import(names=[ast.alias(name=target)]))
        return [ast.copy_location(stmt, node) for stmt in out]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
        if node.level or not node.module:
            return node
        target = map_module(node.module)
        if target is not None:
            node.module = target
            return node
        if node.module != "ray":
            return node
        moved = [a for a in node.names if a.name in MAPPED or a.name in MAPPED_FUNCTIONS]
        kept = [a for a in node.names if a not in moved]
        out: list[ast.stmt] = []
        if moved:
            out.append(ast.ImportFrom(module="trainwire", names=moved, level=0))
        if kept:
            out.append(ast.ImportFrom(module="ray", names=kept, level=0))
        return [ast.copy_location(stmt, node) for stmt in out]

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        self.generic_visit(node)
        value = node.value
        if isinstance(value, ast.Name) and value.id == "ray" and (node.attr in MAPPED or node.attr in MAPPED_FUNCTIONS):
            node.value = ast.copy_location(ast.Name(id="trainwire", ctx=ast.Load()), value)
        return node


def rewrite_imports(tree: ast.Module) -> ast.Module:
    """Rewrite a module's Ray Train / Tune / AIR imports and ``ray.init``/``ray.shutdown`` calls."""
    tree = _RayToTrainwire().visit(tree)
    # ``import trainwire`` after the docstring and ``from __future__`` imports, so that
    # rewritten ``trainwire.x`` attribute uses always resolve.
    at = 0
    for at, stmt in enumerate(tree.body):  # noqa: B007 - the index is used after the loop
        is_doc = isinstance(stmt, ast.Expr) and isinstance(getattr(stmt, "value", None), ast.Constant)
        is_future = isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"
        if not (is_doc or is_future):
            break
    else:
        at = len(tree.body)
    tree.body.insert(at, ast.Import(names=[ast.alias(name="trainwire")]))
    return ast.fix_missing_locations(tree)


def compile_rewritten(source: bytes | str, path: str) -> Any:
    """Compile a Ray script's source with its imports rewritten, keeping its file name and lines."""
    return compile(rewrite_imports(ast.parse(source, filename=path)), path, "exec", dont_inherit=True)


class _RewritingLoader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname: str) -> Any:
        # Always from source: a cached .pyc holds Ray's unrewritten code.
        path = self.get_filename(fullname)
        return compile_rewritten(self.get_data(path), path)


class ExampleModuleFinder(importlib.abc.MetaPathFinder):
    """Loads Ray's example helper modules (``ray.{train,tune}.examples.*``) with the same rewrite."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        parts = fullname.split(".")
        if len(parts) < 4 or parts[0] != "ray" or parts[1] not in ("train", "tune") or parts[2] != "examples":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        spec.loader = _RewritingLoader(fullname, spec.origin)
        return spec


# --- local data for downloads ---------------------------------------------------------------


def _rng(seed: int) -> Any:
    import numpy as np

    return np.random.default_rng(seed)


def fake_images(split: str, shape: tuple[int, ...], seed: int) -> tuple[Any, Any]:
    """Random uint8 images and labels 0..9 of a dataset's shape (deterministic per split)."""
    n = FAKE_SIZES["train" if split == "train" else "test"]
    rng = _rng(seed + (0 if split == "train" else 1))
    return rng.integers(0, 256, size=(n, *shape), dtype="uint8"), rng.integers(0, 10, size=n, dtype="int64")


def _patch_torchvision(module: Any) -> None:
    import torch

    def mnist_like(base: type, seed: int) -> type:
        class Local(base):  # type: ignore[misc, valid-type]
            def __init__(
                self,
                root: Any,
                train: bool = True,
                transform: Any = None,
                target_transform: Any = None,
                download: bool = False,
            ) -> None:
                # VisionDataset's constructor only stores these; the base's would download.
                module.VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
                self.train = train
                images, labels = fake_images("train" if train else "test", (28, 28), seed)
                self.data, self.targets = torch.from_numpy(images), torch.from_numpy(labels)

        Local.__name__ = Local.__qualname__ = base.__name__
        return Local

    def cifar_like(base: type, seed: int, classes: int) -> type:
        class Local(base):  # type: ignore[misc, valid-type]
            def __init__(
                self,
                root: Any,
                train: bool = True,
                transform: Any = None,
                target_transform: Any = None,
                download: bool = False,
            ) -> None:
                module.VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
                self.train = train
                images, labels = fake_images("train" if train else "test", (32, 32, 3), seed)
                self.data, self.targets = images, [int(v) % classes for v in labels]
                self.classes = [f"class{i}" for i in range(classes)]
                self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

        Local.__name__ = Local.__qualname__ = base.__name__
        return Local

    for index, name in enumerate(("MNIST", "FashionMNIST", "KMNIST")):
        if hasattr(module, name):
            setattr(module, name, mnist_like(getattr(module, name), 10 + index))
    if hasattr(module, "CIFAR10"):
        module.CIFAR10 = cifar_like(module.CIFAR10, 20, 10)
    if hasattr(module, "CIFAR100"):
        module.CIFAR100 = cifar_like(module.CIFAR100, 21, 100)


def _keras_loader(shape: tuple[int, ...], seed: int) -> Callable[..., Any]:
    def load_data(*args: Any, **kwargs: Any) -> Any:
        x_train, y_train = fake_images("train", shape, seed)
        x_test, y_test = fake_images("test", shape, seed)
        if len(shape) == 3:  # Keras' CIFAR labels are (n, 1)
            y_train, y_test = y_train.reshape(-1, 1), y_test.reshape(-1, 1)
        return (x_train, y_train.astype("uint8")), (x_test, y_test.astype("uint8"))

    return load_data


def _patch_keras_dataset(shape: tuple[int, ...], seed: int) -> Callable[[Any], None]:
    def patch(module: Any) -> None:
        module.load_data = _keras_loader(shape, seed)

    return patch


def local_path(path: Any, data_dir: str) -> Any:
    """``s3://[anonymous@]<bucket>/<key>`` -> ``<data_dir>/<bucket>/<key>`` when present.

    Only Ray's example buckets are mapped, and only to files the runner wrote: any other path
    goes to the reader as given.
    """
    if isinstance(path, (list, tuple)):
        return type(path)(local_path(p, data_dir) for p in path)
    if isinstance(path, str) and path.startswith("s3://"):
        bucket, _, key = path[len("s3://") :].removeprefix("anonymous@").partition("/")
        if bucket in EXAMPLE_BUCKETS:
            local = os.path.join(data_dir, bucket, key)
            if os.path.exists(local):
                return local
    return path


def _patch_ray_data(module: Any) -> None:
    data_dir = os.environ[DATA_ENV]
    for name in dir(module):
        if not name.startswith("read_"):
            continue
        original = getattr(module, name)
        if not callable(original):
            continue

        def wrapper(paths: Any = None, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if paths is None:
                return _original(*args, **kwargs)
            return _original(local_path(paths, data_dir), *args, **kwargs)

        wrapper.__name__ = name
        wrapper.__doc__ = original.__doc__
        setattr(module, name, wrapper)


PANDAS_READERS = ("read_csv", "read_parquet", "read_json", "read_table")


def _patch_pandas(module: Any) -> None:
    # pandas reads s3:// through s3fs (not installed, and no network here): the same local copies.
    data_dir = os.environ[DATA_ENV]
    for name in PANDAS_READERS:
        original = getattr(module, name, None)
        if original is None:
            continue

        def wrapper(path: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            return _original(local_path(path, data_dir), *args, **kwargs)

        wrapper.__name__ = name
        wrapper.__doc__ = original.__doc__
        setattr(module, name, wrapper)


POST_IMPORT: dict[str, Callable[[Any], None]] = {
    "torchvision.datasets": _patch_torchvision,
    "ray.data": _patch_ray_data,
    "pandas": _patch_pandas,
    "keras.src.datasets.mnist": _patch_keras_dataset((28, 28), 30),
    "keras.src.datasets.fashion_mnist": _patch_keras_dataset((28, 28), 31),
    "keras.src.datasets.cifar10": _patch_keras_dataset((32, 32, 3), 32),
    "tf_keras.src.datasets.mnist": _patch_keras_dataset((28, 28), 30),
    "tf_keras.src.datasets.fashion_mnist": _patch_keras_dataset((28, 28), 31),
    "tf_keras.src.datasets.cifar10": _patch_keras_dataset((32, 32, 3), 32),
}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, patch: Callable[[Any], None]) -> None:
        self._loader = loader
        self._patch = patch

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        self._patch(module)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Patches a module right after it first runs (downloads -> local data)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        patch = POST_IMPORT.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def install() -> None:
    """Install the data hooks (both modes) and the example-module rewrite (trainwire mode).

    The script's own folder goes last on ``sys.path`` (the runner starts Python with
    ``PYTHONSAFEPATH``, so not first): its sibling files stay importable, but never hide an
    installed package. Ray's doc_code folder has a ``torchmetrics.py``, which ``import
    torchmetrics`` in its neighbours would otherwise run as the library.
    """
    if not os.environ.get(DATA_ENV):
        return
    script_dir = os.environ.get(SCRIPT_DIR_ENV)
    if script_dir and script_dir not in sys.path:
        sys.path.append(script_dir)
    if not any(isinstance(f, PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, PostImportFinder())
    if os.environ.get(MODE_ENV) == "trainwire" and not any(isinstance(f, ExampleModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, ExampleModuleFinder())
