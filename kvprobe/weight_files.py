"""Weight files on disk and what identifies them: the cache folder, file and state-dict hashes, GGUF files.

:func:`cache_dir` is where kvprobe keeps assembled GGUF files, dequantized weights and file hashes;
:func:`file_sha256` hashes a file once (cached by path, size and mtime); :func:`state_dict_sha256`
is a model's weight hash; :func:`is_gguf_file` / :func:`check_magic` recognise a GGUF file by its magic
bytes. Used by the model registry (``kvprobe.model_registry``) and the loaders (``kvprobe.loading``).

Example:
    >>> is_gguf_file("README.md")
    False
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from .files import atomic_write_text

GGUF_MAGIC = b"GGUF"


class NotAGGUFError(ValueError):
    """A file that was given as a model but does not start with the GGUF magic bytes."""

    def __init__(self, path: Path | str, magic: bytes = b""):
        self.path = Path(path)
        super().__init__(
            f"{str(path)!r} is not a GGUF file (its first bytes are {magic!r}, expected {GGUF_MAGIC!r})"
        )


def check_magic(path: Path) -> None:
    """Refuse ``path`` unless it starts with the GGUF magic bytes (:class:`NotAGGUFError`)."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise NotAGGUFError(path, magic)


def is_gguf_file(path: Path | str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def cache_dir() -> Path:
    """``$KVPROBE_CACHE`` if set, else ``~/.cache/kvprobe`` (not created here)."""
    env = os.environ.get("KVPROBE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kvprobe"


def _sha256_stream(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _hash_record(path: Path) -> tuple[Path, dict]:
    """Where ``cache_dir()/hashes`` keeps the sha256 of the file at ``path`` (resolved), and what identifies
    the file's bytes there (path, size, mtime)."""
    st = path.stat()
    key = hashlib.sha256(str(path).encode()).hexdigest()[:32]
    return cache_dir() / "hashes" / f"{key}.json", {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def remember_sha256(path: Path | str, digest: str) -> None:
    """Record ``digest`` as the sha256 of the file at ``path`` (one just hashed while written), so that
    :func:`file_sha256` does not read it again; a read-only cache is left alone."""
    record, ident = _hash_record(Path(path).resolve())
    try:
        atomic_write_text(record, json.dumps({**ident, "sha256": digest}))
    except OSError:  # read-only cache: still correct, just slower next time
        pass


def file_sha256(path: Path | str) -> str:
    """sha256 of a file's bytes, cached under ``cache_dir()/hashes`` by (path, size, mtime)."""
    path = Path(path).resolve()
    record, ident = _hash_record(path)
    try:
        data = json.loads(record.read_text())
        if all(data.get(k) == v for k, v in ident.items()) and len(data.get("sha256", "")) == 64:
            return data["sha256"]
    except (OSError, ValueError):
        pass
    digest = _sha256_stream(path)
    remember_sha256(path, digest)
    return digest


def state_dict_sha256(model: torch.nn.Module) -> str:
    """sha256 over (name, dtype, shape, bytes) of every tensor of ``model.state_dict()``."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
