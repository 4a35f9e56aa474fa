"""The architecture inventory: what each model kvprobe can load caches per token, and how large it is.

The paper's architecture audit (section "Model Architectures and Inference Protocols", L1247-1292)
lists per checkpoint the layer count L, hidden width, query-to-KV heads, key/value head dimensions,
the runtime-exposed K/V elements per token S_KV = sum over layers of h_KV (d_K + d_V), and the
parameters, "counting tied input/output embedding weights once; sparse checkpoints report
total/active parameters". :func:`inventory` gives one :class:`InventoryRow` per model from its config
alone: the architecture adapters (:class:`kvprobe.arch.ArchSummary`) give the cached shapes, and the
model is instantiated on the ``meta`` device to count parameters, so no weights are read or allocated.

* S_KV counts the tensors a layer caches itself; a layer that attends to another layer's rows (Gemma 4
  KV sharing) adds nothing, a recurrent layer (Gated DeltaNet) caches no rows. Sliding-window layers
  count in full: transformers keeps every token's K/V for them (paper L3995-3998). MLA counts the
  tensors transformers exposes, not a compressed latent (L1259-1263).
* Active parameters of a mixture-of-experts model: every parameter outside the routed experts, plus
  ``top_k / n_experts`` of the routed experts' (shared experts always count). Our rule: the paper
  takes the model cards' approximation.

Example::

    from kvprobe.tools.inventory import inventory, format_table
    print(format_table(inventory(["tiny-llama", "tiny-qwen3-moe"])))
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import torch

from kvprobe.arch import ArchSummary, arch_summary
from kvprobe.arch.summary import OWN_KV

__all__ = ["InventoryRow", "attention_kind", "count_parameters", "default_models", "format_table", "inventory",
           "model_config", "row_from_config"]

#: Config fields naming the routed experts and how many each token uses, by family.
_EXPERTS = ("num_experts", "n_routed_experts", "num_local_experts")
_TOP_K = ("num_experts_per_tok", "top_k_experts", "moe_top_k")


@dataclass(frozen=True)
class InventoryRow:
    """One model of the inventory.

    Attributes:
        name: the name kvprobe loads it by.
        model_type: the config's ``model_type``.
        attention: ``GQA``, ``MQA``, ``MHA`` or ``MLA``, with the layer kinds (``30 full``).
        layers: decoder layers (L).
        hidden: hidden width (d_model).
        heads: query heads : KV heads of the caching layers (``9:3``; several when layers differ).
        head_dims: d_K/d_V of the cached tensors (``64/64``; several when layers differ).
        kv_elements_per_token: S_KV, the runtime-exposed K/V elements per token.
        kv_bytes_per_token_bf16: S_KV x 2 bytes.
        parameters: independent parameters (tied embeddings once).
        active_parameters: for routed-expert models, the parameters one token uses; None for dense ones.
        tied_embeddings: whether the output layer reuses the input embedding.
    """

    name: str
    model_type: str
    attention: str
    layers: int
    hidden: int
    heads: str
    head_dims: str
    kv_elements_per_token: int
    kv_bytes_per_token_bf16: int
    parameters: int
    active_parameters: int | None
    tied_embeddings: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_models() -> list[str]:
    """Every model kvprobe names: the registry, the tiny test models and the shaped random models."""
    from kvprobe.model_registry import REGISTRY
    from kvprobe.tiny import SHAPED_MODELS, TINY_MODELS

    return [*REGISTRY, *TINY_MODELS, *SHAPED_MODELS]


def model_config(name: str) -> Any:
    """The transformers config of ``name`` without reading weights: a tiny or shaped model's own config, a
    registry model's GGUF metadata (``ModelNotInstalledError`` naming the pull command when it is not
    installed), a ``.gguf`` file's metadata, or a local directory's / Hub id's ``config.json``."""
    from pathlib import Path

    from transformers import AutoConfig

    from kvprobe.model_registry import REGISTRY
    from kvprobe.weight_files import is_gguf_file
    from kvprobe.tiny import SHAPED_MODELS, TINY_MODELS, shaped_config, tiny_config

    if name in TINY_MODELS:
        return tiny_config(name)
    if name in SHAPED_MODELS:
        return shaped_config(name)
    if name in REGISTRY:
        path = REGISTRY[name].assemble(quiet=True)
        return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    if is_gguf_file(name):
        return AutoConfig.from_pretrained(str(Path(name).parent), gguf_file=Path(name).name)
    return AutoConfig.from_pretrained(name)


