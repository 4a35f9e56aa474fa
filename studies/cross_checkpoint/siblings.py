"""Sibling checkpoints: pairs with the same architecture and vocabulary but different weights (spec E8, E10).

The paper's pairs are instruction vs base checkpoints and successive releases of
one model (Qwen3-8B / Qwen3-8B-Base, ...). Spec E10 allows small-scale siblings
"base vs instruct, or fp32 vs bf16/int8 weights". Three kinds here:

(a) **In-process siblings for CI** (:func:`perturbed_sibling`): a copy of a model
    whose every parameter gets seeded Gaussian noise scaled to the parameter's
    RMS (``p + scale * rms(p) * N(0, 1)``, one ``torch.Generator`` seeded with
    ``seed``, parameters in ``named_parameters`` order). We chose noise over a
    few fine-tuning steps: it is deterministic without an optimizer or a
    corpus, and ``scale`` sets how far the sibling drifts. Spec: ``"noise"``
    (scale 0.05) or ``"noise:0.2"``.
(b) **Precision siblings of a real checkpoint** (:func:`rounded_sibling`,
    :func:`int8_sibling`): the same checkpoint with every weight rounded to
    bf16 (``"bf16"``) or fp16 (``"fp16"``), or fake-quantized to symmetric int8
    per output channel (``"int8"``: each row of every matrix scaled by
    max|row| / 127, rounded, clamped to [-127, 127]; vectors such as norms and
    biases kept). The copy still *runs* in the main model's dtype (fp32), so
    the caches have the same dtype and only the weights differ.
(c) **Real pairs on a GPU** (:func:`hub_pair`): two Hub checkpoints, e.g.
    ``hub_pair("Qwen/Qwen3-8B", "Qwen/Qwen3-8B-Base", dtype=torch.bfloat16)``
    (``device=`` goes to ``kvprobe.load_model``; kvprobe's engine builds its
    position and mask tensors on the CPU, so a GPU run is untested here). The sibling renders prompts with the main model's
    tokenizer and chat template (as in the paper); its own tokenizer is kept
    in :attr:`SiblingPair.sibling_tokenizer` so the token identity check
    compares the two real tokenizers, and its EOS ids join the stopping set.

Every sibling has its own name and weight hash (``kvprobe.weight_files.state_dict_sha256``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from kvprobe.model import Model, load_model
from kvprobe.siblings import NOISE_SCALE, int8_sibling, perturbed_sibling, rounded_sibling
from kvprobe.prompts import Prompt
from kvprobe.tokenizer_check import TokenizerMismatchWarning

from .checks import check_compatible
from .reading import union_stop_ids

@dataclass
class SiblingPair:
    """A main checkpoint and its sibling, ready for cross reads.

    Attributes:
        main: the main model (the runner's model; its template renders every prompt).
        sibling: the sibling, rendering with the main model's tokenizer.
        recipe: how the sibling was made (``"bf16"``, ``"noise:0.05"``, a Hub id...).
        sibling_tokenizer: the sibling's own tokenizer (the main one for in-process siblings).
    """

    main: Model
    sibling: Model
    recipe: str
    sibling_tokenizer: Any = None

    def __post_init__(self) -> None:
        if self.sibling_tokenizer is None:
            self.sibling_tokenizer = self.sibling.tokenizer

    @property
    def stop_ids(self) -> frozenset[int]:
        """The union of both checkpoints' EOS sets (generation configs and both own tokenizers)."""
        own = self.sibling_tokenizer.eos_token_id
        return union_stop_ids(self.main, self.sibling, extra=() if own is None else [own])

    def check(self, prompts: Sequence[Prompt], questions: Sequence[Sequence[str]] | Sequence[str] = (),
              mask_segments: Sequence[str] | None = None) -> dict[str, int]:
        """:func:`~studies.cross_checkpoint.checks.check_compatible` with the sibling as writer, both real tokenizers."""
        return check_compatible(self.sibling, self.main, prompts, questions, mask_segments,
                                writer_tokenizer=self.sibling_tokenizer, reader_tokenizer=self.main.tokenizer)

    def describe(self) -> dict[str, str]:
        """Names, sources and weight hashes of both checkpoints."""
        return {"main": self.main.name, "main_weight_hash": self.main.weight_hash,
                "sibling": self.sibling.name, "sibling_source": self.sibling.source,
                "sibling_weight_hash": self.sibling.weight_hash, "recipe": self.recipe}


def share_tokenizer(main: Model, sibling: Model) -> SiblingPair:
    """Pair a separately loaded sibling with ``main``: the sibling renders with the main tokenizer (on purpose, so
    the loading-place warning of :mod:`kvprobe.tokenizer_check` is silenced; a real mismatch still raises)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokenizerMismatchWarning)
        rewrapped = Model(sibling.hf, main.tokenizer, name=sibling.name, source=sibling.source,
                          weight_hash=sibling.weight_hash)
    return SiblingPair(main, rewrapped, recipe=sibling.name, sibling_tokenizer=sibling.tokenizer)


def make_sibling(main: Model, spec: str, seed: int = 0, **load_kwargs: Any) -> SiblingPair:
    """The sibling named by ``spec``.

    ``spec``: ``"noise"`` / ``"noise:SCALE"`` (seeded weight noise, ``seed``), ``"bf16"``,
    ``"fp16"``, ``"int8"`` (weight precision siblings), or any name ``kvprobe.load_model``
    takes (registry name, Hub id, local directory, GGUF file, tiny model), loaded with
    ``load_kwargs`` and paired with :func:`share_tokenizer`.
    """
    kind, _, arg = spec.partition(":")
    if kind == "noise":
        scale = float(arg) if arg else NOISE_SCALE
        return SiblingPair(main, perturbed_sibling(main, scale, seed), recipe=f"noise:{scale:g}:seed{seed}")
    if kind in ("bf16", "fp16") and not arg:
        return SiblingPair(main, rounded_sibling(main, torch.bfloat16 if kind == "bf16" else torch.float16),
                           recipe=kind)
    if kind == "int8" and not arg:
        return SiblingPair(main, int8_sibling(main), recipe="int8")
    return share_tokenizer(main, load_model(spec, **load_kwargs))


def hub_pair(main_name: str, sibling_name: str, **load_kwargs: Any) -> SiblingPair:
    """Load a real checkpoint pair (e.g. on a GPU) for cross reads.

    Recipe (paper pairs; needs the Hub and memory for both models)::

        import torch
        from .siblings import hub_pair
        from .study import CrossCheckpointStudy
        from kvprobe.studies.common.runner import run_study
        from kvprobe.studies.common.summary import write_summary

        pair = hub_pair("Qwen/Qwen3-8B", "Qwen/Qwen3-8B-Base", dtype=torch.bfloat16)  # 2 x 16 GB
        study = CrossCheckpointStudy(sibling=pair, max_new_tokens=40)  # 256 for Gemma pairs
        run_study(study, pair.main, "runs/cross-checkpoint/qwen3-8b")
        write_summary("cross-checkpoint", "runs/cross-checkpoint/qwen3-8b")

    Other pairs: ``("Qwen/Qwen3-4B", "Qwen/Qwen3-4B-Base")``. Both tokenizers must give identical
    token ids, boundaries and mask spans on every prompt (checked per batch by the study);
    hybrids (Qwen3.5/3.6 Gated DeltaNet) carry the writer's recurrent states and masks act on
    full-attention layers only, as in the paper. ``load_kwargs`` go to ``kvprobe.load_model``
    (``dtype``, ``device``, ``attn_implementation``); the engine creates its index tensors on
    the CPU, so ``device="cuda"`` is untested. Without the Hub, pass two local directories.
    """
    main = load_model(main_name, **load_kwargs)
    return share_tokenizer(main, load_model(sibling_name, **load_kwargs))
