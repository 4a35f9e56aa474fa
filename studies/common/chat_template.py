"""The chat-template settings of every study prompt, decided in one place.

Every study builds its prompts with :func:`study_prompt` (a :class:`kvprobe.Prompt` whose
``template_kwargs`` come from :func:`template_kwargs`), so no study spells a template variable
of its own (``tests/test_chat_template.py`` renders each registered study's prompts through a
thinking-capable template and checks the source for stray settings). The settings:

* ``enable_thinking=False``: no thinking block. The paper states it for the detector prompts
  (seed L2449-2450: "Qwen thinking is disabled where the template supports that option."), the
  quantity tasks across eight models (L3982-3983), FactConsolidation (L1549), the native-format
  comparison (L1868, L2009), LongMemEval (L5919) and the revision histories (L6794). Where a
  section says nothing (the record-history policies, MQuAKE, MINTEval, BABILong...) thinking is
  off as well (UNCLEAR; ours, ``docs/fidelity.md``): every study asks for a short final answer.
* ``date_string``: the template date. Where the paper states one for a prompt, the study passes
  it from its ``strings.py`` (quoted there with its paper line): "16 Sep 2026" for the quantity
  tasks and the YES/NO score (L3566-3567; L3402: "16 September 2026"), "11 Sep 2026" for the
  record histories of the matched-score experiment and the factorial (L4763: "11 September
  2026"). Elsewhere the paper states none and :data:`DEFAULT_DATE` fixes it (UNCLEAR; ours), so a
  template that writes the current date (Llama 3) renders the same prompt on any day.

Templates ignore variables they do not read: SmolLM2's and Qwen2.5's read neither, so these
settings change only the prompts of templates that do (Qwen3's ``enable_thinking``, Llama 3's
``date_string``). Raw prompts (``chat=False``) carry the settings unused.
"""

from __future__ import annotations

from typing import Any, Sequence

import kvprobe

#: Thinking in every study prompt: off (seed L2449-2450 and the sections in the module docstring).
ENABLE_THINKING = False
#: The template date of a prompt whose paper section states none (UNCLEAR; ours): the date the paper fixes
#: for its main quantity experiment (seed L3402, L3566-3567), written as the template's ``date_string``.
DEFAULT_DATE = "16 Sep 2026"


def template_kwargs(date: str | None = None) -> dict[str, Any]:
    """The chat-template variables of a study prompt: thinking off and the template date.

    ``date``: the template date the paper states for the prompt's section (from the study's
    ``strings.py``); None where it states none (:data:`DEFAULT_DATE`). A fresh dict each call.

    Example: ``template_kwargs()`` is ``{"enable_thinking": False, "date_string": "16 Sep 2026"}``.
    """
    return {"enable_thinking": ENABLE_THINKING, "date_string": DEFAULT_DATE if date is None else date}


def study_prompt(segments: Sequence[tuple[str, str]], *, date: str | None = None, **options: Any) -> kvprobe.Prompt:
    """A study's :class:`kvprobe.Prompt`: ``segments`` and ``options`` as ``kvprobe.Prompt`` takes them (``chat``,
    ``system``, ``sep``...), the template variables from :func:`template_kwargs` (``date``: the paper's template
    date of the prompt's section, None where it states none).

    Example: ``study_prompt([("A", "The box is red.")], system="Answer briefly.")``.
    """
    if "template_kwargs" in options:
        raise TypeError("study_prompt decides the template variables; pass the paper's date as date=...")
    return kvprobe.Prompt(segments, template_kwargs=template_kwargs(date), **options)
