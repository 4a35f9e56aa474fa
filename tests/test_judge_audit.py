"""Judge audits (studies/common/judge_audit.py): the hand-labelled audit sets, the scoring and pass rule on
hand-made judge replies (through the real judge protocol, prompt builders and label readers), the result files,
``kvprobe report judge-audit``'s refusals of bad input before any model loads, and one real run on a tiny model.
"""

from __future__ import annotations

import gzip
import json
import re
import tomllib
from pathlib import Path

import pytest

import kvprobe
from kvprobe.cli import main
from kvprobe.studies.common import judge_audit as ja
from kvprobe.studies.common.judge import JudgeReply
from kvprobe.studies.registry import judge_audits

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = judge_audits()
TASKS = {name: e.audit_task() for name, e in ENTRIES.items()}


def test_the_judged_studies_have_audits():
    assert set(TASKS) == {"oaks-open", "session-bias"}
    for name, task in TASKS.items():
        assert task.task == name and task.accept in task.labels
        assert task.path.name == "judge_audit.jsonl" and task.path.parent.name in ("open_answers", "session_bias")


# ----------------------------------------------------------------------------- the audit sets

@pytest.mark.parametrize("name", sorted(TASKS))
def test_audit_set_schema_and_coverage(name):
    """30-45 items, every category planted at least once, both ends of the label set, short and long answers;
    planted wrongs are never labelled as accepted, complete answers always are; the traps that carry the
    reference word do carry it."""
    task = TASKS[name]
    items = task.items()  # read_items checks keys, categories, labels, inputs and unique ids
    assert 30 <= len(items) <= 45
    assert {i.category for i in items} == set(ja.CATEGORIES)
    assert {i.label for i in items} >= {task.accept, *(set(task.labels) - {"partial", "abstain"})}
    assert {i.length for i in items} == {"short", "long"}
    credited = {"complete", "complete-long", "complete-with-old"} | ({"abstain-correct"} if task.accept == "yes"
                                                                    else set())
    for i in items:
        assert (i.label == task.accept) == (i.category in credited), i.id
        assert not (i.planted and i.label == task.accept), i.id
        assert i.note and i.answer_source and i.question_source, i.id
        if i.category in ("planted-negated", "planted-elsewhere"):
            assert i.inputs["reference"].split()[0].lower() in i.answer.lower(), i.id
    assert sum(i.planted for i in items) >= 12


def test_oaks_labels_follow_the_rubric():
    """oaks-open: abstentions are labelled abstain (justified or not), confabulated answers to an unanswerable
    question wrong, and partial answers exist only on questions with two details."""
    items = TASKS["oaks-open"].items()
    for i in items:
        if i.category in ("abstain-correct", "abstain-unwarranted"):
            assert i.label == "abstain", i.id
        if i.category == "abstain-confabulated":
            assert i.label == "wrong", i.id
        if i.label == "partial":
            assert i.category == "partial" and ("," in i.inputs["reference"] or ";" in i.inputs["reference"]), i.id


def test_session_bias_abstention_items_take_the_abstention_prompt():
    task = TASKS["session-bias"]
    for i in task.items():
        abstains = i.category.startswith("abstain-") and i.category != "abstain-unwarranted"
        assert ("_abs" in i.inputs["question_id"]) == abstains == i.inputs["is_abstention"], i.id
        assert ("unanswerable question" in task.prompt(i.inputs, i.answer)) == abstains, i.id


def _logged_prompts(run: Path) -> set[str]:
    log = run / "judge.jsonl.gz"
    lines = gzip.open(log, "rt") if log.is_file() else open(run / "judge.jsonl")
    return {json.loads(line)["prompt"] for line in lines}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_copied_answers_reproduce_the_committed_judge_prompts(name):
    """The audit asks the study's own prompt: an answer copied from a committed run, on its own question, gives the
    very prompt that run's judge saw (its judge log)."""
    task = TASKS[name]
    checked = 0
    for i in task.items():
        found = re.search(r"\((artifacts/[^)]+)\)", i.answer_source)
        if not found:
            continue
        run = ROOT / found.group(1)
        case = i.question_source.rsplit(" ", 1)[-1]
        rows = {r["case_id"]: r for r in map(json.loads, gzip.open(run / "results.jsonl.gz"))
                if r["condition"] == "full"}
        if case in rows and rows[case]["output"] == i.answer:
            assert task.prompt(i.inputs, i.answer) in _logged_prompts(run), i.id
            checked += 1
    assert checked >= 5