def attention_kind(arch: ArchSummary) -> str:
    """``GQA``/``MQA``/``MHA``/``MLA`` and the layer kinds, e.g. ``GQA; 26 full, 4 sliding``."""
    own = [s for s in arch.layers if s.cache == OWN_KV]
    if arch.family == "mla":
        kind = "MLA"
    else:
        kv_heads = {s.key_shape[0] for s in own}
        kind = ("MHA" if kv_heads == {arch.num_heads} else "MQA" if kv_heads == {1} else "GQA")
    short = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear"}
    kinds = ", ".join(f"{arch.layer_types.count(t)} {short.get(t, t)}" for t in arch.distinct_layer_types)
    shared = f", {len(arch.shared_layers)} share K/V" if arch.shared_layers else ""
    return f"{kind}; {kinds}{shared}"


def _first(config: Any, names: Sequence[str]) -> int | None:
    for n in names:
        v = getattr(config, n, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def count_parameters(model: torch.nn.Module, config: Any) -> tuple[int, int | None]:
    """(independent parameters, active parameters or None): tied tensors once (``parameters()`` yields a
    shared tensor once), routed experts scaled by ``top_k / n_experts`` for the active count."""
    total = sum(p.numel() for p in model.parameters())
    n_experts, top_k = _first(config, _EXPERTS), _first(config, _TOP_K)
    if not n_experts or not top_k:
        return total, None
    routed = 0
    for name, p in model.named_parameters():
        parts = name.split(".")
        if "experts" in parts and "shared_experts" not in parts and "shared_expert" not in parts:
            routed += p.numel()
    if not routed:
        return total, None
    return total, total - routed + routed * top_k // n_experts


def row_from_config(name: str, config: Any) -> InventoryRow:
    """The inventory row of a config (the model is built on the ``meta`` device: no memory, no weights)."""
    from transformers import AutoModelForCausalLM

    arch = arch_summary(config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total, active = count_parameters(model, config)
    own = [s for s in arch.layers if s.cache == OWN_KV]
    elements = sum(s.key_shape[0] * s.key_shape[1] + s.value_shape[0] * s.value_shape[1] for s in own)
    heads = sorted({f"{arch.num_heads}:{s.key_shape[0]}" for s in own})
    dims = sorted({f"{s.key_shape[1]}/{s.value_shape[1]}" for s in own})
    embed, out = model.get_input_embeddings(), model.get_output_embeddings()
    tied = out is not None and out.weight is embed.weight
    hidden = getattr(config, "hidden_size", None) or getattr(config.get_text_config(), "hidden_size", 0)
    return InventoryRow(name, arch.model_type, attention_kind(arch), arch.num_layers, int(hidden), ", ".join(heads),
                        ", ".join(dims), elements, 2 * elements, total, active, tied)


def inventory(names: Sequence[str] | None = None) -> list[InventoryRow]:
    """One row per model (default :func:`default_models`); a registry model that is not installed raises
    ``ModelNotInstalledError`` naming its pull command."""
    return [row_from_config(n, model_config(n)) for n in (names or default_models())]


def installed_inventory(names: Sequence[str] | None = None) -> tuple[list[InventoryRow], list[str]]:
    """:func:`inventory` of the models that are installed, and the registry models among ``names`` (default
    :func:`default_models`) that are not (``kvprobe models pull NAME`` installs one)."""
    from kvprobe.model_registry import ModelNotInstalledError

    rows, missing = [], []
    for name in names or default_models():
        try:
            rows.append(row_from_config(name, model_config(name)))
        except ModelNotInstalledError:
            missing.append(name)
    return rows, missing


def format_missing(missing: Sequence[str]) -> str:
    """The table's closing line naming the registry models not installed ("" when every one is)."""
    if not missing:
        return ""
    return (f"\nnot installed ({len(missing)}; `kvprobe models pull NAME` installs one): " + ", ".join(missing))


def _count(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


def format_table(rows: Sequence[InventoryRow]) -> str:
    """A markdown table, one row per model."""
    head = ["model", "type", "attention", "L", "d_model", "Q:KV", "d_K/d_V", "S_KV (elements/token)",
            "bf16 bytes/token", "parameters", "active", "tied embeddings"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join([r.name, r.model_type, r.attention, str(r.layers), str(r.hidden), r.heads,
                                        r.head_dims, f"{r.kv_elements_per_token:,}",
                                        f"{r.kv_bytes_per_token_bf16:,}", _count(r.parameters),
                                        _count(r.active_parameters), "yes" if r.tied_embeddings else "no"])
                     + " |")
    return "\n".join(lines)
