"""``with m.trace(history, question, access={...}) as t:``: an nnsight trace over kvprobe's batch.

Inside the block, ``m.nn`` is the model's nnsight wrapper with its usual envoys
(``m.nn.model.layers[i].output``, ``.self_attn.o_proj.input``, ``m.nn.output.logits``...). The
forward it traces is kvprobe's: one row per condition over the shared history, every mask, bias,
cache edit, head ablation and patch already in place, so an envoy's batch dimension is the
conditions. ``t.row(name)`` is a condition's row and ``t.positions`` the question's columns::

    with m.trace(h, q, access={"full": Full(), "source": Mask(h.span("A"))}) as t:
        x = m.nn.model.layers[12].output[t.row("source")].save()     # [question tokens, d_model]
        m.nn.model.layers[12].output[t.row("source")] = m.nn.model.layers[12].output[t.row("full")]
    t.logits["source"]     # [question tokens, vocab], after the edit

Saves, assignments and in-place edits work as in nnsight and change what the trace returns:
``t.logits`` (every condition's question logits) and, with ``candidates``, ``t.scores`` (each
condition's :class:`~kvprobe.decoding.CandidateScores`, scored after the edited question). Edits act
on the question's forward; the candidates then read the question's K/V as the edited forward
cached them.

kvprobe's own edits run as torch hooks here (:func:`kvprobe.forward.hooked_edits`, the same
functions :func:`~kvprobe.forward.traced_forward` applies through nnsight), so a trace without
user edits gives :meth:`Model.score`'s logits (``tests/test_tracing.py``). Outside ``m.trace``,
``m.nn.trace("plain text")`` traces a plain forward of tokenized text, as nnsight's language model does.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import nnsight
import torch
from nnsight.tracing.tracer import skip_context, skippable

from .access import Condition
from .decoding import CandidateScores, Request, candidate_ids, candidate_logprobs, prepare_states, remaining_suffix
from .forward import ForwardInputs, hooked_edits, plan_forward, shares_history
from .forward_context import active_selector, forward_context
from .rows import fork_rows, pad_suffix_block
from .selection import SelectionAccess

if TYPE_CHECKING:
    from .history import History
    from .model_like import ModelLike


class ModelEnvoy(nnsight.NNsight):
    """nnsight's wrapper of a transformers model that also reads text: ``trace("text")`` (or a list of
    texts) tokenizes it with the model's tokenizer, as nnsight's language model wrapper does; tensors and
    keyword arguments pass through unchanged (kvprobe's forward calls it with ids, masks and a cache)."""

    def __init__(self, module: torch.nn.Module, tokenizer: Any):
        super().__init__(module)
        object.__setattr__(self, "_text_tokenizer", tokenizer)

    def trace(self, *inputs: Any, **kwargs: Any):
        text = inputs[0] if len(inputs) == 1 else None
        if isinstance(text, str) or (isinstance(text, list) and text and all(isinstance(x, str) for x in text)):
            encoded = self._text_tokenizer(text, return_tensors="pt", padding=True)
            device = next(self._module.parameters()).device
            kwargs = {**{k: v.to(device) for k, v in encoded.items()}, **kwargs}
            inputs = ()
        return super().trace(*inputs, **kwargs)


class Trace:
    """The context of ``Model.trace`` (see the module docstring).

    Attributes:
        names: the conditions, in batch-row order.
        logits: after the block, condition -> Float[question tokens, vocab].
        scores: after the block, condition -> :class:`CandidateScores` (with ``candidates``).
    """

    def __init__(self, model: "ModelLike", history: "History", question: str, conditions: Mapping[str, Condition],
                 candidates: Sequence[str] | None = None, cross_checkpoint: bool = False):
        selecting = [name for name, c in conditions.items() if isinstance(c, SelectionAccess)]
        if selecting:
            raise ValueError(f"m.trace runs one batch over the shared history; the query-aware selections "
                             f"{selecting} need their own batches (use score/generate for them)")
        if candidates is not None and (not candidates or any(not c for c in candidates)):
            raise ValueError("candidates must be a non-empty list of non-empty strings")
        self.model, self.names = model, list(conditions)
        self.candidates = None if candidates is None else tuple(candidates)
        items = [(history, Request(question, c, name)) for name, c in conditions.items()]
        states = prepare_states(model, items, cross_checkpoint)
        suffixes = [remaining_suffix(model, history, question, s) for s in states]
        self._rows = fork_rows(states, share=shares_history(model), names=self.names)
        ids, valid = pad_suffix_block(suffixes, model.pad_id, model.device)
        self._valid = valid
        self._plan = plan_forward(model, self._rows, ForwardInputs(ids, valid))
        self.logits: dict[str, torch.Tensor] = {}
        self.scores: dict[str, CandidateScores] = {}
        self._captured: dict[str, torch.Tensor] = {}

    # ------------------------------------------------------------------ inside the block
    def row(self, name: str) -> int:
        """The batch row of condition ``name``."""
        if name not in self.names:
            raise KeyError(f"no condition {name!r} in this trace (conditions: {self.names})")
        return self.names.index(name)

    def columns(self, name: str) -> torch.Tensor:
        """Long[question tokens]: the block columns of condition ``name``'s question (left-padded rows)."""
        return torch.nonzero(self._valid[self.row(name)]).flatten()

    @property
    def positions(self) -> torch.Tensor:
        """Long[question tokens]: the question's columns, shared by every row (one question)."""
        columns = [self.columns(name) for name in self.names]
        if any(c.shape != columns[0].shape or not torch.equal(c, columns[0]) for c in columns):
            raise ValueError("the rows' questions differ in length here (a recompute kept part of the question); "
                             "use t.columns(name)")
        return columns[0]

    # ------------------------------------------------------------------ the forward
    def __enter__(self) -> "Trace":
        self._stack = ExitStack()
        try:
            self._stack.enter_context(torch.inference_mode())
            self._stack.enter_context(active_selector(None))
            self._stack.enter_context(forward_context(self._plan.context))
            self._stack.enter_context(hooked_edits(self.model, self._plan))

            def keep_logits(_module: Any, _args: Any, output: Any) -> None:
                self._captured["logits"] = output.logits

            self._stack.callback(self.model.hf.register_forward_hook(keep_logits).remove)
            self._tracer = self.model.nn.trace(**self._plan.kwargs)
            # What nnsight's Tracer.__enter__ does, from here so that the frame both calls look two frames up
            # to is the user's `with` statement: read its block (nnsight raises when it cannot, e.g. code run
            # by exec), and skip the body so nnsight runs it in the forward.
            self._tracer.capture()
        except BaseException:
            # __exit__ never runs when __enter__ raises: undo the forward context, the edits' hooks and the
            # logits hook here, or they would stay on the model and change every later forward.
            self._stack.close()
            raise
        if skippable(self._tracer.node):
            skip_context(self._tracer)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool | None:
        try:
            suppressed = self._tracer.__exit__(exc_type, exc, tb)
        finally:
            self._stack.close()
        if exc_type is not None and not suppressed:
            return suppressed
        logits = self._captured["logits"]
        self.logits = {name: logits[row, self.columns(name)] for row, name in enumerate(self.names)}
        if self.candidates is not None:
            ids = candidate_ids(self.model, [self.candidates] * len(self.names))
            sums = candidate_logprobs(self.model, self._rows, logits[:, -1].float(), ids)
            self.scores = {name: CandidateScores(self.candidates, tuple(sums[row]), tuple(len(c) for c in ids[row]),
                                                 name) for row, name in enumerate(self.names)}
        return suppressed