@pytest.mark.parametrize("line, message", [
    ({"category": "nonsense"}, "unknown category"),
    ({"label": "maybe"}, "label 'maybe'"),
    ({"answer": "  "}, "empty answer"),
    ({"inputs": {}}, "inputs lack"),
    ({"note": None, "_drop": "note"}, "missing note"),
])
def test_read_items_names_a_bad_line(tmp_path, line, message):
    good = json.loads(TASKS["session-bias"].path.read_text().splitlines()[0])
    bad = {**good, **line}
    if "_drop" in bad:
        del bad[bad.pop("_drop")]
    path = tmp_path / "audit.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**bad, "id": "other"}) + "\n")
    task = TASKS["session-bias"]
    with pytest.raises(ValueError, match=f"line 2: {message}"):
        ja.read_items(path, task.labels, task.fields)
    path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(ValueError, match="repeated"):
        ja.read_items(path, task.labels, task.fields)


# ----------------------------------------------------------------------------- scoring

class Scripted:
    """A judge client replying from a table (prompt -> label word), else ``default``; counts its requests."""

    model_variant = "scripted/float32/000000000000"

    def __init__(self, by_prompt: dict[str, str], default: str | None = None):
        self.by_prompt, self.default, self.asked = by_prompt, default, 0

    def complete(self, prompt: str) -> JudgeReply:
        self.asked += 1
        label = self.by_prompt.get(prompt, self.default)
        return JudgeReply(f"{label.capitalize()}.", self.model_variant)


def _judge(task, overrides=None, default=None):
    """A scripted judge giving each item its hand label (``overrides``: id -> another label), or ``default``."""
    table = {} if default else {task.prompt(i.inputs, i.answer): (overrides or {}).get(i.id, i.label)
                                for i in task.items()}
    return Scripted(table, default)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_perfect_judge_passes(name):
    task = TASKS[name]
    client = _judge(task)
    r = ja.run_audit(task, client)
    assert r.passed and r.agree == r.n == len(task.items()) and r.accept_agree == r.n
    assert r.planted_accepted == r.false_accepts == r.false_rejects == []
    assert client.asked == r.n  # every item is its own prompt
    assert r.judge == Scripted.model_variant and r.audit_file == f"studies/{task.path.relative_to(ROOT / 'studies')}"
    assert all(row["reply"].rstrip(".").lower() == row["label"] for row in r.items)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_judge_that_accepts_everything_fails(name):
    task = TASKS[name]
    r = ja.run_audit(task, _judge(task, default=task.accept))
    items = task.items()
    assert not r.passed
    assert r.planted_accepted == [i.id for i in items if i.planted] and len(r.planted_accepted) == r.planted
    assert r.false_accepts == [i.id for i in items if i.label != task.accept]
    assert r.agree == sum(i.label == task.accept for i in items) and r.agreement < ja.MIN_AGREEMENT
    assert r.by_category["planted-old"]["accepted"] == r.by_category["planted-old"]["n"]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_judge_that_rejects_everything_fails_on_agreement(name):
    task = TASKS[name]
    reject = next(label for label in task.labels if label in ("wrong", "no"))
    r = ja.run_audit(task, _judge(task, default=reject))
    assert not r.passed and r.planted_accepted == [] and r.agreement < ja.MIN_AGREEMENT
    assert len(r.false_rejects) == sum(i.label == task.accept for i in task.items())


@pytest.mark.parametrize("name", sorted(TASKS))
def test_one_accepted_planted_wrong_fails_a_judge_that_agrees_otherwise(name):
    task = TASKS[name]
    trap = next(i for i in task.items() if i.category == "planted-elsewhere")
    r = ja.run_audit(task, _judge(task, {trap.id: task.accept}))
    assert r.agree == r.n - 1 and r.agreement >= ja.MIN_AGREEMENT
    assert not r.passed and r.planted_accepted == [trap.id] == r.false_accepts
    assert r.confusion[trap.label][task.accept] == 1
    assert r.by_category["planted-elsewhere"]["agree"] == r.by_category["planted-elsewhere"]["n"] - 1


