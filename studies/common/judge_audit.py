"""Judge audits: a local LLM judge scored on a hand-labelled audit set of its task (issue 46, item 3).

A judged task (a study whose answers a model judge labels: ``oaks-open``, ``session-bias``) keeps an audit set
in its folder, ``judge_audit.jsonl``, written by hand: one JSON object a line, each an answer the study's judge
could be shown, the exact inputs of the study's judge prompt, and the label a careful grader gives it under the
study's rubric. Keys: ``id`` (unique), ``category`` (what the item plants, :data:`CATEGORIES`), ``label`` (one of
the task's labels), ``answer`` (the candidate answer, never empty: an empty answer never reaches a judge),
``inputs`` (the prompt's fields, :attr:`AuditTask.fields`), ``note`` (why that label), ``answer_source``
(``hand`` or the run a model's answer was copied from) and ``question_source``; a task may add keys of its own.

The study gives the audit its prompt builder, label reader and local client through an :class:`AuditTask`
(its ``audit.py``; the registry's ``Graded.audit`` names it), so this module imports no study. :func:`run_audit`
asks the judge as the study does (:class:`~kvprobe.studies.common.judge.PromptJudge`: one prompt per request, the
label read from the free reply by the study's rule) and :func:`score` compares its labels with the hand labels:

* agreement: items whose judged label equals the hand label, overall, per category and per answer length
  (short: at most :data:`SHORT_WORDS` words);
* accept agreement: the same on the one distinction the study's counts use (the task's ``accept`` label, e.g.
  ``complete`` or ``yes``, against any other);
* false accepts: items not labelled ``accept`` by hand that the judge accepts; among them the planted wrongs
  (:data:`PLANTED_WRONG`: answers built to look right, and abstentions that claim or decline wrongly);
* the confusion table (hand label -> judged label -> items).

The pass rule (:data:`PASS_RULE`): agreement >= :data:`MIN_AGREEMENT` and at most :data:`MAX_PLANTED_ACCEPTS`
planted wrongs accepted. :func:`write_audit` writes ``<out>/<task>/<model>-<dtype>.json`` (:class:`AuditResult`,
every item's judged label and raw reply) and ``.md`` (readable tables); ``kvprobe report judge-audit MODEL TASK``
does it all. A claim whose rows a judge graded reads the verdict with :func:`judge_validated` (or the numbers
with :func:`audit_for_grader`, or :func:`judges_of_run` for every judge of a committed run) from the grader string
its summary records.

Example::

    from kvprobe.studies.session_bias.audit import AUDIT   # the task's AuditTask
    result = audit_model(AUDIT, "qwen2.5-coder-1.5b-instruct", dtype="bfloat16")
    result.passed, result.agreement, result.planted_accepted
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.data import sha256_of as file_sha256

from .judge import PromptJudge
from .report import table_head, table_row

#: What an audit item plants (its ``category``), each in one sentence.
CATEGORIES: dict[str, str] = {
    "complete": "a correct, complete answer, short",
    "complete-long": "a correct, complete answer inside a longer reply",
    "complete-with-old": "a correct answer that also names (or denies) the old or other value",
    "partial": "one required detail given, another omitted, nothing wrong",
    "wrong": "a wrong or off-topic answer (nonsense, an echo of the history)",
    "planted-old": "the stale value, or the update's other value, given as the answer",
    "planted-negated": "the reference named only to be denied (\"not X\")",
    "planted-elsewhere": "the reference word present, but about something else, beside a wrong answer",
    "planted-confabulated": "a plausible value that the sources never give",
    "abstain-correct": "declines a question the sources cannot answer",
    "abstain-confabulated": "claims an answer to a question the sources cannot answer",
    "abstain-unwarranted": "declines a question the sources answer",
}
#: The categories whose items a judge must never accept (the false accepts the pass rule counts).
PLANTED_WRONG = frozenset({"planted-old", "planted-negated", "planted-elsewhere", "planted-confabulated",
                           "abstain-confabulated", "abstain-unwarranted"})
#: The pass rule: at least this share of items labelled as by hand...
MIN_AGREEMENT = 0.80
#: ...and at most this many planted wrong answers accepted.
MAX_PLANTED_ACCEPTS = 0
PASS_RULE = (f"agreement with the hand labels >= {MIN_AGREEMENT * 100:.0f} % and at most {MAX_PLANTED_ACCEPTS} planted "
             "wrong answers accepted")
#: Answers of at most this many words count as short.
SHORT_WORDS = 12
#: Where ``kvprobe report judge-audit`` writes (one folder per task).
AUDIT_DIR = "artifacts/judge-audit"
#: The keys every audit item has.
ITEM_KEYS = ("id", "category", "label", "answer", "inputs", "note", "answer_source", "question_source")


@dataclass(frozen=True)
class AuditTask:
    """A study's side of its judge audit (given by the study, e.g. ``studies/session_bias/audit.py``).

    Attributes:
        task: the study's registry name (``kvprobe report judge-audit MODEL TASK``).
        path: its audit set (``judge_audit.jsonl`` in the study folder).
        labels: the labels the study's judge gives (a hand label is one of them).
        accept: the label that credits an answer in the study's counts (``complete``, ``yes``).
        verdict: what the judge decides, one phrase (shown in the report).
        fields: the keys of an item's ``inputs`` (the judge prompt's fields besides the answer).
        prompt: ``(inputs, answer) -> prompt``: the study's own judge prompt builder.
        label_of: ``reply -> label``: the study's own reading of a judge reply (may return a label outside
            ``labels``, e.g. ``unparsed``, which never agrees).
        client: ``(model, **load) -> client``: the study's local judge client (a
            :class:`~kvprobe.studies.common.local_judge.LocalJudgeClient`, or one of its subclasses).
        rule: ``item -> label``: the study's rule grader on an item (None: it has none), audited as the baseline
            a failing judge is compared with (:func:`audit_rule`; ``kvprobe report judge-audit rule TASK``).
        rule_name: the rule grader's name (its ``grader`` in the study's rows).
    """

    task: str
    path: Path
    labels: tuple[str, ...]
    accept: str
    verdict: str
    fields: tuple[str, ...]
    prompt: Callable[[Mapping[str, Any], str], str]
    label_of: Callable[[str], str]
    client: Callable[..., Any]
    rule: Callable[[AuditItem], str] | None = None
    rule_name: str = "rule-v1"

    def items(self) -> list[AuditItem]:
        """The audit set, checked (:func:`read_items`)."""
        return read_items(self.path, self.labels, self.fields)


@dataclass(frozen=True)
class AuditItem:
    """One hand-labelled answer (module docstring)."""

    id: str
    category: str
    label: str
    answer: str
    inputs: Mapping[str, Any]
    note: str = ""
    answer_source: str = ""
    question_source: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def planted(self) -> bool:
        """A planted wrong answer (:data:`PLANTED_WRONG`)."""
        return self.category in PLANTED_WRONG

    @property
    def length(self) -> str:
        """``short`` (at most :data:`SHORT_WORDS` words) or ``long``."""
        return "short" if len(self.answer.split()) <= SHORT_WORDS else "long"


def read_items(path: str | Path, labels: Sequence[str], fields: Sequence[str]) -> list[AuditItem]:
    """The items of an audit file; a ValueError naming the line for a missing key, an unknown category or label,
    an empty answer, inputs without one of ``fields``, or a repeated id."""
    items: list[AuditItem] = []
    seen: set[str] = set()
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {n}"
        d = json.loads(line)
        missing = [k for k in ITEM_KEYS if k not in d]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        if d["category"] not in CATEGORIES:
            raise ValueError(f"{where}: unknown category {d['category']!r} (known: {', '.join(CATEGORIES)})")
        if d["label"] not in labels:
            raise ValueError(f"{where}: label {d['label']!r} is none of {', '.join(labels)}")
        if not str(d["answer"]).strip():
            raise ValueError(f"{where}: empty answer (a judge never sees one)")
        if lacking := [k for k in fields if k not in d["inputs"]]:
            raise ValueError(f"{where}: inputs lack {', '.join(lacking)}")
        if d["id"] in seen:
            raise ValueError(f"{where}: id {d['id']!r} repeated")
        seen.add(d["id"])
        items.append(AuditItem(**{k: d[k] for k in ITEM_KEYS}, extra={k: v for k, v in d.items()
                                                                        if k not in ITEM_KEYS}))
    return items


# ----------------------------------------------------------------------------- scoring

@dataclass(frozen=True)
class AuditResult:
    """A judge's audit on one task (module docstring); :attr:`passed` applies :data:`PASS_RULE`.

    ``by_category`` and ``by_length``: name -> ``{"n", "agree", "accepted"}``; ``confusion``: hand label ->
    judged label -> items; ``items``: per item ``id``, ``category``, ``label``, ``judged``, ``reply``, ``answer``."""

    task: str
    judge: str
    audit_file: str
    audit_sha256: str
    accept: str
    n: int
    agree: int
    accept_agree: int
    planted: int
    planted_accepted: list[str]
    false_accepts: list[str]
    false_rejects: list[str]
    by_category: dict[str, dict[str, int]]
    by_length: dict[str, dict[str, int]]
    confusion: dict[str, dict[str, int]]
    items: list[dict[str, Any]]
    rule: str = PASS_RULE
    passed: bool = False

    @property
    def agreement(self) -> float:
        return self.agree / self.n if self.n else 0.0

    @property
    def accept_agreement(self) -> float:
        return self.accept_agree / self.n if self.n else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "agreement": self.agreement, "accept_agreement": self.accept_agreement}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AuditResult:
        return cls(**{k: v for k, v in data.items() if k not in ("agreement", "accept_agreement")})


def passes(agree: int, n: int, planted_accepted: int) -> bool:
    """:data:`PASS_RULE`."""
    return n > 0 and agree / n >= MIN_AGREEMENT and planted_accepted <= MAX_PLANTED_ACCEPTS


def score(items: Sequence[AuditItem], judged: Sequence[str], accept: str, replies: Sequence[str] | None = None,
          task: str = "", judge: str = "", audit_file: str = "", audit_sha256: str = "") -> AuditResult:
    """The audit of the labels ``judged`` (one per item, in order) against the hand labels of ``items``."""
    if len(judged) != len(items):
        raise ValueError(f"{len(judged)} judged labels for {len(items)} items")
    replies = list(replies) if replies is not None else [""] * len(items)
    rows = [{"id": i.id, "category": i.category, "label": i.label, "judged": j, "reply": r, "answer": i.answer}
            for i, j, r in zip(items, judged, replies)]

    def cells(key: Callable[[AuditItem], str], order: Sequence[str]) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for name in [*order, *sorted({key(i) for i in items} - set(order))]:
            group = [(i, j) for i, j in zip(items, judged) if key(i) == name]
            if group:
                out[name] = {"n": len(group), "agree": sum(i.label == j for i, j in group),
                             "accepted": sum(j == accept for _, j in group)}
        return out

    accepted = [i for i, j in zip(items, judged) if j == accept]
    false_accepts = [i.id for i in accepted if i.label != accept]
    planted_accepted = [i.id for i in accepted if i.planted]
    confusion: dict[str, dict[str, int]] = {}
    for i, j in zip(items, judged):
        confusion.setdefault(i.label, {})
        confusion[i.label][j] = confusion[i.label].get(j, 0) + 1
    agree = sum(i.label == j for i, j in zip(items, judged))
    return AuditResult(
        task=task, judge=judge, audit_file=audit_file, audit_sha256=audit_sha256, accept=accept, n=len(items),
        agree=agree, accept_agree=sum((i.label == accept) == (j == accept) for i, j in zip(items, judged)),
        planted=sum(i.planted for i in items), planted_accepted=planted_accepted, false_accepts=false_accepts,
        false_rejects=[i.id for i, j in zip(items, judged) if i.label == accept and j != accept],
        by_category=cells(lambda i: i.category, list(CATEGORIES)), by_length=cells(lambda i: i.length,
                                                                                   ("short", "long")),
        confusion=confusion, items=rows, passed=passes(agree, len(items), len(planted_accepted)))


def run_audit(task: AuditTask, client: Any, items: Sequence[AuditItem] | None = None,
              progress: bool = False) -> AuditResult:
    """Ask ``client`` (a :class:`~kvprobe.studies.common.judge.JudgeClient`) the study's judge prompt of every item
    (``items``: default the task's whole audit set), as the study does (one prompt per request, the label by the
    study's reader), and score its labels."""
    items = task.items() if items is None else list(items)
    judge = PromptJudge(client, label_of=task.label_of, name=f"{task.task}-audit", progress=progress)
    judgments = judge.judge([task.prompt(i.inputs, i.answer) for i in items])
    variant = getattr(client, "model_variant", None) or (judgments[0].grader.split(":", 1)[-1] if judgments else "")
    return score(items, [j.label for j in judgments], task.accept, [j.explanation for j in judgments],
                 task=task.task, judge=variant, audit_file=_shown(task.path), audit_sha256=file_sha256(task.path))


def _shown(path: Path) -> str:
    """``studies/<study>/.../judge_audit.jsonl``, in a checkout or an installed package."""
    parts = Path(path).resolve().parts
    at = max((k for k, p in enumerate(parts) if p == "studies"), default=len(parts) - 1)
    return "/".join(parts[at:])


def audit_model(task: AuditTask, model: Any, dtype: str | None = None, progress: bool = False) -> AuditResult:
    """:func:`run_audit` with the study's local client on ``model`` (a name or a loaded model; ``dtype``: its
    dtype when loading by name, None: the loader's)."""
    load = {"dtype": dtype} if dtype and isinstance(model, str) else {}
    return run_audit(task, task.client(model, **load), progress=progress)


def audit_rule(task: AuditTask) -> AuditResult:
    """The study's rule grader scored on the audit set like a judge (no model; its replies are its labels)."""
    if task.rule is None:
        raise ValueError(f"{task.task}: no rule grader to audit")
    items = task.items()
    labels = [task.rule(i) for i in items]
    return score(items, labels, task.accept, labels, task=task.task, judge=task.rule_name,
                 audit_file=_shown(task.path), audit_sha256=file_sha256(task.path))


# ----------------------------------------------------------------------------- files

def _stem(variant: str) -> str:
    """``name-dtype`` of a model variant ``name/dtype/digest`` (unsafe characters as ``_``)."""
    parts = variant.split("/")
    name, dtype = ("/".join(parts[:-2]), parts[-2]) if len(parts) >= 3 else (variant, "")
    return re.sub(r"[^\w.-]+", "_", f"{name}-{dtype}" if dtype else name).strip("_")


def audit_path(root: str | Path, task: str, variant: str) -> Path:
    """``root/task/<model>-<dtype>.json``: where the audit of the judge ``variant`` (``name/dtype/digest``) lives."""
    return Path(root) / task / f"{_stem(variant)}.json"


def write_audit(result: AuditResult, root: str | Path = AUDIT_DIR) -> tuple[Path, Path]:
    """Write the result's ``.json`` and ``.md`` (:func:`format_audit`) under ``root/<task>/``; returns both paths."""
    path = audit_path(root, result.task, result.judge)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(), indent=1, ensure_ascii=False) + "\n")
    md = path.with_suffix(".md")
    md.write_text(format_audit(result))
    return path, md


