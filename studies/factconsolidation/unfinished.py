"""Unfinished generation under masking (paper app:v52_fc_truncation, L4331-4465), from a run's stored rows.

Three lexical rules describe a response (L4343-4349; the exact strings and parameters in :mod:`strings`):

* **search loop** (:func:`search_loop`): reaches the token limit (the row's ``stop_reason`` is not EOS) without a
  closed ``\\boxed{}``, contains at least ``SEARCH_LOOP_MIN`` re-check phrases (``RECHECK_PHRASES``, every
  occurrence counted) and cites one fact number at least ``SEARCH_LOOP_MIN`` times (``FACT_CITATION``);
* **verbatim loop** (:func:`verbatim_loop`): more than ``REPEATED_SHARE`` of its ``NGRAM``-grams are repeated:
  of the response's n-gram positions (whitespace-separated words by default), the share whose n-gram occurs at
  least twice in the response (:func:`ngram_repeat_share`);
* **quotes a masked record** (:func:`quotes_masked_record`): one line cites a superseded record's fact number
  together with that record's subject and old value (word-bounded after SQuAD normalization). The superseded
  records are not in the rows: :func:`run_records` rebuilds each history from the run's config (the generated set
  from its seed, or the released file; no model) and its mapping, and checks the data digest first.

Then (:func:`analyse`), on the source-answerable questions (the summary's subset): per operation the answer style
(box-only, same style as full access for the same question, quoting a masked record, stopped at the limit;
the table of L4351-4370); the losses under source masking (stopped at the limit, multi-hop against questions
complete under both with a Fisher test, the search-loop rule with an exact binomial interval, verbatim loops among
the capped losses, capped losses holding the reference without a final box and what recompute does with them, and
the full-access median lengths of lost and kept answers; L4372-4391); exact McNemar of same style, source mask
against recompute, and Fisher of box-only between recompute at the longest tier and full access at the shortest
(L4404-4412). Over every question of each history (L4393-4399): generated tokens under each operation over full
access, a ratio of sums with a percentile interval from a bootstrap over components of questions that share an
original MQuAKE case (L4337-4341; :func:`question_components`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from statistics import median
from typing import Any

from kvprobe.readouts.stats import DRAWS, clopper_pearson, connected_components, fisher_exact, \
    group_bootstrap_weights, mcnemar_exact, percentile_interval, small_sample, weighted_sums
from kvprobe.studies.common.answers import boxed_content, contains_answer, normalize_answer
from kvprobe.studies.common.formatting import share
from kvprobe.studies.common.claims import judge
from kvprobe.studies.common.report import table_head, table_row

from . import strings
from .claims import REPORT_CLAIMS, token_ratio_measurement
from .mapping import Superseded

Key = tuple[str, str]

#: Answer styles (:func:`style`). "box-only" (default): a box-only answer or another; "three-way": box-only, text
#: with a closed box, no box. UNCLEAR (the paper does not define a style): the paper's counts fit the box-only
#: split only (Qwen's source mask keeps the full-access style in 366 of 373 questions while 37 of its 43 losses
#: run to the limit without a box, L4372-4375, L4404-4406), so it is the default.
STYLE_RULES = ("box-only", "three-way")
STYLE_RULE = "box-only"
#: Operations compared with full access (generated-token ratios; same style).
RATIO_OPERATIONS = ("source", "value", "recompute")
#: Fewer losses than this and the report calls the loss analysis not testable (ours; the paper's rest on 43 and 13).
MIN_LOSSES = 10
_CITATION = re.compile(strings.FACT_CITATION, re.IGNORECASE | re.MULTILINE)

#: The paper's numbers beside ours (L4351-4417; Qwen3.8-27B and Gemma 4 26B-A4B, 373 source-answerable questions).
PAPER = {
    "style": "Paper (373 source-answerable questions, L4359-4363, L4404-4406, L4414-4417): full access box-only Qwen3.8-27B "
             "12.1% (45), Gemma 4 0% (0); quotes a masked record: full 79.6% (297) and 64.9% (242), source mask 148 "
             "and 96, value mask 249 and 179, recompute none; stopped at 1,024 tokens under full access 6.7% (25) "
             "and 17.2% (64). Same style as full access (Qwen): source mask 366, recompute 211.",
    "ratios": "Paper (each history's 200 questions, L4393-4399): source mask / full Qwen3.8-27B 1.29 [1.18, 1.42] "
              "(32k) and 1.26 [1.16, 1.40] (64k), Gemma 4 26B-A4B 1.77 [1.53, 2.09] and 1.71 [1.48, 2.01]; recompute "
              "/ full Qwen 0.57 at both lengths, Gemma 1.09 and 1.35 (319 components, 10,000 draws).",
    "tests": "Paper (L4404-4412): same style as full access, source mask 366 of 373 against recompute 211 (exact "
             "McNemar p = 5.0e-42, Qwen3.8-27B); box-only, recompute at 64k (50,883 tokens) 103 of 189 against full "
             "access at 32k (39,528 tokens) 22 of 184 (Fisher p = 5.7e-19).",
}


# ----------------------------------------------------------------------------- the lexical rules

def recheck_count(text: str, phrases: Sequence[str] = strings.RECHECK_PHRASES) -> int:
    """Occurrences of the re-check phrases in ``text``: whole words, any case, every occurrence.

    Example: ``recheck_count("Wait, let me check. wait")`` is 3.
    """
    return sum(len(re.findall(rf"(?<!\w){re.escape(p)}(?!\w)", text, re.IGNORECASE)) for p in phrases)


def fact_citations(text: str) -> Counter[int]:
    """How many times ``text`` cites each fact number (``strings.FACT_CITATION``).

    Example: ``fact_citations("Fact 12 says X.\\n12. X is Y. See fact #3.")`` is ``Counter({12: 2, 3: 1})``.
    """
    return Counter(int(next(g for g in m.groups() if g is not None)) for m in _CITATION.finditer(text))


def search_loop(output: str, stop_reason: str, at_least: int = strings.SEARCH_LOOP_MIN,
                phrases: Sequence[str] = strings.RECHECK_PHRASES) -> bool:
    """The search-loop rule (L4344-4346): stopped at the limit, no closed box, at least ``at_least`` re-check
    phrases, and one fact number cited at least ``at_least`` times."""
    cited = fact_citations(output)
    return (stop_reason != "eos" and boxed_content(output) is None and recheck_count(output, phrases) >= at_least
            and max(cited.values(), default=0) >= at_least)


def ngram_repeat_share(units: Sequence[Hashable], n: int = strings.NGRAM) -> float | None:
    """Share of the ``n``-gram positions of ``units`` whose ``n``-gram occurs at least twice (None: fewer than ``n``
    units, so no ``n``-gram).

    Example: ``ngram_repeat_share("a b a b a".split(), 2)``: the 2-grams ab, ba, ab, ba all occur twice, so 1.0;
    ``ngram_repeat_share("a b c a b".split(), 2)``: ab, bc, ca, ab, so 2/4 = 0.5.
    """
    grams = [tuple(units[i:i + n]) for i in range(len(units) - n + 1)]
    if not grams:
        return None
    counts = Counter(grams)
    return sum(counts[g] > 1 for g in grams) / len(grams)


def words(text: str) -> list[str]:
    """The units of ``NGRAM_UNIT`` "words": whitespace-separated, as written."""
    return text.split()


def verbatim_loop(output: str, n: int = strings.NGRAM, share: float = strings.REPEATED_SHARE) -> bool:
    """The verbatim-loop rule (L4346-4347): more than ``share`` of the response's ``n``-grams of words repeated."""
    s = ngram_repeat_share(words(output), n)
    return s is not None and s > share


