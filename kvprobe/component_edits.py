"""Component edits of a batch's rows: head outputs replaced (:class:`HeadEdit`) and the residual stream
copied between rows (:class:`ResidualPatch`).

A condition puts these on its row state (``RowState.head_edits`` / ``patches``, e.g.
``kvprobe.interventions.HeadAblation`` and ``Patch``); :func:`kvprobe.rows.fork_rows` resolves which row
a patch reads, :func:`kvprobe.forward.plan_forward` turns the question
positions into block columns (:func:`patch_columns`), and the forward applies both, through nnsight in
:func:`kvprobe.forward.traced_forward` or as torch hooks in :func:`kvprobe.forward.hooked_edits`, with the
same two functions (:func:`edit_heads`, :func:`patch_rows`).

Example:
    >>> ablate = HeadEdit(heads=(3,))  # zeros for query head 3, for every token after the history
    >>> patch = ResidualPatch(source="full", positions=(-1,))  # the last question token, from row "full"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class HeadEdit:
    """Replace some attention heads' outputs (the input of the layer's output projection) for every token a
    row runs after its history: zeros, or one fixed vector per head.

    Attributes:
        heads: query-head indices.
        values: Float[len(heads), head_dim] each head's replacement, or None for zeros.
    """

    heads: tuple[int, ...]
    values: torch.Tensor | None = None


@dataclass(frozen=True)
class ResidualPatch:
    """Copy the residual stream after a layer from another row of the same batch, at question positions.

    Attributes:
        source: the name of the condition whose row is copied (it must be in the batch).
        positions: indices into the question's tokens (0 = its first), or None for every question token.
    """

    source: str
    positions: tuple[int, ...] | None = None


class PatchError(ValueError):
    """A residual patch names a source that is not in the batch, or rows whose questions differ in length."""


def patch_columns(patches: dict[int, list[tuple[int, int, tuple[int, ...] | None]]], query_valid: torch.Tensor
                   ) -> dict[int, list[tuple[tuple[int, torch.Tensor], tuple[int, torch.Tensor]]]]:
    """layer -> [((target row, its block columns), (source row, its block columns))]: question positions
    as columns of the (left-padded) block, checked before the forward."""
    out = {}
    for layer, entries in patches.items():
        for target, source, positions in entries:
            own, theirs = (torch.nonzero(query_valid[r]).flatten() for r in (target, source))
            if len(own) != len(theirs):
                raise PatchError(f"patch at layer {layer}: the source row's question has {len(theirs)} tokens, "
                                 f"the patched row's {len(own)}; patch between rows of the same question")
            if positions is not None:
                bad = [p for p in positions if not -len(own) <= p < len(own)]
                if bad:
                    raise PatchError(f"patch at layer {layer}: question positions {bad} out of range "
                                     f"(the question has {len(own)} tokens)")
                index = torch.tensor(positions, dtype=torch.long, device=own.device)
                own, theirs = own[index], theirs[index]
            out.setdefault(layer, []).append(((target, own), (source, theirs)))
    return out


def edit_heads(projected: torch.Tensor, edits: list[tuple[int, HeadEdit]], num_heads: int) -> None:
    """Set heads of rows of an output projection's input [B, Q, heads * head_dim] in place."""
    size = projected.shape[-1] // num_heads
    for row, edit in edits:
        for i, head in enumerate(edit.heads):
            columns = slice(head * size, (head + 1) * size)
            projected[row, :, columns] = 0 if edit.values is None else edit.values[i].to(projected)


def patch_rows(output: Any, entries: list[tuple[tuple[int, torch.Tensor], tuple[int, torch.Tensor]]]) -> None:
    """Copy source rows' columns of a decoder layer's output (a tensor, or a tuple starting with one) in place."""
    x = output[0] if isinstance(output, tuple) else output
    for (target, columns), (source, from_columns) in entries:
        x[target, columns] = x[source, from_columns]
