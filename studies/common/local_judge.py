"""A judge client that answers with a local model kvprobe can load (greedy, the native chat template).

:class:`LocalJudgeClient` is a :class:`kvprobe.studies.common.judge.JudgeClient`: ``complete(prompt)`` sends
the prompt as the only user message (no system message: the model's template adds its own default where
it has one, as a chat API does), decodes greedily (temperature 0) for at most ``max_new_tokens`` tokens,
stopping at EOS, and returns the reply with the model variant (registry name, dtype and weight digest).
``complete_many(prompts)`` answers several prompts at once, ``batch_size`` rows per decoding batch, each
prompt prefilled on its own; rows do not see each other, so the replies equal one-by-one ``complete``
calls up to padding rounding. Nothing here knows a study: give its prompts to
:class:`kvprobe.studies.common.judge.PromptJudge` (a benchmark's own protocol: one prompt per request, a
label rule on the free reply) or to any other caller of ``complete``.

How the prompt becomes a kvprobe prompt: its text up to the last line break (``"\\n\\n"``, else ``"\\n"``,
else the last space) is the history and the rest the question, joined by that separator, so the user
message is the prompt exactly; the two parts are tokenized apart (a token boundary at the separator).
A model without a chat template reads the prompt raw, followed by a newline.

Example::

    from kvprobe.studies.common.judge import PromptJudge
    client = LocalJudgeClient("qwen2.5-coder-1.5b-instruct", dtype="bfloat16")
    PromptJudge(client, name="anscheck").judge(["Is 2 + 2 = 4? Answer yes or no only."])[0].label   # 'yes'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import kvprobe
from kvprobe import decoding
from .chat_template import study_prompt
from .judge import JudgeReply
from .protocol import use_chat

#: The official LongMemEval evaluation's reply budget (``evaluate_qa.py``: ``max_tokens=10``).
MAX_NEW_TOKENS = 10
#: Prompts decoded together.
BATCH_SIZE = 8
#: Where a prompt is cut into history and question, first match from the end.
SEPARATORS = ("\n\n", "\n", " ")


def split_prompt(prompt: str) -> tuple[str, str, str]:
    """(history text, separator, question) with ``history + separator + question == prompt``, cut at the last
    separator of :data:`SEPARATORS` (in that order of preference) that leaves both parts non-empty.

    Example: ``split_prompt("Question: x\\n\\nIs it correct?")`` is ``("Question: x", "\\n\\n", "Is it correct?")``.
    """
    for sep in SEPARATORS:
        head, found, tail = prompt.rpartition(sep)
        if found and head.strip() and tail.strip():
            return head, sep, tail
    raise ValueError(f"cannot split the judge prompt {prompt[:60]!r} into a history and a question")


class LocalJudgeClient:
    """A :class:`~kvprobe.studies.common.judge.JudgeClient` answering with a local model (module docstring).

    Args:
        model: a loaded :class:`kvprobe.Model`, or a name for :func:`kvprobe.load_model` (with ``load``
            keywords, e.g. ``dtype="bfloat16"``).
        max_new_tokens: reply budget (default 10, the official LongMemEval evaluation's).
        batch_size: prompts decoded together by :meth:`complete_many`.
        chat: use the chat template (None: when the tokenizer has one).
    """

    def __init__(self, model: kvprobe.Model | str, max_new_tokens: int = MAX_NEW_TOKENS,
                 batch_size: int = BATCH_SIZE, chat: bool | None = None, **load: Any) -> None:
        if max_new_tokens < 1 or batch_size < 1:
            raise ValueError(f"max_new_tokens and batch_size must be at least 1, got {max_new_tokens}, {batch_size}")
        self.model = kvprobe.load_model(model, **load) if isinstance(model, str) else model
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.chat = use_chat(self.model.tokenizer, chat)

    @property
    def model_variant(self) -> str:
        """``name/dtype/weight digest`` (the first 12 hex digits)."""
        m = self.model
        return f"{m.name}/{str(m.dtype).removeprefix('torch.')}/{(m.weight_hash or 'unhashed')[:12]}"

    def prompt(self, text: str) -> tuple[kvprobe.Prompt, str]:
        """The kvprobe prompt whose user message is ``text``, and the question asked after it."""
        head, sep, question = split_prompt(text)
        return study_prompt([("prompt", head)], chat=self.chat, system=None, question_sep=sep), question

    def complete(self, prompt: str) -> JudgeReply:
        return self.complete_many([prompt])[0]

    def prefill(self, prompt: kvprobe.Prompt) -> kvprobe.History:
        """The history one prompt is answered from (a fresh prefill; subclasses may reuse cached K/V)."""
        return self.model.prefill(prompt)

    def complete_many(self, prompts: Sequence[str]) -> list[JudgeReply]:
        """One reply per prompt, in order, decoded ``batch_size`` at a time."""
        out: list[JudgeReply] = []
        variant = self.model_variant
        for start in range(0, len(prompts), self.batch_size):
            items = []
            for text in prompts[start:start + self.batch_size]:
                prompt, question = self.prompt(text)
                items.append((self.prefill(prompt), decoding.Request(question, kvprobe.Full(), "judge")))
            answers = decoding.answer(self.model, items, max_new_tokens=self.max_new_tokens)
            out += [JudgeReply(a.generation.text, variant) for a in answers]
        return out