def quotes_masked_record(output: str, records: Iterable[Superseded]) -> bool:
    """The quotation rule (L4347-4349): some line of ``output`` cites the fact number of one of the superseded
    ``records`` (``FACT_CITATION``) and holds that record's subject and old value (word-bounded after SQuAD
    normalization)."""
    by_number: dict[int, list[Superseded]] = {}
    for r in records:
        by_number.setdefault(r.number, []).append(r)
    for line in output.splitlines():
        for number in fact_citations(line):
            for r in by_number.get(number, ()):
                if contains_answer(line, [r.subject]) and contains_answer(line, [r.old_object]):
                    return True
    return False


def style(row: Mapping[str, Any], rule: str = STYLE_RULE) -> str:
    """An answer's style (:data:`STYLE_RULES`): ``"box only"`` or ``"other"``; three-way: ``"box only"``,
    ``"text and box"`` or ``"no box"``."""
    if rule not in STYLE_RULES:
        raise ValueError(f"style rule {rule!r} is not one of {STYLE_RULES}")
    if row["only_box"]:
        return "box only"
    if rule == "box-only":
        return "other"
    return "text and box" if row["valid_box"] else "no box"


# ----------------------------------------------------------------------------- records and components

def run_records(out_dir: Path | str, case_ids: Iterable[str]) -> tuple[dict[str, tuple[Superseded, ...]] | None, str]:
    """Each history's superseded records, rebuilt from the run's config (no model), and a note: ``(None, why)``
    when the config is missing, its data cannot be rebuilt, their digest differs from the run's, or a history of
    the rows is not among them."""
    from kvprobe.published_data import MissingExtraError
    from .study import study_from_config

    path = Path(out_dir) / "config.json"
    if not path.exists():
        return None, "no config.json"
    config = json.loads(path.read_text())
    try:
        study = study_from_config(config)
        cases = {c.case_id: c.mapping().superseded for c in study.cases()}
        digest = study.data_sha256()
    except (OSError, MissingExtraError, ValueError, KeyError, TypeError) as e:
        return None, f"the run's data could not be rebuilt ({type(e).__name__}: {e})"
    if digest != config.get("study_config", {}).get("data_sha256"):
        return None, "the rebuilt data's digest differs from the run's"
    if missing := sorted(set(case_ids) - set(cases)):
        return None, f"history {missing[0]} is not in the rebuilt data"
    return cases, "rebuilt from the run's config"