def read_audit(path: str | Path) -> AuditResult:
    return AuditResult.from_json(json.loads(Path(path).read_text()))


def audit_for_grader(task: str, grader: str, root: str | Path = AUDIT_DIR) -> AuditResult | None:
    """The audit of the judge that graded a run (``grader``: a summary's grader string, e.g.
    ``source-aware:qwen2.5-coder-1.5b-instruct/bfloat16/cc324af070c2``, or the variant alone) on ``task``; None
    when there is none for that exact model variant (name, dtype and weight digest)."""
    variant = grader.split(":", 1)[-1]
    path = audit_path(root, task, variant)
    if not path.is_file():
        return None
    result = read_audit(path)
    return result if result.judge == variant else None


def judge_validated(task: str, grader: str, root: str | Path = AUDIT_DIR) -> bool:
    """Whether the judge ``grader`` passed its audit on ``task`` (False when it has none)."""
    result = audit_for_grader(task, grader, root)
    return result is not None and result.passed


def judges_of_run(run: str | Path, task: str, graders: Sequence[str], root: str | Path | None = None
                  ) -> dict[str, AuditResult | None]:
    """Each model grader of a committed run (``graders``: its summary's ``graders``; rule graders, which name no
    ``model/dtype/digest``, left out: :func:`audit_for_grader` finds their audits by name) -> its audit on ``task`` from the ``judge-audit`` folder beside the run's
    study folder (``artifacts/judge-audit`` for a run ``artifacts/<study>/<name>``; ``root``: that folder given,
    e.g. :data:`AUDIT_DIR` for a summary recomputed elsewhere), None where it has none.

    Example: ``judges_of_run("artifacts/oaks-open/smollm2-135m-instruct-judged-1.5b", "oaks-open",
    summary["graders"])`` is ``{"source-aware:qwen2.5-coder-1.5b-instruct/bfloat16/cc324af070c2": AuditResult(...)}``.
    """
    root = Path(run).parent.parent / "judge-audit" if root is None else Path(root)
    return {g: audit_for_grader(task, g, root) for g in graders if g.split(":", 1)[-1].count("/") >= 2}


