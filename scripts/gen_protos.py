"""Regenerates the committed gRPC stubs from protos/ (run: python scripts/gen_protos.py).

Use --check to fail when the committed stubs differ from what protos/ generates.

protoc writes each tree at its proto path (``trainwire/v1``, ``inference``), so the
descriptors keep their registered names; the modules are then placed in the core
distribution (``trainwire_core.v1``, ``trainwire_core.inference``) with their imports
rewritten to match.

The Open Inference Protocol stubs (``trainwire_core.inference``) are rewritten to build
their descriptors in a private pool (``trainwire_core/inference/_pool.py``) rather than
protobuf's default one, where tritonclient and others register their own
``inference.*`` messages: see that module for why.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]
PROTOS = ROOT / "protos"
OUT = ROOT / "core"
# Each proto tree, the package protoc generates it as, and the package it is placed in.
TREES = {
    "trainwire/v1": ("trainwire/v1", "trainwire_core/v1"),
    "inference": ("trainwire/inference", "trainwire_core/inference"),
}
# Packages whose _pb2 modules use a private descriptor pool, and the module that holds it.
PRIVATE_POOLS = {"trainwire_core/inference": "trainwire_core.inference._pool"}

# protoc's lines that touch the default pool, and what each becomes.
_BUILDER_IMPORT = "from google.protobuf.internal import builder as _builder\n"
_PRIVATE_REWRITES = {
    "DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile(": "DESCRIPTOR = _pool.AddSerializedFile(",
    "_builder.BuildTopDescriptorsAndMessages(": "_pool.BuildTopDescriptorsAndMessages(",
}


def use_private_pool(path: Path, pool_module: str) -> None:
    """Rewrites one generated _pb2.py to build its descriptors and classes in ``pool_module``'s pool."""
    text = path.read_text()
    package, _, name = pool_module.rpartition(".")
    edits = {_BUILDER_IMPORT: f"{_BUILDER_IMPORT}from {package} import {name} as _pool  # a private descriptor pool\n"}
    edits.update(_PRIVATE_REWRITES)
    for old, new in edits.items():
        if text.count(old) != 1:
            raise SystemExit(f"{path.name}: expected protoc's line {old.strip()!r} once; update gen_protos.py")
        text = text.replace(old, new)
    path.write_text(text)


def generate(out_dir: Path) -> list[Path]:
    """Generates every stub under out_dir; returns the generated paths (relative)."""
    include = str(Path(protoc.__file__).parent / "_proto")
    generated: list[Path] = []
    for src, (generated_as, package) in TREES.items():
        files = sorted((PROTOS / src).glob("*.proto"))
        if not files:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            # Map the tree onto the path it is generated as, so descriptor names stay as today.
            args = [
                "protoc",
                f"-I{include}",
                f"-I{generated_as}={PROTOS / src}",
                f"-I{PROTOS}",
                f"--python_out={tmp}",
                f"--pyi_out={tmp}",
                f"--grpc_python_out={tmp}",
            ] + [f"{generated_as}/{f.name}" for f in files]
            if protoc.main(args) != 0:
                raise SystemExit(f"protoc failed for {src}")
            (out_dir / package).mkdir(parents=True, exist_ok=True)
            old_module, new_module = generated_as.replace("/", "."), package.replace("/", ".")
            for path in sorted((Path(tmp) / generated_as).glob("*_pb2*.py*")):
                text = path.read_text()
                text = text.replace(f"from {old_module} import", f"from {new_module} import")
                # The module names protobuf records ('trainwire.v1.common_pb2'), not proto names.
                text = re.sub(rf"'{re.escape(old_module)}\.(\w+_pb2)'", rf"'{new_module}.\1'", text)
                (out_dir / package / path.name).write_text(text)
        if package in PRIVATE_POOLS:
            for f in files:
                use_private_pool(out_dir / package / f"{f.stem}_pb2.py", PRIVATE_POOLS[package])
        generated += sorted(p.relative_to(out_dir) for p in (out_dir / package).glob("*_pb2*.py*"))
    return generated


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if not args.check:
        generate(OUT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        drift = [
            str(rel)
            for rel in generate(Path(tmp))
            if not (OUT / rel).exists() or not filecmp.cmp(Path(tmp) / rel, OUT / rel, shallow=False)
        ]
    if drift:
        print("stubs differ from protos/; run python scripts/gen_protos.py:", *drift, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