def mquake_cases(path: str | Path) -> dict[str, list[int]]:
    """Question text (casefolded) -> the MQuAKE cases asking it (multi-hop questions, single-hop and new single-hop
    questions), from a released MQuAKE file."""
    from kvprobe.studies.datasets.mquake.schema import load_mquake

    out: dict[str, list[int]] = {}
    for case in load_mquake(path):
        for q in [*case.questions, *(h.question for h in [*case.single_hops, *case.new_single_hops])]:
            ids = out.setdefault(q.strip().casefold(), [])
            if case.case_id not in ids:
                ids.append(case.case_id)
    return out


def question_components(questions: Mapping[Key, str], cases: Mapping[str, Sequence[int]] | None = None
                        ) -> dict[Key, str]:
    """Bootstrap units: connected components of questions that share an original MQuAKE case (L4339-4341).

    ``questions``: (history, qa_pair_id) -> question text. A question is linked to the MQuAKE cases that ask its
    text (``cases``, :func:`mquake_cases`), and to every question with the same text (casefolded, e.g. the same
    question in two histories); without ``cases`` (the generated set, whose questions have no MQuAKE case, or a run
    without an MQuAKE file) only the second link applies. Returns question -> its component's label.

    Example: questions ``a`` "Q1" and ``b`` "Q2" that one MQuAKE case asks, and ``c`` "Q3", form components
    ``{a, b}`` and ``{c}``.
    """
    names = {k: f"{k[0]}\t{k[1]}" for k in questions}
    links = {}
    for k, text in questions.items():
        t = text.strip().casefold()
        links[names[k]] = [f"text:{t}", *(f"case:{c}" for c in (cases or {}).get(t, ()))]
    labels = connected_components(links)
    return {k: labels[names[k]] for k in questions}


# ----------------------------------------------------------------------------- the analyses

