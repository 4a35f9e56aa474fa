"""The paper's claims the quantity study tests, with measures of the quantity runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, excludes_zero,
                                           find_entry, floor_reason, pp_measurement, read_summary, share_pp)
from kvprobe.studies.common.report import estimate

__all__ = ["CLAIMS", "QUANTITY", "QUANTITY_QWEN", "QUANTITY_QWEN_CONTROLS", "QUANTITY_RUNS", "quantity_change", "quantity_change_measurement",
           "quantity_margin", "quantity_margin_follows_old", "quantity_margin_measurement", "quantity_recompute",
           "quantity_spearman", "quantity_change_by_unit", "quantity_vs_source", "quantity_warning",
           "quantity_warning_within_unit"]


QUANTITY = "quantity/smollm2-135m-instruct"
QUANTITY_QWEN = "quantity/qwen2.5-coder-1.5b-instruct"
#: The committed quantity runs, one per model (the first writes no JSON answer, the second does).
QUANTITY_RUNS = (QUANTITY, QUANTITY_QWEN)
#: Qwen2.5-Coder-1.5B with ``--operation-controls``: each operation also on its own equal-token control.
QUANTITY_QWEN_CONTROLS = "quantity/qwen2.5-coder-1.5b-instruct-operation-controls"


def _quantity_cell(s: dict[str, Any], information: str, condition: str, relation: str = "replacement",
                   query: str = "current") -> dict[str, Any]:
    return find_entry(s["cells"], relation=relation, information=information, query=query, condition=condition)


def quantity_margin_measurement(s: dict[str, Any], information: str, condition: str = "source") -> Measurement:
    """Margin change of ``condition`` (the whole-source mask, or an operation on it in a run with
    ``--operation-controls``) against its own equal-token control (replacements, current question) in a summary
    ``s``; no interval when it gives none.

    The run's report (``summary.claim_rows``) and the scorecard (:func:`quantity_margin`) both judge this
    measurement.
    """
    cell = _quantity_cell(s, information, condition)
    m = cell.get("margin_change_vs_control")
    if m is None:
        raise KeyError(f"the run has no {condition}-control (an operation's own control needs --operation-controls)")
    return Measurement(m["mean"], tuple(m["ci"]) if m["ci"] else None, "nats", "+.2f", f"{cell['n']} groups",
                       f"{condition}-control", units=cell["n"])


def quantity_margin(information: str, condition: str = "source") -> Callable[[Path], Measurement]:
    """:func:`quantity_margin_measurement` of a committed run."""
    def measure(run: Path) -> Measurement:
        return quantity_margin_measurement(read_summary(run), information, condition)
    return measure


def quantity_spearman(decomposition: dict[str, Any], information: str) -> Measurement:
    """Spearman(Delta m, D_o) over the replacements' current question (source mask vs its control) in a summary's
    ``candidate_decomposition``; no interval when it gives none.

    The run's report (``summary._decomposition_lines``) and the scorecard (:func:`quantity_margin_follows_old`)
    both judge this measurement.
    """
    e = decomposition["per_information"][information]
    ci = e["spearman_ci"]
    return Measurement(e["spearman_delta_m_d_o"], tuple(ci) if ci else None, "Spearman", ".2f", f"{e['n']} groups",
                       "source-control", units=e["n"])


def quantity_margin_follows_old(information: str) -> Callable[[Path], Measurement]:
    """:func:`quantity_spearman` of a committed run."""
    def measure(run: Path) -> Measurement:
        return quantity_spearman(read_summary(run)["candidate_decomposition"], information)
    return measure


def quantity_change_measurement(s: dict[str, Any], information: str, condition: str, rule: str,
                                reference: str = "control") -> Measurement:
    """Answer change (pp) of a mask against a fixed reference arm in a summary ``s``, under ``rule``: a summary
    column, ``complete`` (the paper's complete answer) or ``lenient_complete`` (ours). ``reference``: ``control``
    (the mask's equal-token control, the paper's) or ``full`` (full access, the paper's second reference: "the same
    six lose answers against either"), a property of the claim, never chosen from the results. Against the
    control, the note gives the control's own change against full access (flagged "not neutral" when its interval
    excludes 0), so a control that moves answers is visible. Not testable when the reference arm is at the floor;
    no interval when the summary gives none.

    The run's report (``summary.claim_rows``) and the scorecard (:func:`quantity_change`) both judge this
    measurement.
    """
    if reference not in ("control", "full"):
        raise ValueError(f"reference {reference!r} is not 'control' or 'full'")
    cell = _quantity_cell(s, information, condition)
    control_name = f"{condition}-control"
    control = _quantity_cell(s, information, control_name)
    own = control[f"{rule}_vs_full"]
    own_text = (f"{control_name} against full access: {estimate(*share_pp(own['net'], own['net_ci']), '+.1f')} pp"
                if own["net_ci"] is not None else f"{control_name} against full access: {100 * own['net']:+.1f} pp")
    if reference == "control":
        ref_cell, change, ref_name = control, cell[f"{rule}_vs_control"], control_name
        note = own_text + (" (not neutral)" if own["net_ci"] is not None and excludes_zero(own["net_ci"]) else "")
    else:
        ref_cell, change, ref_name, note = _quantity_cell(s, information, "full"), cell[f"{rule}_vs_full"], "full", ""
    value, ci = (100 * change["net"], None) if change["net_ci"] is None else share_pp(change["net"], change["net_ci"])
    return pp_measurement(value, ci, f"{cell['n']} groups", f"{ref_name} {ref_cell[rule]}/{ref_cell['n']}",
                          floor_reason(ref_cell[rule], ref_cell["n"], ref_name), units=cell["n"], note=note,
                          answers=cell["n"])


def quantity_change(information: str, condition: str, rule: str,
                    reference: str = "control") -> Callable[[Path], Measurement]:
    """:func:`quantity_change_measurement` of a committed run against the claim's ``reference`` arm."""
    def measure(run: Path) -> Measurement:
        return quantity_change_measurement(read_summary(run), information, condition, rule, reference)
    return measure


def quantity_vs_source(condition: str, information: str, rule: str) -> Callable[[Path], Measurement]:
    """An operation on the source-masked cache (``recompute``, ``rebuild``, ``compact``) against the source mask
    (the paper's reference for its deletion panel and its state operations) under ``rule``; not testable when
    the source mask is at the floor."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        cell, source = _quantity_cell(s, information, condition), _quantity_cell(s, information, "source")
        reason = floor_reason(source[rule], source["n"], "source mask")
        reference = f"source mask {source[rule]}/{source['n']}; {condition} {cell[rule]}/{cell['n']}"
        change = cell[f"{rule}_vs_source"]
        value, ci = share_pp(change["net"], change["net_ci"])
        return pp_measurement(value, ci, f"{cell['n']} groups", reference, reason, units=cell["n"],
                              note=f"{change['corrections']}/{change['reversals']} corrections/reversals",
                              answers=cell["n"])
    return measure


def quantity_recompute(information: str, rule: str) -> Callable[[Path], Measurement]:
    """Text recompute against the source mask (the paper's comparison) under ``rule``
    (:func:`quantity_vs_source` of ``recompute``)."""
    return quantity_vs_source("recompute", information, rule)


def quantity_change_by_unit(information: str, rule: str, reference: str = "control") -> Callable[[Path], Measurement]:
    """The source mask's answer change against ``reference`` (``control``: its equal-token control; ``full``) with
    the unit-cluster bootstrap's interval (``summary.json`` ``unit_cluster``: the units resampled, not the groups),
    a secondary view of :func:`quantity_change`: its resampled units are the units."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        e = s["unit_cluster"]["per_information"][information]
        c = e["rules"][rule]["source_vs_control" if reference == "control" else "source_vs_full"]
        ref_name = "source-control" if reference == "control" else "full"
        ref = _quantity_cell(s, information, ref_name)
        value, ci = share_pp(c["net"], c["unit_ci"])
        return pp_measurement(value, ci, f"{e['n']} groups in {e['units']} units", f"{ref_name} {ref[rule]}/{ref['n']}",
                              floor_reason(ref[rule], ref["n"], ref_name), units=e["units"], answers=e["n"],
                              note=f"group bootstrap {estimate(*share_pp(c['net'], c['group_ci']), '+.1f')} pp")
    return measure


def quantity_warning_within_unit(rule: str, information: str) -> Callable[[Path], Measurement]:
    """The warning signal's AUC within unit (``summary.json`` ``unit_cluster``: macro over the units holding both
    lost and kept answers), a secondary view of :func:`quantity_warning`."""
    def measure(run: Path) -> Measurement:
        w = read_summary(run)["unit_cluster"]["per_information"][information]["warning_within_unit"][rule]
        mixed = [u for u in w["per_unit"] if u["auc"] is not None]
        n = (", ".join(f"{u['unit']}: {u['lost']} lost, {u['kept']} kept" for u in mixed) or
             "no unit with lost and kept answers")
        units = sum(u["lost"] + u["kept"] for u in mixed)
        if w["auc"] is None or w["auc_ci"] is None:
            return Measurement(None, None, "AUC", ".3f", n, null=0.5, units=units,
                               not_testable="AUC within unit undefined: no unit holds both lost and kept answers")
        return Measurement(w["auc"], tuple(w["auc_ci"]), "AUC", ".3f", n, "chance 0.5", null=0.5, units=units,
                           note=f"{w['draws_kept']} draws keep both classes in every unit")
    return measure


def quantity_warning(rule: str, information: str) -> Callable[[Path], Measurement]:
    """AUC of the current answer's probability drop D_c ranking lost above kept answers."""
    def measure(run: Path) -> Measurement:
        w = read_summary(run)["warning_signal"][rule][information]
        n = f"{w['lost']} lost, {w['kept']} kept"
        units = w["lost"] + w["kept"]  # one replacement case per group: the group bootstrap resamples them
        if w["auc"] is None:
            return Measurement(None, None, "AUC", ".3f", n, null=0.5, units=units,
                               not_testable=f"AUC undefined: {w['lost']} lost and {w['kept']} kept answers "
                               "(a class is empty)")
        return Measurement(w["auc"], tuple(w["auc_ci"]), "AUC", ".3f", n, "chance 0.5", null=0.5, units=units)
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("quantity.margin", "quantity",
          "Hiding record A raises the current-minus-old margin beyond the equal-token control",
          Paper("Whole-source masking raises the current-versus-old margin in all eight generators, by "
                "7.06--22.81 nats relative to the control", (357, 358),
                "Preferring the New Value Does Not Ensure a Complete Answer", "+7.06 to +22.81 nats, eight models"),
          "up",
          tuple(Test(run, "candidate margin; source mask vs source-control; 60 replacements, B refers to A's unit",
                     quantity_margin("unit_from_a")) for run in QUANTITY_RUNS),
          reference="source-control", units="groups"),
    Claim("quantity.margin-follows-old", "quantity",
          "The margin gain follows the old answer's drop D_o",
          Paper("The margin gain accordingly follows the old answer", (4129, 4129),
                "Candidate Margin and Answer Likelihood",
                "Spearman 0.91-0.99 in seven models, 0.67 in Qwen3-4B", (4129, 4131)),
          "up",
          tuple(Test(run, "Spearman(Delta m, D_o); source mask vs source-control; 60 replacements, B refers to A's "
                     "unit", quantity_margin_follows_old("unit_from_a")) for run in QUANTITY_RUNS),
          reference="source-control", units="groups"),
    Claim("quantity.unit-loss", "quantity",
          "When only A states the unit, hiding A loses complete current answers against its equal-token control",
          Paper("Full access and source-mask controls both give 98.3--100% (59--60) complete answers per model; "
                "the same six lose answers against either.", (350, 352),
                "Preferring the New Value Does Not Ensure a Complete Answer",
                "full access and controls 98.3-100% (59-60 of 60); six of eight models lose answers"),
          "down",
          (*(t for run in QUANTITY_RUNS for t in (
              Test(run, f"{PAPER_RULE}: complete answer (one JSON answer field, unit, EOS); source mask vs "
                   "source-control; 60 replacements, B refers to A's unit",
                   quantity_change("unit_from_a", "source", "complete")),
              Test(run, f"{LENIENT}: right number and unit anywhere, no EOS needed; source mask vs source-control",
                   quantity_change("unit_from_a", "source", "lenient_complete"), primary=False))),
           Test(QUANTITY_QWEN, f"{PAPER_RULE}: complete answer; source mask vs source-control; unit-cluster "
                "bootstrap (the units resampled, not the groups)", quantity_change_by_unit("unit_from_a", "complete"),
                primary=False)),
          reference="source-control", units="groups"),
    Claim("quantity.unit-loss-full", "quantity",
          "When only A states the unit, hiding A loses complete current answers against full access",
          Paper("Full access and source-mask controls both give 98.3--100% (59--60) complete answers per model; "
                "the same six lose answers against either.", (350, 352),
                "Preferring the New Value Does Not Ensure a Complete Answer",
                "full access and controls 98.3-100% (59-60 of 60); six of eight models lose answers"),
          "down",
          tuple(t for run in QUANTITY_RUNS for t in (
              Test(run, f"{PAPER_RULE}: complete answer (one JSON answer field, unit, EOS); source mask vs full "
                   "access; 60 replacements, B refers to A's unit",
                   quantity_change("unit_from_a", "source", "complete", "full")),
              Test(run, f"{LENIENT}: right number and unit anywhere, no EOS needed; source mask vs full access",
                   quantity_change("unit_from_a", "source", "lenient_complete", "full"), primary=False))),
          reference="full access", units="groups"),
    Claim("quantity.number-only", "quantity",
          "Hiding only the old number keeps every current answer",
          Paper("Number-only masking leaves the unit visible and preserves 60/60 current answers in every model",
                (384, 385), "Preferring the New Value Does Not Ensure a Complete Answer", "60/60 in all eight models"),
          "none",
          tuple(t for run in QUANTITY_RUNS for t in (
              Test(run, f"{PAPER_RULE}: complete answer; number-only mask vs number-control; B refers to A's unit",
                   quantity_change("unit_from_a", "number", "complete")),
              Test(run, f"{LENIENT}; number-only mask vs number-control",
                   quantity_change("unit_from_a", "number", "lenient_complete"), primary=False))),
          reference="number-control", units="groups"),
    Claim("quantity.warning", "quantity",
          "The current answer's probability drop ranks lost above kept answers",
          Paper("It ranks lost above kept answers with AUC 0.89--0.98 in the four Qwen and Llama models that lose "
                "answers.", (375, 376), "Preferring the New Value Does Not Ensure a Complete Answer",
                "AUC 0.89-0.98, four models"),
          "up",
          (*(t for run in QUANTITY_RUNS for t in (
              Test(run, f"{PAPER_RULE}: lost/kept complete answers, B refers to A's unit",
                   quantity_warning("complete", "unit_from_a")),
              Test(run, f"{LENIENT}: lost/kept lenient answers, B refers to A's unit",
                   quantity_warning("lenient_complete", "unit_from_a"), primary=False))),
           Test(QUANTITY_QWEN, f"{PAPER_RULE}: lost/kept complete answers within unit (macro AUC over the units "
                "holding both), B refers to A's unit", quantity_warning_within_unit("complete", "unit_from_a"),
                primary=False)),
          reference="chance 0.5", units="groups"),
    Claim("quantity.recompute-unit", "quantity",
          "Deleting A's text and recomputing loses the unit-dependent answers the source mask keeps",
          Paper("Deleting old text can also remove a needed unit: on the 60 unit-dependent Qwen3-32B cases, it gives "
                "5.0% (3) complete answers, compared with 60.0% (36) under source masking", (551, 553),
                "Later Cache States Can Preserve Earlier Relations", "3/60 vs 36/60 (Qwen3-32B)"),
          "down",
          tuple(t for run in QUANTITY_RUNS for t in (
              Test(run, f"{PAPER_RULE}: complete answer; recompute vs source mask",
                   quantity_recompute("unit_from_a", "complete")),
              Test(run, f"{LENIENT}; recompute vs source mask", quantity_recompute("unit_from_a", "lenient_complete"),
                   primary=False))),
          reference="source mask", units="groups"),
    Claim("quantity.rebuild", "quantity",
          "Rebuilding the later states at fixed positions (A hidden) loses the unit-dependent answers the source "
          "mask keeps: the answer-level analogue of the paper's MQuAKE result (the paper has no quantity rebuild)",
          Paper("Rebuilding states at the original positions lowers historical accuracy by 19.8--41.3 points.",
                (539, 540), "Later Cache States Can Preserve Earlier Relations",
                "-19.8 to -41.3 pp (MQuAKE historical questions)"),
          "down",
          tuple(t for run in QUANTITY_RUNS for t in (
              Test(run, f"{PAPER_RULE}: complete answer; rebuild vs source mask; 60 replacements, B refers to A's "
                   "unit", quantity_vs_source("rebuild", "unit_from_a", "complete")),
              Test(run, f"{LENIENT}; rebuild vs source mask",
                   quantity_vs_source("rebuild", "unit_from_a", "lenient_complete"), primary=False))),
          reference="source mask", units="groups"),
    Claim("quantity.compact", "quantity",
          "Compacting the masked rows (later states kept, later keys moved back) keeps or gains the unit-dependent "
          "answers against the source mask",
          Paper("Compaction raises complete answers from 36/60 under whole-source masking to 40/60, a paired gain "
                "of 6.7 points [1.7, 13.3]", (4532, 4533), "Positions and Later States on MQuAKE",
                "Qwen3-32B 36/60 -> 40/60, +6.7 [1.7, 13.3] pp", (4531, 4533)),
          "up",
          tuple(t for run in QUANTITY_RUNS for t in (
              Test(run, f"{PAPER_RULE}: complete answer; compact vs source mask; 60 replacements, B refers to A's "
                   "unit", quantity_vs_source("compact", "unit_from_a", "complete")),
              Test(run, f"{LENIENT}; compact vs source mask",
                   quantity_vs_source("compact", "unit_from_a", "lenient_complete"), primary=False))),
          reference="source mask", units="groups"),
    Claim("quantity.compact-margin", "quantity",
          "Compaction still raises the current-minus-old margin against compaction's own equal-token control",
          Paper("Each control applies the same operation to an equal number of unrelated-note tokens.", (4540, 4540),
                "Positions and Later States on MQuAKE", "Qwen3-32B +7.86 [+7.09, +8.70] nats (masking +7.35)",
                (4531, 4546)),
          "up",
          (Test(QUANTITY_QWEN_CONTROLS, "candidate margin; compact vs compact-control; 60 replacements, B refers to "
                "A's unit", quantity_margin("unit_from_a", "compact")),),
          reference="compact-control", units="groups"),
    Claim("quantity.recompute-margin", "quantity",
          "Text recomputation still raises the current-minus-old margin against recomputation's own equal-token "
          "control",
          Paper("Each control applies the same operation to an equal number of unrelated-note tokens.", (4540, 4540),
                "Positions and Later States on MQuAKE", "Qwen3-32B +2.31 [+1.45, +3.14] nats (masking +7.35)",
                (4531, 4546)),
          "up",
          (Test(QUANTITY_QWEN_CONTROLS, "candidate margin; recompute vs recompute-control; 60 replacements, B refers "
                "to A's unit", quantity_margin("unit_from_a", "recompute")),),
          reference="recompute-control", units="groups"),
)
