"""The one-prompt-per-request judge protocol (``judge.PromptJudge``, ``judge.yes_label``) and the local-model
judge client (``local_judge.LocalJudgeClient``) on a tiny model."""

from __future__ import annotations

import json

import pytest

import kvprobe
from kvprobe.studies.common.judge import JudgeError, JudgeReply, PromptJudge, yes_label
from kvprobe.studies.common.local_judge import LocalJudgeClient, split_prompt


@pytest.mark.parametrize("reply, label", [
    ("yes", "yes"), (" Yes.", "yes"), ("YES, it is correct", "yes"), ("no", "no"), ("No.", "no"), ("", "no"),
    # The official rule reads "yes" anywhere, inside words too (evaluate_qa.py: 'yes' in reply.lower()).
    ("Eyesight is not the question; no.", "yes"), ("Yesterday's answer: no", "yes"), ("ye s", "no"),
])
def test_yes_label_is_the_official_substring_rule(reply, label):
    assert yes_label(reply) == label


class _Echo:
    """Replies "yes" when the prompt holds "Corolla"; counts the prompts it was sent."""

    def __init__(self, many: bool):
        self.sent: list[str] = []
        if many:
            self.complete_many = lambda prompts: [self.complete(p) for p in prompts]

    def complete(self, prompt: str) -> JudgeReply:
        self.sent.append(prompt)
        return JudgeReply(" Yes" if "Corolla" in prompt else "No", "echo-1")


@pytest.mark.parametrize("many", [False, True])
def test_prompt_judge_asks_each_distinct_prompt_once(tmp_path, many):
    client = _Echo(many)
    prompts = ["a Toyota Corolla", "a bike", "a Toyota Corolla", "a bike", "a car"]
    got = PromptJudge(client, log_path=tmp_path / "log.jsonl", name="anscheck").judge(prompts)
    assert [j.label for j in got] == ["yes", "no", "yes", "no", "no"]
    assert client.sent == ["a Toyota Corolla", "a bike", "a car"]  # distinct, first-seen order
    assert got[0].grader == "anscheck:echo-1" and got[0].explanation == " Yes"
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [(e["prompt"], e["label"]) for e in log] == [("a Toyota Corolla", "yes"), ("a bike", "no"), ("a car", "no")]


class _Dying(_Echo):
    """An echo client with a model variant that dies after answering ``lives`` prompts."""

    model_variant = "echo-1"

    def __init__(self, lives: int):
        super().__init__(many=True)
        self.lives = lives

    def complete(self, prompt: str) -> JudgeReply:
        if len(self.sent) == self.lives:
            raise KeyboardInterrupt("killed")
        return super().complete(prompt)


def test_prompt_judge_resumes_a_killed_run_from_its_log(tmp_path):
    log = tmp_path / "judge.jsonl"
    prompts = [f"answer {i}" + (" Corolla" if i % 3 == 0 else "") for i in range(7)]
    with pytest.raises(KeyboardInterrupt):
        PromptJudge(_Dying(lives=5), log_path=log, resume=True, chunk_size=2).judge(prompts)
    assert [json.loads(line)["prompt"] for line in log.read_text().splitlines()] == prompts[:4]  # two whole chunks
    # A reply of another judge model and a line cut short by the kill are not reused.
    with open(log, "a") as f:
        f.write(json.dumps({"model_variant": "other-2", "label": "yes", "prompt": prompts[4], "reply": "yes"}) + "\n")
        f.write(json.dumps({"model_variant": "echo-1", "label": "yes", "prompt": prompts[5], "reply": "yes"})[:30])
    client = _Dying(lives=100)
    judge = PromptJudge(client, log_path=log, resume=True, chunk_size=2)
    got = judge.judge(prompts)
    assert client.sent == prompts[4:] and judge.requests == 3
    assert [j.label for j in judge.judge(prompts[::-1])] == [j.label for j in got][::-1]  # a second call asks nothing
    assert client.sent == prompts[4:] and judge.requests == 3
    assert [j.label for j in got] == ["yes" if i % 3 == 0 else "no" for i in range(7)]
    entries = [json.loads(line) for line in log.read_text().splitlines()]  # the cut line is gone, the rest parses
    assert [e["prompt"] for e in entries] == prompts[:5] + prompts[4:]
    log.write_text(log.read_text() + "not json\n")
    with pytest.raises(JudgeError, match="line 9: not a JSON object"):
        PromptJudge(client, log_path=log, resume=True).judge(prompts)
    # Without resume (or without a variant to match) every prompt is asked again.
    client = _Echo(many=True)
    PromptJudge(client, log_path=log, resume=True).judge(prompts[:2])
    assert client.sent == prompts[:2]
    with pytest.raises(ValueError, match="needs a log_path"):
        PromptJudge(client, resume=True)


def test_prompt_judge_refuses_a_short_reply_list():
    class Short:
        def complete_many(self, prompts):
            return [JudgeReply("yes", "x")]

        def complete(self, prompt):  # pragma: no cover - complete_many is used
            raise AssertionError

    with pytest.raises(JudgeError, match="1 replies for 2 prompts"):
        PromptJudge(Short()).judge(["p", "q"])


def test_split_prompt_keeps_every_character():
    assert split_prompt("Question: x\n\nAnswer: y\n\nIs it correct?") == ("Question: x\n\nAnswer: y", "\n\n",
                                                                         "Is it correct?")
    assert split_prompt("Line one\nIs it?") == ("Line one", "\n", "Is it?")
    assert split_prompt("Is 2 + 2 = 4?") == ("Is 2 + 2 =", " ", "4?")
    with pytest.raises(ValueError, match="cannot split"):
        split_prompt("word")


@pytest.fixture(scope="module")
def tiny() -> kvprobe.Model:
    return kvprobe.load_model("tiny-llama")


def test_local_client_sends_the_prompt_as_the_only_user_message(tiny):
    client = LocalJudgeClient(tiny)
    text = "I will give you a question.\n\nQuestion: What car?\n\nModel Response: A Kia.\n\nCorrect? Answer yes or no only."
    prompt, question = client.prompt(text)
    rendered = prompt.render(tiny.tokenizer)
    expected = tiny.tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                  add_generation_prompt=True, **prompt.template_kwargs)
    assert rendered.history_text + rendered.suffix(question) == expected
    assert client.model_variant == f"tiny-llama/float32/{tiny.weight_hash[:12]}"


def test_local_client_batched_replies_equal_one_by_one(tiny):
    client = LocalJudgeClient(tiny, max_new_tokens=4, batch_size=3)
    texts = [f"Question {i}: is {i} even?\n\nAnswer yes or no only." for i in range(4)]
    batched = client.complete_many(texts)
    assert [r.text for r in batched] == [client.complete(t).text for t in texts]
    assert all(r.model_variant == client.model_variant for r in batched)
    with pytest.raises(ValueError, match="at least 1"):
        LocalJudgeClient(tiny, max_new_tokens=0)
