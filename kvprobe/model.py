"""The loaded model: transformers model + tokenizer + nnsight wrapper + architecture summary."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from .access import Condition, Full
from .activations import NAMES as ACTIVATION_NAMES, ActivationCache
from .arch import ArchSummary, adapter_for
from .decoding import CandidateScores, Generation, Request, generate_greedy, run_with_cache, score_candidates
from .forward import extend_state
from .history import History, kv_digest, tokenizer_fingerprint, weights_fingerprint
from .model_guard import ModelExpectation, check_model, switch_attention
from .prompts import Prompt, RenderedPrompt
from .rows import RowState
from .tokenizer_check import check_tokenizer
from .tracing import ModelEnvoy, Trace


def _contiguous_input(module: torch.nn.Module, args: tuple) -> tuple:
    return (args[0].contiguous(), *args[1:])


def _contiguous_output_layer(hf: Any) -> None:
    """Make the output layer read a contiguous copy of its input (once per model; values unchanged).

    transformers slices the last positions for ``logits_to_keep`` (``hidden[:, -k:, :]``, a strided view); on
    the CPU, torch's bfloat16/float16 matmul (oneDNN) takes such a view about 200 times slower than a
    contiguous one (SmolLM2's output layer, 54 rows: 4.4 s against 19 ms), which made every low-precision
    question forward on the CPU slower than float32.
    """
    out = hf.get_output_embeddings()
    if out is not None and not getattr(out, "_kvprobe_contiguous_input", False):
        out.register_forward_pre_hook(_contiguous_input)
        out._kvprobe_contiguous_input = True


class Model:
    """A causal LM ready for prefill, scoring and generation under access conditions.

    Attributes:
        hf: the transformers model (eval mode, eager attention by default).
        tokenizer: its fast tokenizer.
        nn: the nnsight wrapper used for every intervention.
        arch: :class:`ArchSummary` (per layer: type, cached shapes, RoPE placement).
        adapter: the family adapter that read the config (``kvprobe.arch``).
        name, source, weight_hash: where the weights came from.
        share_history: let batch rows that read the same history K/V share one copy of
            it (default True; where the family and attention allow, see
            :func:`kvprobe.forward.shares_history`); False gives every row its own copy.
        expected: what the forwards rely on, recorded here (the attention implementation, the attention
            modules and their hooks: :class:`kvprobe.model_guard.ModelExpectation`); a forward of a model
            another library changed since is refused by name (:class:`~kvprobe.model_guard.ModelChangedError`).
    """

    def __init__(self, hf: Any, tokenizer: Any, *, name: str = "", source: str = "", weight_hash: str = ""):
        if not getattr(tokenizer, "is_fast", False):
            raise TypeError(f"model {name!r}: kvprobe needs a fast tokenizer (character offsets)")
        check_tokenizer(hf, tokenizer, name)  # another model's tokenizer: TokenizerMismatchError
        self.hf = hf.eval()
        _contiguous_output_layer(hf)
        self.tokenizer = tokenizer
        self.name, self.source, self.weight_hash = name, source, weight_hash
        self.adapter = adapter_for(hf.config)
        self.arch: ArchSummary = self.adapter.summary(hf.config)
        self.nn = ModelEnvoy(self.hf, tokenizer)  # nnsight's envoys; nn.trace("text") tokenizes
        self._layers = self.nn.model.layers
        self.share_history = True
        self.expected = ModelExpectation.of(self.hf, self.arch.attention_layers)

    # -- facts ---------------------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        return next(self.hf.parameters()).dtype

    @property
    def device(self) -> torch.device:
        """Where token ids, positions, masks and every other per-token table of a batch live: the
        device of the input embeddings. A model spread over several devices (``device="auto"``)
        keeps each layer's K/V on that layer's device; edits follow the rows they touch."""
        return self.hf.get_input_embeddings().weight.device

    @property
    def eos_ids(self) -> frozenset[int]:
        """Every token id that ends generation (generation config and tokenizer)."""
        ids: set[int] = set()
        cfg = getattr(self.hf, "generation_config", None)
        for source in (getattr(cfg, "eos_token_id", None), self.tokenizer.eos_token_id):
            if source is None:
                continue
            ids.update(source if isinstance(source, (list, tuple)) else [source])
        return frozenset(int(i) for i in ids)

    @property
    def context_length(self) -> int | None:
        """The model's ``max_position_embeddings`` (text config of multimodal models), or None if unknown."""
        config = self.hf.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        value = getattr(text, "max_position_embeddings", None)
        return None if value is None else int(value)

    @property
    def pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else min(self.eos_ids))

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the model's class, config and weights (:func:`kvprobe.history.weights_fingerprint`):
        what a history's reader is checked against."""
        return weights_fingerprint(self.hf)

    def layer_device(self, layer: int) -> torch.device:
        """The device of decoder layer ``layer``'s weights (where its cached K/V live)."""
        return next(self.hf.model.layers[layer].parameters()).device

    def layer_envoy(self, layer: int) -> Any:
        """The nnsight envoy of decoder layer ``layer`` (its output is the residual stream after it)."""
        return self._layers[layer]

    def attention_envoy(self, layer: int) -> Any:
        """The nnsight envoy of layer ``layer``'s attention module."""
        return self._layers[layer].self_attn

    def __repr__(self) -> str:
        return f"Model({self.name!r}, {self.arch.describe()})"

    def set_attn_implementation(self, name: str) -> None:
        """Switch the transformers attention implementation to ``name`` (``kvprobe``, ``kvprobe_grouped``,
        ``eager``, ``sdpa``...) on purpose: later forwards run under it. Switching ``m.hf`` directly (as
        TransformerLens's bridge does) is refused at the next forward (:mod:`kvprobe.model_guard`)."""
        switch_attention(self, name)

    # -- prefill -------------------------------------------------------------
    def tokenize(self, prompt: Prompt) -> tuple[RenderedPrompt, torch.Tensor, list[tuple[int, int]]]:
        """Render and tokenize a prompt's history: (rendered prompt, Long[T] ids, character offsets)."""
        return prompt.tokenize(self.tokenizer)

    def prefill(self, prompt: Prompt, chunk_size: int | None = None, reuse: History | None = None) -> History:
        """Tokenize and prefill a prompt's history once (in chunks of ``chunk_size`` tokens).

        ``chunk_size`` None leaves it to the device (:func:`kvprobe.forward.default_chunk_size`; on CUDA a
        prefill from nothing runs as one causal block); a size given is used on every device.

        ``reuse``: an earlier history of this model whose leading tokens this one
        shares (e.g. the same records up to a different last record); the shared
        prefix's K/V are copied from it and only the rest is computed. The result
        equals a fresh prefill up to float rounding (tested). Hybrid models reuse
        only a whole history (their recurrent states exist only at its end).
        """
        if not isinstance(prompt, Prompt):
            several = isinstance(prompt, (list, tuple)) and all(isinstance(p, Prompt) for p in prompt)
            raise TypeError(f"prefill takes one Prompt, got {type(prompt).__name__}"
                            + ("; prefill each: [m.prefill(p) for p in prompts] (reuse=an earlier history "
                               "shares a common prefix's K/V)" if several else
                               "; build one with kvprobe.Prompt([(name, text), ...]) or Prompt('text')"))
        rendered, ids, offsets = self.tokenize(prompt)
        return self.prefill_tokens(prompt, rendered, ids, offsets, chunk_size=chunk_size, reuse=reuse)

    def prefill_tokens(self, prompt: Prompt, rendered: RenderedPrompt, ids: torch.Tensor,
                       offsets: list[tuple[int, int]], chunk_size: int | None = None, reuse: History | None = None,
                       digest: bool = True) -> History:
        """:meth:`prefill` of a history already tokenized by :meth:`tokenize` (``digest=False`` leaves
        ``History.digest`` empty: for timing the prefill alone; set it before any check)."""
        T = int(ids.shape[0])
        start = self.empty_state()
        if reuse is not None:
            if reuse.model is not self:
                raise ValueError("reuse= takes a history prefilled by this same model")
            n = min(_common_prefix(ids, reuse.input_ids), T - 1)  # at least one token runs
            if reuse.recurrent and n < len(reuse):
                n = 0
            start = reuse.prefix_state(n)
        n = start.length
        # extend_state returns compact copies made outside inference mode; recurrent states come out as
        # inference tensors and are copied here so the history is made of ordinary tensors.
        ids = ids.to(self.device)
        state = extend_state(self, start, ids[n:], torch.arange(n, T, device=self.device), chunk_size)
        recurrent = {i: (c.clone(), r.clone()) for i, (c, r) in state.recurrent.items()}
        return History(
            model=self,
            prompt=prompt,
            rendered=rendered,
            input_ids=ids,
            offsets=offsets,
            kv=state.kv,
            positions=torch.arange(T, device=self.device),
            digest=kv_digest(state.kv, recurrent) if digest else "",
            recurrent=recurrent,
            reused_tokens=n,
            tokenizer_fingerprint=tokenizer_fingerprint(self.tokenizer),
        )

    def empty_state(self) -> RowState:
        """A row state with no tokens (what a prefill starts from)."""
        kv = []
        for index, spec in enumerate(self.arch.layers):
            if spec.key_shape is None:  # recurrent, or reads another layer's rows
                kv.append((None, None))
            else:
                device = self.layer_device(index)
                kv.append((torch.zeros(1, spec.key_shape[0], 0, spec.key_shape[1], dtype=self.dtype, device=device),
                           torch.zeros(1, spec.value_shape[0], 0, spec.value_shape[1], dtype=self.dtype,
                                       device=device)))
        return RowState(
            kv=kv,
            key_pos=torch.zeros(0, dtype=torch.long, device=self.device),
            key_valid=torch.zeros(0, dtype=torch.bool, device=self.device),
            input_ids=torch.zeros(0, dtype=torch.long, device=self.device),
            slot_of=torch.zeros(0, dtype=torch.long, device=self.device),
            recurrent={layer: (None, None) for layer in self.arch.recurrent_layers},
        )

    # -- scoring and generation ----------------------------------------------
    def score(
        self,
        history: History,
        question: str,
        candidates: Sequence[str],
        access: Condition | Mapping[str, Condition] | None = None,
        cross_checkpoint: bool = False,
        capture: Sequence[str] | None = None,
        layers: Sequence[int] | None = None,
    ) -> CandidateScores | dict[str, CandidateScores]:
        """Teacher-forced summed log-probabilities (nats) of ``candidates`` after ``question``.

        With a single access condition returns one :class:`CandidateScores`; with a
        mapping ``name -> Condition`` scores all conditions in one batch and returns a dict.
        ``cross_checkpoint``: ``history`` was prefilled by another checkpoint (same tokenizer and cache
        shapes) and this model reads its cache; without it such a history is refused
        (``kvprobe.history.ModelMismatchError``). The same holds for :meth:`generate` and :meth:`run_with_cache`.
        ``capture``/``layers``: the question's internals, as :meth:`run_with_cache` names them, on each
        result's ``activations`` (for :meth:`generate`: the question and every generated token fed back).
        """
        conditions = _conditions(access)
        requests = [Request(question, a, name) for name, a in conditions.items()]
        scores = score_candidates(self, history, requests, candidates, cross_checkpoint, capture, layers)
        if not isinstance(access, Mapping):
            return scores[0]
        return dict(zip(conditions, scores))

    def generate(
        self,
        history: History,
        question: str | Sequence[str],
        access: Condition | Mapping[str, Condition] | None = None,
        max_new_tokens: int = 40,
        cross_checkpoint: bool = False,
        capture: Sequence[str] | None = None,
        layers: Sequence[int] | None = None,
    ) -> Generation | dict[str, Generation] | dict[str, list[Generation]]:
        """Greedy answers to one or several questions under one or several access conditions.

        All (condition, question) pairs decode together as one batch. Returns a
        :class:`Generation` for one question and one condition; a dict
        ``condition -> Generation`` for one question and a mapping; a dict
        ``condition -> [Generation per question]`` for several questions.
        """
        conditions = _conditions(access)
        questions = [question] if isinstance(question, str) else list(question)
        if not questions:
            raise ValueError("generate: no questions (an empty list); pass a question or a list of them")
        requests = [Request(q, a, name) for name, a in conditions.items() for q in questions]
        outs = generate_greedy(self, history, requests, max_new_tokens=max_new_tokens,
                               cross_checkpoint=cross_checkpoint, capture=capture, layers=layers)
        per_condition = {
            name: outs[i * len(questions) : (i + 1) * len(questions)] for i, name in enumerate(conditions)
        }
        if isinstance(question, str):
            if not isinstance(access, Mapping):
                return per_condition[next(iter(conditions))][0]
            return {k: v[0] for k, v in per_condition.items()}
        return per_condition

    def run_with_cache(
        self,
        history: History,
        question: str,
        access: Condition | Mapping[str, Condition] | None = None,
        names: Sequence[str] = ACTIVATION_NAMES,
        layers: Sequence[int] | None = None,
        cross_checkpoint: bool = False,
    ) -> dict[str, ActivationCache]:
        """The question's internals under each condition, as TransformerLens's ``run_with_cache``: one
        forward over the shared history with a row per condition, ``{name: ActivationCache}``.

        ``names``: what to keep, among ``hidden``, ``attention``, ``keys``, ``values``, ``logits``;
        ``layers``: which layers (default all; negative indices count from the last). Shapes and
        conventions: :mod:`kvprobe.activations`.

        Example::

            caches = m.run_with_cache(h, question, access={"full": Full(), "source": Mask(h.span("A"))})
            caches["source"].hidden[-1]       # [question_tokens, d_model]
            caches["source"].attention[3]     # [heads, question_tokens, history + question keys]
        """
        return run_with_cache(self, history, question, _conditions(access), names, layers, cross_checkpoint)

    def trace(
        self,
        history: History,
        question: str,
        access: Condition | Mapping[str, Condition] | None = None,
        candidates: Sequence[str] | None = None,
        cross_checkpoint: bool = False,
    ) -> Trace:
        """An nnsight trace over kvprobe's batch: one row per condition over the shared history, every
        condition already applied; ``m.nn``'s envoys inside, ``t.row(name)``, ``t.positions``; after the
        block ``t.logits[name]`` and, with ``candidates``, ``t.scores[name]`` (:mod:`kvprobe.tracing`).

        Example::

            with m.trace(h, q, access={"full": Full(), "source": Mask(h.span("A"))}) as t:
                x = m.nn.model.layers[3].output[t.row("source")].save()
            t.logits["source"]
        """
        check_model(self)  # the trace's forward runs through nnsight, not traced_forward
        return Trace(self, history, question, _conditions(access), candidates, cross_checkpoint)

    def run(self, history: History, requests: Sequence[Request], max_new_tokens: int = 40) -> list[Generation]:
        """Low-level batched generation: one :class:`Generation` per :class:`Request`."""
        return generate_greedy(self, history, list(requests), max_new_tokens=max_new_tokens)


def _common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """Number of leading tokens two id sequences share."""
    n = min(len(a), len(b))
    differ = torch.nonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def _conditions(access: Condition | Mapping[str, Condition] | None) -> dict[str, Condition]:
    if access is None:
        return {"full": Full()}
    if isinstance(access, Condition):
        return {access.name: access}
    if isinstance(access, Mapping):
        if not access:
            raise ValueError("empty mapping of access conditions")
        for name, a in access.items():
            if not isinstance(a, Condition):
                raise TypeError(f"condition {name!r} is not a Condition object, got {type(a).__name__}")
        return dict(access)
    raise TypeError(f"access must be a Condition or a mapping of them, got {type(access).__name__}")


def load_model(name: str = "smollm2-135m-instruct", **kwargs: Any) -> Model:
    """Load a model by registry name, Hub id, local directory, ``.gguf`` file or tiny-model name.

    Keyword arguments (``dtype``, ``attn_implementation``, ``device``) go to
    :func:`kvprobe.loading.load_weights`.
    """
    from .loading import load_weights

    w = load_weights(name, **kwargs)
    return Model(w.hf, w.tokenizer, name=w.name, source=w.source, weight_hash=w.weight_hash)