def answer_styles(by: Mapping[str, Mapping[Key, dict[str, Any]]], keys: Sequence[Key],
                  records: Mapping[str, Sequence[Superseded]] | None, rule: str = STYLE_RULE) -> list[dict[str, Any]]:
    """Per operation over the ``keys`` it answered: box-only, same style as full access (None for full), quotes a
    masked record (None without ``records``), stopped at the limit (the table of L4351-4370); and, beyond the
    paper's table, how many answers meet the search-loop and the verbatim-loop rules, and how many capped ones are
    verbatim loops."""
    full = by.get("full", {})
    out = []
    for p, rows in by.items():
        mine = [k for k in keys if k in rows]
        same = None
        if p != "full":
            paired = [k for k in mine if k in full]
            same = {"k": sum(style(rows[k], rule) == style(full[k], rule) for k in paired), "n": len(paired)}
        out.append({"policy": p, "n": len(mine), "box_only": sum(bool(rows[k]["only_box"]) for k in mine),
                    "same_style": same,
                    "quotes_masked": None if records is None else
                    sum(quotes_masked_record(rows[k]["output"], records[k[0]]) for k in mine),
                    "capped": sum(rows[k]["stop_reason"] != "eos" for k in mine),
                    "search_loop": sum(search_loop(rows[k]["output"], rows[k]["stop_reason"]) for k in mine),
                    "verbatim_loop": sum(verbatim_loop(rows[k]["output"]) for k in mine),
                    "capped_verbatim_loop": sum(verbatim_loop(rows[k]["output"]) for k in mine
                                                if rows[k]["stop_reason"] != "eos")})
    return out


def source_losses(by: Mapping[str, Mapping[Key, dict[str, Any]]], keys: Sequence[Key]) -> dict[str, Any] | None:
    """Complete + EOS answers under full access that the source mask loses (L4372-4391), against the questions
    complete under both; None without both operations. Rows carry ``outcome`` (capped first)."""
    if "full" not in by or "source" not in by:
        return None
    full, source = by["full"], by["source"]
    paired = [k for k in keys if k in full and k in source]
    lost = [k for k in paired if full[k]["outcome"] == "complete" and source[k]["outcome"] != "complete"]
    kept = [k for k in paired if full[k]["outcome"] == "complete" and source[k]["outcome"] == "complete"]
    capped = [k for k in lost if source[k]["stop_reason"] != "eos"]
    lost_mh, kept_mh = (sum(full[k]["hop"] == "mh" for k in ks) for ks in (lost, kept))
    loops = sum(search_loop(source[k]["output"], source[k]["stop_reason"]) for k in lost)
    answer_no_box = [k for k in capped if source[k]["official_match"] and boxed_content(source[k]["output"]) is None]
    recompute = by.get("recompute", {})
    return {"n": len(paired), "lost": len(lost), "kept": len(kept), "capped": len(capped),
            "multihop": {"lost": lost_mh, "kept": kept_mh,
                         "fisher": fisher_exact([[lost_mh, len(lost) - lost_mh], [kept_mh, len(kept) - kept_mh]])
                         if lost and kept else None},
            "search_loop": {"k": loops, "n": len(lost), "ci": clopper_pearson(loops, len(lost))},
            "verbatim_capped": sum(verbatim_loop(source[k]["output"]) for k in capped),
            "answer_without_box": len(answer_no_box),
            "recompute_complete": (sum(recompute[k]["outcome"] == "complete" for k in answer_no_box if k in recompute)
                                   if recompute else None),
            "median_full_tokens": {"lost": median(full[k]["output_tokens"] for k in lost) if lost else None,
                                   "kept": median(full[k]["output_tokens"] for k in kept) if kept else None}}