def test_the_pass_rule_edge_and_the_tables():
    assert ja.passes(32, 40, 0) and not ja.passes(31, 40, 0) and not ja.passes(40, 40, 1) and not ja.passes(0, 0, 0)
    task = TASKS["oaks-open"]
    items = task.items()
    judged = ["unparsed" if k % 3 == 0 else "partial" for k in range(len(items))]
    r = ja.score(items, judged, task.accept)
    assert sum(c["n"] for c in r.by_category.values()) == sum(c["n"] for c in r.by_length.values()) == r.n
    assert sum(sum(row.values()) for row in r.confusion.values()) == r.n
    assert r.confusion["partial"].get("partial", 0) == sum(i.label == "partial" and j == "partial"
                                                           for i, j in zip(items, judged))
    assert r.agree == sum(c["agree"] for c in r.by_category.values())
    with pytest.raises(ValueError, match="judged labels"):
        ja.score(items, judged[:-1], task.accept)


def test_an_unparsed_reply_never_agrees():
    task = TASKS["oaks-open"]
    r = ja.run_audit(task, Scripted({}, default="it depends"))
    assert r.agree == 0 and r.confusion["complete"] == {"unparsed": sum(i.label == "complete"
                                                                          for i in task.items())}


# ----------------------------------------------------------------------------- files

def test_results_are_written_read_and_found_by_grader(tmp_path):
    task = TASKS["session-bias"]
    variant = "qwen2.5-coder-1.5b-instruct/bfloat16/cc324af070c2"
    client = _judge(task)
    client.model_variant = variant
    r = ja.run_audit(task, client)
    path, md = ja.write_audit(r, tmp_path)
    assert path == tmp_path / "session-bias" / "qwen2.5-coder-1.5b-instruct-bfloat16.json" and md.suffix == ".md"
    assert ja.read_audit(path) == r
    data = json.loads(path.read_text())
    assert data["passed"] is True and data["agreement"] == 1.0 and data["rule"] == ja.PASS_RULE
    assert "**passes**" in md.read_text() and "## Confusion" in md.read_text()
    assert ja.audit_for_grader("session-bias", "longmemeval-anscheck:" + variant, tmp_path) == r
    assert ja.judge_validated("session-bias", "longmemeval-anscheck:" + variant, tmp_path)
    # another weight digest, another dtype or task: no audit of that judge
    assert ja.audit_for_grader("session-bias", variant[:-1] + "0", tmp_path) is None
    assert not ja.judge_validated("session-bias", variant.replace("bfloat16", "float32"), tmp_path)
    assert not ja.judge_validated("oaks-open", variant, tmp_path)


def test_judges_of_a_committed_run_are_found_beside_its_study_folder(tmp_path):
    task = TASKS["oaks-open"]
    client = _judge(task, default="complete")
    client.model_variant = "qwen2.5-coder-1.5b-instruct/bfloat16/cc324af070c2"
    ja.write_audit(ja.run_audit(task, client), tmp_path / "judge-audit")
    graders = ["rule-v1", "source-aware:qwen2.5-coder-1.5b-instruct/bfloat16/cc324af070c2",
               "source-aware:qwen2.5-coder-0.5b-instruct/bfloat16/1d9614638d18"]
    found = ja.judges_of_run(tmp_path / "oaks-open" / "some-run", "oaks-open", graders)
    assert list(found) == graders[1:] and found[graders[2]] is None
    assert found[graders[1]].planted_accepted and not found[graders[1]].passed


COMMITTED = sorted((ROOT / "artifacts" / "judge-audit").glob("*/*.json"))