# ----------------------------------------------------------------------------- report

def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.1f} %)" if n else "-"


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 1] + "…"


def format_audit(result: AuditResult) -> str:
    """The audit as markdown: the verdict under the pass rule, the numbers, per-category and per-length tables, the
    confusion table and every disagreement."""
    r = result
    labels = list(dict.fromkeys([*r.confusion, *(j for row in r.confusion.values() for j in row)]))
    lines = [f"# Judge audit: {r.task}, {r.judge}", "",
             f"Verdict: **{'passes' if r.passed else 'fails'}** the bar ({r.rule}).", "",
             f"{r.n} hand-labelled answers from `{r.audit_file}` (sha256 {r.audit_sha256[:12]}), each graded "
             + ("with the study's own judge prompt and label rule." if r.judge.count("/") >= 2 else
                "by the study's rule grader (no model), the baseline beside its judges."), "",
             f"* Agreement with the hand labels: {_pct(r.agree, r.n)}.",
             f"* Accept agreement (`{r.accept}` against any other label, the distinction the study counts): "
             f"{_pct(r.accept_agree, r.n)}.",
             f"* Planted wrong answers accepted: {len(r.planted_accepted)} of {r.planted}"
             + (f" ({', '.join(r.planted_accepted)})." if r.planted_accepted else "."),
             f"* False accepts (any item not `{r.accept}` by hand, judged `{r.accept}`): {len(r.false_accepts)}; "
             f"false rejects: {len(r.false_rejects)}.", "",
             "## By category", "",
             *table_head(["category", "planted wrong", "items", "agree", f"judged {r.accept}"])]
    for name, c in r.by_category.items():
        lines.append(table_row([name, "yes" if name in PLANTED_WRONG else "", c["n"], _pct(c["agree"], c["n"]),
                                c["accepted"]]))
    lines += ["", f"## By answer length (short: at most {SHORT_WORDS} words)", "",
              *table_head(["length", "items", "agree", f"judged {r.accept}"])]
    lines += [table_row([name, c["n"], _pct(c["agree"], c["n"]), c["accepted"]]) for name, c in r.by_length.items()]
    lines += ["", "## Confusion (rows: hand label; columns: judged label)", "",
              *table_head(["hand \\ judged", *labels])]
    lines += [table_row([hand, *(r.confusion[hand].get(j, 0) for j in labels)]) for hand in r.confusion]
    wrong = [i for i in r.items if i["judged"] != i["label"]]
    lines += ["", f"## Disagreements ({len(wrong)})", ""]
    if wrong:
        lines += table_head(["id", "category", "hand", "judged", "answer", "reply"])
        lines += [table_row([i["id"], i["category"], i["label"], i["judged"], _cut(i["answer"], 70).replace("|", "/"),
                             f"`{_cut(i['reply'], 30)}`"]) for i in wrong]
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- command-line checks

def check_model(name: str) -> None:
    """A clear error, before anything loads, for a judge model kvprobe cannot load by that name: not a registry
    name (or one not pulled yet), a tiny test model, an existing file or directory, or a Hub id (``owner/name``)."""
    from kvprobe.model_registry import REGISTRY, ModelNotInstalledError
    from kvprobe.tiny import SHAPED_MODELS, TINY_MODELS

    if name in REGISTRY:
        if not REGISTRY[name].installed():
            raise ValueError(str(ModelNotInstalledError(name)))
        return
    if name in TINY_MODELS or name in SHAPED_MODELS or Path(name).expanduser().exists():
        return
    if re.fullmatch(r"[A-Za-z0-9][\w.\-]*/[A-Za-z0-9][\w.\-]*", name) and ".." not in name:
        return  # a Hub id: the loader finds it in the cache or says why not
    raise ValueError(f"unknown judge model {name!r}: give a registry name ({', '.join(REGISTRY)}; "
                     "`kvprobe models list`), a tiny test model, a GGUF file, a model directory or a Hub id")