def token_ratios(by: Mapping[str, Mapping[Key, dict[str, Any]]], units: Mapping[Key, str], draws: int = DRAWS,
                 seed: int = 0, operations: Sequence[str] = RATIO_OPERATIONS) -> list[dict[str, Any]]:
    """Per history and operation: generated tokens under the operation over full access, summed over the history's
    questions both answered (a ratio of sums), with a 95% percentile interval from ``draws`` bootstrap draws of the
    ``units`` (question -> component, :func:`question_components`); one set of draws per history, shared by its
    operations (seeded with ``seed``)."""
    full = by.get("full", {})
    out = []
    for history in sorted({c for c, _ in full}):
        keys = sorted(k for k in full if k[0] == history)
        groups = [units[k] for k in keys]
        weights = group_bootstrap_weights(groups, n_draws=draws, seed=seed)
        base = [full[k]["output_tokens"] for k in keys]
        row = {"history": history, "tier": full[keys[0]].get("tier"), "questions": len(keys),
               "components": len(set(groups)), "full_tokens": sum(base), "ratios": {}}
        for p in operations:
            if p not in by or not all(k in by[p] for k in keys):
                continue
            mine = [by[p][k]["output_tokens"] for k in keys]
            with_draws = weighted_sums(weights, mine) / weighted_sums(weights, base)
            row["ratios"][p] = {"tokens": sum(mine), "ratio": sum(mine) / sum(base) if sum(base) else None,
                                "ci": percentile_interval(with_draws) if sum(base) else None}
        out.append(row)
    return out


def style_tests(by: Mapping[str, Mapping[Key, dict[str, Any]]], keys: Sequence[Key], rule: str = STYLE_RULE
                ) -> dict[str, Any]:
    """Exact McNemar of same style as full access, source mask against recompute (paired questions), and Fisher of
    box-only between recompute at the longest tier and full access at the shortest (L4404-4412; None with one tier).
    Input lengths: full = the history's tokens, recompute = the history's tokens less the source mask's hidden
    tokens (the deleted sentences, as tokenized in the history)."""
    out: dict[str, Any] = {"same_style": None, "box_only_by_length": None}
    if all(p in by for p in ("full", "source", "recompute")):
        paired = [k for k in keys if all(k in by[p] for p in ("full", "source", "recompute"))]
        same = {p: [style(by[p][k], rule) == style(by["full"][k], rule) for k in paired] for p in ("source", "recompute")}
        b = sum(s and not r for s, r in zip(same["source"], same["recompute"]))
        c = sum(r and not s for s, r in zip(same["source"], same["recompute"]))
        out["same_style"] = {"n": len(paired), "source": sum(same["source"]), "recompute": sum(same["recompute"]),
                             "source_only": b, "recompute_only": c, "p": mcnemar_exact(b, c)}
    tiers = sorted({by["full"][k]["tier"] for k in keys if k in by.get("full", {})},
                   key=lambda t: _mean_tokens(by["full"], keys, t)) if "full" in by else []
    if len(tiers) >= 2 and "recompute" in by and "source" in by:
        short, long = tiers[0], tiers[-1]
        rec = [k for k in keys if k in by["recompute"] and by["recompute"][k]["tier"] == long and k in by["source"]]
        ful = [k for k in keys if k in by["full"] and by["full"][k]["tier"] == short]
        a, b = (sum(bool(by[p][k]["only_box"]) for k in ks) for p, ks in (("recompute", rec), ("full", ful)))
        out["box_only_by_length"] = {
            "recompute_tier": long, "full_tier": short, "recompute": {"k": a, "n": len(rec)},
            "full": {"k": b, "n": len(ful)},
            "recompute_input_tokens": _mean([by["full"][k]["history_tokens"] - by["source"][k]["hidden_tokens"]
                                             for k in rec if k in by["full"]]),
            "full_input_tokens": _mean([by["full"][k]["history_tokens"] for k in ful]),
            "fisher": fisher_exact([[a, len(rec) - a], [b, len(ful) - b]]) if rec and ful else None}
    return out


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _mean_tokens(rows: Mapping[Key, dict[str, Any]], keys: Sequence[Key], tier: str) -> float:
    return _mean([rows[k]["history_tokens"] for k in keys if k in rows and rows[k]["tier"] == tier]) or 0.0