@pytest.mark.parametrize("path", COMMITTED, ids=[f"{p.parent.name}/{p.stem}" for p in COMMITTED])
def test_committed_audits_match_their_audit_sets_and_replies(path):
    """A committed audit was run on the audit set as it is now (an edited set needs a rerun), its labels are the
    study's reading of the stored replies, its score follows from them, and its .md is the result's report."""
    result = ja.read_audit(path)
    task = TASKS[result.task]
    assert path == ja.audit_path(ROOT / "artifacts" / "judge-audit", result.task, result.judge)
    assert result.audit_sha256 == ja.file_sha256(task.path), "the audit set changed: rerun kvprobe report judge-audit"
    items = task.items()
    replies = [row["reply"] for row in result.items]
    again = ja.score(items, [task.label_of(r) for r in replies], task.accept, replies, task=result.task,
                     judge=result.judge, audit_file=result.audit_file, audit_sha256=result.audit_sha256)
    assert again == result
    assert path.with_suffix(".md").read_text() == ja.format_audit(result)


def test_the_audit_sets_ship_as_package_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for entry in ENTRIES.values():
        package = entry.graded.audit.split(":")[0].rpartition(".")[0]
        assert entry.audit_task().path.name in data[package], package


# ----------------------------------------------------------------------------- the command

@pytest.fixture
def no_model_loads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")
    monkeypatch.setattr(kvprobe, "load_model", refuse)


@pytest.mark.parametrize("argv, message", [
    (["nope-model", "oaks-open"], "unknown judge model 'nope-model'"),
    (["tiny-llama", "oaks"], "unknown task 'oaks'; tasks with a judge audit: oaks-open, session-bias"),
    (["oaks-open", "tiny-llama"], "(the MODEL comes first)"),
    (["tiny-llama"], "takes a judge MODEL and a TASK"),
    (["tiny-llama", "session-bias", "--judge-dtype", "int8"], "--judge-dtype 'int8'"),
])
def test_judge_audit_command_refuses_bad_input(argv, message, no_model_loads, capsys, tmp_path):
    assert main(["report", "judge-audit", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvprobe report judge-audit: error:") and message in err
    assert not list(tmp_path.iterdir())


def test_judge_audit_command_refuses_a_model_not_pulled(monkeypatch, no_model_loads, capsys):
    from kvprobe.model_registry import REGISTRY

    name = "qwen2.5-coder-0.5b-instruct"
    monkeypatch.setattr(type(REGISTRY[name]), "installed", lambda self: False)
    assert main(["report", "judge-audit", name, "oaks-open"]) == 2
    assert f"kvprobe models pull {name}" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(TASKS))
def test_judge_audit_command_scores_the_rule_grader(name, no_model_loads, tmp_path, capsys):
    """``kvprobe report judge-audit rule TASK``, end to end in process: the study's rule grader, no model."""
    assert main(["report", "judge-audit", "rule", name, "--out", str(tmp_path)]) == 0
    result = ja.read_audit(tmp_path / name / "rule-v1.json")
    task = TASKS[name]
    assert result.judge == task.rule_name == "rule-v1" and result.n == len(task.items())
    assert [row["judged"] for row in result.items] == [task.rule(i) for i in task.items()]
    assert "rule grader (no model)" in (tmp_path / name / "rule-v1.md").read_text()
    assert f"rule-v1 on {name}: agreement {result.agree}/{result.n}" in capsys.readouterr().out
    # the rule grader credits the reference word wherever it stands: a trap it cannot see
    assert set(result.planted_accepted) & {i.id for i in task.items() if i.category in ("planted-negated",
                                                                                       "planted-elsewhere")}


# ----------------------------------------------------------------------------- a real run

@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_tiny_model_judges_a_few_items(name, llama, one_thread):
    """The study's own local client on a tiny random model, three items: replies come back, labels are read by
    the study's rule (random text: mostly ``unparsed`` / ``no``), the judge's variant is recorded."""
    task = TASKS[name]
    items = task.items()[:3]
    r = ja.run_audit(task, task.client(llama), items)
    assert r.n == 3 and [row["id"] for row in r.items] == [i.id for i in items]
    assert r.judge.startswith("tiny-llama/float32/")
    assert all(row["judged"] in (*task.labels, "unparsed") for row in r.items)
    assert "# Judge audit" in ja.format_audit(r)
