"""The neutral note and the equal-token control of the record-history study (paper app:v7_bridge).

The paper's policy prompt has no neutral text long enough to match record A, so its matched-score
experiment adds the same note before Time 2 in every arm ("The notebook contains numbered pages and a
plain cover." repeated 16 times, seed L5574-5577) and hides, as the control, "exactly the same number of
tokens from the start of the added note" as the old mask hides in A. Here the note is its own prompt
segment (``note``) between the other record and Time 2, and the control is
:func:`kvprobe.matched_control` on that segment.

Example::

    prompt = with_note(history.prompt(chat=True), "notebook")   # segments: header, time1, other, note, time2
    h = model.prefill(prompt)
    control = control_mask(h, history.a_span(h))                # len == len(A's span), from the note's start
"""

from __future__ import annotations

import kvprobe
from kvprobe.studies.datasets.record_histories import NOTE_SEGMENT, note_text, with_note

__all__ = ["NOTE_SEGMENT", "control_mask", "note_text", "with_note"]


def control_mask(history: kvprobe.History, a_span: kvprobe.TokenSpan) -> kvprobe.Mask:
    """The equal-token control: as many tokens as ``a_span`` from the first token of the note segment.

    Raises ``kvprobe.SpanError`` when the note is shorter than A or the spans overlap.
    """
    return kvprobe.matched_control(history, kvprobe.Mask(a_span, name="mask"), NOTE_SEGMENT, name="control-mask")