def analyse(out_dir: Path | str, by: Mapping[str, Mapping[Key, dict[str, Any]]], keys: Sequence[Key],
            draws: int = DRAWS, seed: int = 0) -> dict[str, Any] | None:
    """The unfinished-generation analysis of a run (module docstring); None when its rows keep no output text.

    ``by``: operation -> (history, qa_pair_id) -> row with ``outcome``; ``keys``: the source-answerable questions.
    """
    rows = [r for mine in by.values() for r in mine.values()]
    if not rows or any("output" not in r for r in rows):
        return None
    full = by.get("full", {})
    records, note = run_records(out_dir, {c for c, _ in full})
    cases = None
    config = Path(out_dir) / "config.json"
    mquake = json.loads(config.read_text()).get("study_config", {}).get("mquake_file") if config.exists() else None
    if mquake is not None:
        try:
            cases = mquake_cases(mquake)
        except (OSError, ValueError) as e:
            note += f"; MQuAKE cases unavailable ({type(e).__name__}), components from question text only"
    units = question_components({k: r["question"] for k, r in full.items()}, cases)
    return {"questions": len(keys), "full_complete": sum(full[k]["outcome"] == "complete" for k in keys if k in full),
            "style_rule": STYLE_RULE, "records": note, "component_rule": "MQuAKE case and question text"
            if cases is not None else "question text", "styles": answer_styles(by, keys, records),
            "losses": source_losses(by, keys), "ratios": token_ratios(by, units, draws, seed),
            "tests": style_tests(by, keys), "draws": draws, "seed": seed,
            "rules": {"recheck_phrases": list(strings.RECHECK_PHRASES), "at_least": strings.SEARCH_LOOP_MIN,
                      "ngram": strings.NGRAM, "unit": strings.NGRAM_UNIT, "repeated_share": strings.REPEATED_SHARE}}


# ----------------------------------------------------------------------------- verdicts and report

def ratio_verdict(ratio: dict[str, Any] | None, full_complete: int, n: int) -> str:
    """The paper's "masking lengthens generation" (source mask / full above 1) for one history's ratio: the claim
    ``factconsolidation.lengthens`` of ``claims.py`` judged (``studies.common.claims.judge``) on
    ``claims.token_ratio_measurement``, null 1: not testable when full access, the reference arm, is at the floor
    (its complete + EOS answers); then what the interval alone says, in parentheses."""
    (lengthens,) = REPORT_CLAIMS
    m = token_ratio_measurement(ratio, full_complete, n)
    if m.ci is None or not m.not_testable:
        return judge(lengthens, m)
    alone = judge(lengthens, token_ratio_measurement(ratio, full_complete, n, floor=False))
    return f"{judge(lengthens, m)} (full access {full_complete}/{n}; interval alone: {alone})"


def _p(p: float) -> str:
    return f"{p:.2g}" if p < 0.01 else f"{p:.2f}"


def report_lines(u: dict[str, Any] | None, max_new_tokens: Any) -> list[str]:
    """The report's section (Markdown lines)."""
    head = ["## Unfinished generation under masking", ""]
    if u is None:
        return head + ["Not in this run (its rows keep no output text).", ""]
    rules = u["rules"]
    lines = head + [
        f"The paper's three lexical rules (L4343-4349). Search loop: stopped at the {max_new_tokens}-token limit "
        f"without a closed box, at least {rules['at_least']} re-check phrases ({', '.join(repr(p) for p in rules['recheck_phrases'])}; "
        f"every occurrence, any case) and one fact number cited at least {rules['at_least']} times. Verbatim loop: "
        f"more than {rules['repeated_share']:.0%} of the response's {rules['ngram']}-grams of {rules['unit']} occur "
        "at least twice in it. Quotes a masked record: one line cites a superseded record's fact number with its "
        f"subject and old value (records: {u['records']}). Style: {u['style_rule']} rule (a box-only answer or "
        "another; the paper does not define a style).", ""]
    styles = u["styles"]
    n = styles[0]["n"] if styles else 0
    lines += [f"Answer style per operation (of the {n} source-answerable questions; the paper's table, L4351-4370, "
              "and the two loop rules beside it):", "",
              *table_head(["operation", "box-only", "same style as full access", "quotes a masked record",
                           f"stopped at {max_new_tokens} tokens", "search loop", "verbatim loop",
                           "capped verbatim loops"])]
    for s in styles:
        same = s["same_style"]
        lines.append(table_row([s["policy"], share(s["box_only"], s["n"]),
                                "-" if same is None else share(same["k"], same["n"]),
                                "not computable" if s["quotes_masked"] is None else share(s["quotes_masked"], s["n"]),
                                share(s["capped"], s["n"]), share(s["search_loop"], s["n"]),
                                share(s["verbatim_loop"], s["n"]), f"{s['capped_verbatim_loop']} of {s['capped']}"]))
    lines += ["", _quotation_sentence(styles), "", PAPER["style"], ""]
    lines += _loss_lines(u["losses"]) + _ratio_lines(u) + _test_lines(u["tests"])
    return lines


