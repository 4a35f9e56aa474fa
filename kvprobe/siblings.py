"""Sibling checkpoints made in process: the same architecture and vocabulary, other weights.

The cross-checkpoint question (can one checkpoint read another's cache?) needs pairs of models whose
caches have the same shapes and whose tokenizers agree. Real pairs (an instruction and a base
checkpoint) come from the Hub; these builders make siblings of any loaded model without a download:
seeded weight noise, weights rounded to bf16/fp16, or int8 fake quantization. Each is a deep copy with
its own name, source and weight hash, sharing the tokenizer; read another checkpoint's history with
``m.score(h, ..., cross_checkpoint=True)``.

Example::

    noisy = kvprobe.siblings.perturbed_sibling(m, scale=0.05, seed=0)
    noisy.score(m.prefill(prompt), question, candidates, cross_checkpoint=True)
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from .weight_files import state_dict_sha256
from .model import Model

__all__ = ["NOISE_SCALE", "fake_int8", "int8_sibling", "perturbed_sibling", "rounded_sibling", "transformed_copy"]

#: Default relative noise of ``"noise"`` siblings (our choice; tiny models keep answering alike).
NOISE_SCALE = 0.05





def transformed_copy(model: Model, suffix: str, description: str,
                     transform: Callable[[str, torch.nn.Parameter], None]) -> Model:
    """A deep copy of ``model`` whose parameters ``transform(name, param)`` edits in place (no grad).

    Named ``"{model.name}~{suffix}"``, with the copy's own weight hash; the tokenizer is shared.
    """
    hf = copy.deepcopy(model.hf)
    with torch.no_grad():
        for name, param in hf.named_parameters():  # tied parameters appear once
            transform(name, param)
    return Model(hf, model.tokenizer, name=f"{model.name}~{suffix}",
                 source=f"sibling of {model.name} ({model.weight_hash[:12]}): {description}",
                 weight_hash=state_dict_sha256(hf))


def perturbed_sibling(model: Model, scale: float = NOISE_SCALE, seed: int = 0) -> Model:
    """``model`` with seeded noise ``scale * rms(p) * N(0, 1)`` added to every parameter."""
    if scale <= 0:
        raise ValueError(f"noise scale must be positive, got {scale}")
    gen = torch.Generator().manual_seed(seed)

    def add_noise(_: str, p: torch.nn.Parameter) -> None:
        if not p.is_floating_point():
            return
        rms = p.detach().double().pow(2).mean().sqrt().item()
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        p.add_((scale * rms * noise).to(p.dtype))

    return transformed_copy(model, f"noise{scale:g}-s{seed}", f"seeded Gaussian weight noise, scale {scale:g} x RMS, "
                            f"seed {seed}", add_noise)

def rounded_sibling(model: Model, dtype: torch.dtype = torch.bfloat16) -> Model:
    """``model`` with every floating parameter rounded to ``dtype`` (bf16 / fp16) and kept in the model's dtype."""
    short = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))

    def round_(_: str, p: torch.nn.Parameter) -> None:
        if p.is_floating_point():
            p.copy_(p.to(dtype).to(p.dtype))

    return transformed_copy(model, short, f"weights rounded to {short}, run in {model.dtype}", round_)

def fake_int8(w: torch.Tensor) -> torch.Tensor:
    """Symmetric per-output-channel int8 fake quantization of a matrix (rows = output channels)."""
    flat = w.detach().float().reshape(w.shape[0], -1)
    scale = flat.abs().amax(dim=1, keepdim=True) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.clamp(torch.round(flat / scale), -127, 127) * scale
    return q.reshape(w.shape).to(w.dtype)

def int8_sibling(model: Model) -> Model:
    """``model`` with every weight matrix fake-quantized to int8 per output channel (vectors kept)."""

    def quantize(_: str, p: torch.nn.Parameter) -> None:
        if p.is_floating_point() and p.dim() >= 2:
            p.copy_(fake_int8(p))

    return transformed_copy(model, "int8", f"weights fake-quantized to int8 per output channel, run in "
                            f"{model.dtype}", quantize)
