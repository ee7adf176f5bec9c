"""Digests of the files a stage reads: stable, and cheap on large weights.

Weights folders are digested cheaply and stably: every file's relative path and size, and the SHA-256 of its
content (of its first and last 4 MiB for files over 64 MiB), so a resume does not re-read a 16 GB model.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from sand_framework.errors import RunDirError

MISSING = "missing"
"""The digest of a file or folder that does not exist."""

WHOLE_FILE = 64 << 20
"""Files up to this size are hashed whole; larger ones by their first and last :data:`SAMPLE` bytes and size."""
SAMPLE = 4 << 20


def file_digest(path: str | os.PathLike) -> str:
    """``sha256:<hex>`` of a file (sampled above :data:`WHOLE_FILE`), or :data:`MISSING`."""
    path = Path(path)
    if not path.is_file():
        return MISSING
    h = hashlib.sha256()
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size <= WHOLE_FILE:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            else:
                h.update(f"sampled {size}\n".encode())
                h.update(f.read(SAMPLE))
                f.seek(size - SAMPLE)
                h.update(f.read(SAMPLE))
    except OSError as exc:
        raise RunDirError(f"cannot read {path} to check what the run was computed from: {exc.strerror or exc}; "
                          "make it readable and resume") from None
    return "sha256:" + h.hexdigest()


def tree_digest(path: str | os.PathLike) -> str:
    """A digest of a file or of every file under a folder (relative paths, sizes, contents), or :data:`MISSING`."""
    path = Path(path)
    if path.is_file():
        return file_digest(path)
    if not path.is_dir():
        return MISSING
    h = hashlib.sha256()
    for p in sorted(q for q in path.rglob("*") if q.is_file()):
        h.update(f"{p.relative_to(path).as_posix()}\0{p.stat().st_size}\0{file_digest(p)}\n".encode())
    return "tree:" + h.hexdigest()


TENSOR_FILES = ("*.safetensors", "pytorch_model*.bin", "adapter_model.bin")
"""The files of a weights folder that hold its tensors (what :func:`tensors_digest` reads)."""


def tensors_digest(path: str | os.PathLike) -> str:
    """A digest of a weights folder's tensor files only (:data:`TENSOR_FILES`), or :data:`MISSING` without any.

    Two trainings to the very same weights differ in the folder's other files: ``training_args.bin`` holds the
    output path, and PEFT writes ``adapter_config.json``'s ``target_modules`` in set order, which changes from
    one process to the next. :func:`tree_digest` (what a stage's fingerprint records) therefore differs between
    them; this one does not, so it tells whether two runs' weights are the same model."""
    path = Path(path)
    files = sorted({q for pattern in TENSOR_FILES for q in path.rglob(pattern) if q.is_file()}) if path.is_dir() else []
    if not files:
        return MISSING
    h = hashlib.sha256()
    for q in files:
        h.update(f"{q.relative_to(path).as_posix()}\0{file_digest(q)}\n".encode())
    return "tensors:" + h.hexdigest()