def _quotation_sentence(styles: list[dict[str, Any]]) -> str:
    """Whether the paper's "masked records remain quotable" (source and value masks quote fewer superseded records
    than full access, recompute none) can be read off this run."""
    by = {s["policy"]: s["quotes_masked"] for s in styles}
    if by.get("full") is None:
        return "Quotation of superseded records: not computable in this run (no records)."
    if by["full"] == 0:
        return ("No full-access answer quotes a superseded record, so the paper's \"masked records remain quotable\" "
                "is **not testable here**.")
    return ("Quotation of superseded records, full access " + str(by["full"]) + ", "
            + ", ".join(f"{p} {by[p]}" for p in ("source", "value", "recompute") if by.get(p) is not None)
            + " (descriptive, as in the paper).")


#: The paper's loss analysis per row of the losses table (L4372-4391): Qwen3.8-27B, Gemma 4 26B-A4B ("-": not given).
PAPER_LOSSES = {
    "lost": ("43", "13"),
    "capped": ("37", "12"),
    "multihop": ("37 of 43 against 102 of 293 (Fisher p = 1.5e-10)", "5 of 13"),
    "search_loop": ("37 of 43 (86%) [72, 95]%", "-"),
    "verbatim": ("3 of 37", "8 of 12"),
    "answer_without_box": ("27 of 37 (73.0%)", "-"),
    "recompute_complete": ("25 of 27", "-"),
    "medians": ("351 / 143", "166 / 82"),
}


def _loss_lines(loss: dict[str, Any] | None) -> list[str]:
    if loss is None:
        return ["Losses under source masking: not in this run (it needs full access and the source mask).", ""]
    mh, sl, med = loss["multihop"], loss["search_loop"], loss["median_full_tokens"]
    fisher = "no Fisher test" if mh["fisher"] is None else f"Fisher p = {_p(mh['fisher']['p'])}"
    ci = "" if sl["ci"] is None else f" [{100 * sl['ci'][0]:.0f}, {100 * sl['ci'][1]:.0f}]%"

    def tokens(x: float | None) -> str:
        return "-" if x is None else f"{x:g}"

    ours = {"lost": f"{loss['lost']} (of {loss['n']}; {loss['kept']} complete under both)",
            "capped": str(loss["capped"]),
            "multihop": f"{mh['lost']} of {loss['lost']} against {mh['kept']} of {loss['kept']} ({fisher})",
            "search_loop": f"{sl['k']} of {sl['n']}{ci}",
            "verbatim": f"{loss['verbatim_capped']} of {loss['capped']}",
            "answer_without_box": f"{loss['answer_without_box']} of {loss['capped']}",
            "recompute_complete": "-" if loss["recompute_complete"] is None else
            f"{loss['recompute_complete']} of {loss['answer_without_box']}",
            "medians": f"{tokens(med['lost'])} / {tokens(med['kept'])}"}
    what = {"lost": "complete + EOS under full access, lost under the source mask",
            "capped": "of them, stopped at the limit",
            "multihop": "multi-hop: losses against questions complete under both",
            "search_loop": "losses meeting the search-loop rule (95% exact interval)",
            "verbatim": "capped losses that are verbatim loops",
            "answer_without_box": "capped losses holding a reference string without a final box",
            "recompute_complete": "of those, complete + EOS under recompute",
            "medians": "full-access median generated tokens, lost / kept"}
    lines = ["Losses under source masking, beside the paper's (L4372-4391):", "",
             *table_head(["", "ours", "Qwen3.8-27B", "Gemma 4 26B-A4B"]),
             *[table_row([what[k], ours[k], *PAPER_LOSSES[k]]) for k in what], ""]
    if loss["lost"] < MIN_LOSSES:
        lines += [f"With {loss['lost']} loss(es) the loss analysis is **not testable here** (the paper's rests on 43 "
                  "and 13).", ""]
    return lines


def _ratio_lines(u: dict[str, Any]) -> list[str]:
    ratios = u["ratios"]
    ops = [p for p in RATIO_OPERATIONS if any(p in r["ratios"] for r in ratios)]
    lines = [f"Generated tokens over full access, per history (ratio of sums over its questions; 95% percentile "
             f"interval from {u['draws']:,} bootstrap draws of components of questions that share an original "
             f"MQuAKE case, here linked by {u['component_rule']}), and whether the source mask lengthens generation "
             "(the scorecard's rule, null 1; not testable while full access is below its floor):", "",
             *table_head(["history", "questions", "components", "full tokens", *[f"{p} / full" for p in ops],
                          "source lengthens"])]
    for r in ratios:
        cells = []
        for p in ops:
            x = r["ratios"].get(p)
            cells.append("-" if x is None or x["ratio"] is None else f"{x['ratio']:.2f} [{x['ci'][0]:.2f}, {x['ci'][1]:.2f}]")
        lines.append(table_row([r["history"], r["questions"], r["components"], r["full_tokens"], *cells,
                                ratio_verdict(r["ratios"].get("source"), u["full_complete"], u["questions"])]))
    flagged = [r["history"] for r in ratios if small_sample(r["components"])]
    lines += [""]
    if flagged:
        lines += [f"**Small sample:** {', '.join(flagged)} rest on fewer than 20 components; read as descriptive.", ""]
    lines += ["Each interval is conditional on its history (its questions resampled, its facts fixed), as the "
              "paper's; answers are capped at the run's budget, so a ratio counts capped answers at the cap.", "",
              PAPER["ratios"], ""]
    return lines


def _test_lines(t: dict[str, Any]) -> list[str]:
    lines = []
    s = t["same_style"]
    if s is None:
        lines.append("Same style, source mask against recompute: not in this run (it needs full, source and "
                     "recompute).")
    else:
        constant = s["source"] == s["n"] and s["recompute"] == s["n"]
        lines.append(f"Same style as full access, source mask {s['source']} of {s['n']} against recompute "
                     f"{s['recompute']} ({s['source_only']} same under the source mask only, {s['recompute_only']} "
                     f"under recompute only; exact McNemar p = {_p(s['p'])})"
                     + (": every answer keeps its style, so the comparison is **not testable here**." if constant
                        else "."))
    b = t["box_only_by_length"]
    if b is None:
        lines.append("Box-only by length (recompute at the longest tier against full access at the shortest, Fisher): "
                     "not in this run (one length tier).")
    else:
        f = b["fisher"]
        lines.append(f"Box-only: recompute at {b['recompute_tier']} (mean input {b['recompute_input_tokens']:,.0f} "
                     f"tokens) {b['recompute']['k']} of {b['recompute']['n']} against full access at {b['full_tier']} "
                     f"({b['full_input_tokens']:,.0f} tokens) {b['full']['k']} of {b['full']['n']}"
                     + ("" if f is None else f" (Fisher p = {_p(f['p'])})") + ".")
    return lines + ["", PAPER["tests"], ""]
