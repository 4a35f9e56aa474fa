"""Readout transfer between paired checkpoints (spec E8, "Readout transfer").

Paper: a joint-K/V linear readout on the 570-history recognition panel, features
mean-pooled over the later record at depths floor(L/4), floor(L/2), floor(3L/4),
L-1, projected to 128, standardized on train, balanced logistic regression, one
of 4 regularization strengths chosen on development role AUC (15 role swaps x 15
role confirmations), tested on 50 role swaps vs 50 role confirmations; *own* =
trained and tested on the main model, *transfer* = trained on the sibling and
tested on the main model, with C chosen on the sibling's dev split (the paper's
supplement also reports choosing on the main model's dev split: ours is
``transfer_main_dev_C``).

Everything is reused from ``readouts`` and ``extract``: the dataset
(``studies.datasets.recognition.records``, 95 items x 6 variants), the joint encoding
(``extract.capture.encode``: B read after A, templateless, newline separator, K
and V exactly as cached), the depths (``readouts.evaluate.probe_depths`` /
``nearest``), the probe and the C grid {0.01, 0.1, 1, 10}
(``readouts.probes.select_C`` / ``BalancedL2Probe``), and tie-aware AUCs with
10,000 item-bootstrap draws (``readouts.stats.bootstrap_auc``).

Two entry points: :func:`readout_transfer` encodes the joint records with both
in-memory models (float32 token means; only the joint records, no hidden
states), and :func:`transfer_from_store` evaluates two groups of an existing
``kvprobe extract`` store (float16 pooled features) through
``readouts.evaluate.transfer``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from kvprobe.extract.capture import RecordSpec, encode
from kvprobe.files import atomic_write_text
from kvprobe.model import Model
from kvprobe.readouts.evaluate import ROLE_VARIANTS, nearest, probe_depths
from kvprobe.readouts.probes import C_GRID, BalancedL2Probe, select_C
from kvprobe.readouts.stats import DRAWS, auc, bootstrap_auc
from kvprobe.studies.datasets.recognition.cases import RecognitionCase
from kvprobe.studies.datasets.recognition.records import generate_records

from .checks import CompatibilityError, check_architectures

TRANSFER_FILE = "transfer.json"


def kv_depths(model: Model) -> list[int]:
    """The probe depths mapped to layers that store K/V rows (as ``readouts.evaluate.features``)."""
    return [nearest(d, model.arch.kv_layers) for d in probe_depths(model.arch.num_layers)]


def joint_kv_features(model: Model, cases: Sequence[RecognitionCase], batch_size: int = 16
                      ) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per case: B's K and V read after A, token-mean-pooled, at the four depths; and B's token ids.

    Column order as ``readouts.evaluate.features(g, "joint_kv")``: for each depth, K then V,
    each ``[kv heads, head dim]`` flattened.
    """
    depths = kv_depths(model)
    specs = [RecordSpec("joint", c.b_text, c.a_text) for c in cases]
    rows, ids = [], []
    for lo in range(0, len(specs), batch_size):
        for enc in encode(model, specs[lo:lo + batch_size], hidden_layers=()):
            parts = [t[layer].mean(dim=1).reshape(-1).numpy() for layer in depths for t in (enc.keys, enc.values)]
            rows.append(np.concatenate(parts))
            ids.append(enc.token_ids)
    return np.stack(rows).astype(np.float64), ids


def select_items(cases: Sequence[RecognitionCase], per_split: dict[str, int]) -> list[RecognitionCase]:
    """The cases of the first ``per_split[split]`` items (groups) of each split (for quick runs)."""
    kept: dict[str, list[str]] = {}
    for c in cases:
        groups = kept.setdefault(c.split, [])
        if c.group not in groups and len(groups) < per_split.get(c.split, 0):
            groups.append(c.group)
    return [c for c in cases if c.group in kept.get(c.split, [])]


def _readout(probe: Any, X_test: np.ndarray, y: np.ndarray, test: np.ndarray, role: np.ndarray,
             dev_auc: dict[float, float], test_auc_by_C: dict[float, float]) -> dict[str, Any]:
    scores = probe.decision_function(X_test)
    return {"C": float(probe.C), "dev_role_auc_by_C": {str(k): v for k, v in dev_auc.items()},
            "test_role_auc_by_C": {str(k): v for k, v in test_auc_by_C.items()},
            "all_test_auc": auc(scores[test], y[test]), "scores": scores}


def readout_transfer(main: Model, sibling: Model, cases: Sequence[RecognitionCase] | None = None,
                     batch_size: int = 16, draws: int = DRAWS, seed: int = 0,
                     C_grid: Sequence[float] = C_GRID) -> dict[str, Any]:
    """Own vs transferred joint-K/V readout AUCs on the main model (see the module docstring).

    Args:
        main, sibling: the pair (identical token ids on every joint record required).
        cases: recognition record cases (default: all 570 of ``generate_records()``).
        draws, seed: item-bootstrap draws of the role AUC intervals.
        C_grid: the 4 regularization strengths (values UNCLEAR in the paper; readouts' grid).

    Returns:
        ``{"main", "sibling", weight hashes, "depths", "n", "own", "transfer",
        "transfer_main_dev_C", "role_auc": bootstrap_auc(...)}``; each readout block holds
        ``C``, dev and test role AUC per C, ``role_auc`` with its interval and ``all_test_auc``.
    """
    check_architectures(sibling, main)
    cases = list(generate_records() if cases is None else cases)
    Xm, ids_m = joint_kv_features(main, cases, batch_size)
    Xs, ids_s = joint_kv_features(sibling, cases, batch_size)
    for c, a, b in zip(cases, ids_m, ids_s):
        if not np.array_equal(a, b):
            raise CompatibilityError(f"readout transfer: case {c.case_id} tokenizes differently under the two models")
    split = np.array([c.split for c in cases])
    role = np.isin([c.variant for c in cases], ROLE_VARIANTS)
    y = np.array([c.labels["replacement"] for c in cases], dtype=int)
    groups = np.array([c.group for c in cases])
    train, dev, test = split == "train", split == "dev", split == "test"

    def test_auc_by_C(X_train: np.ndarray) -> dict[float, float]:
        out = {}
        for C in C_grid:
            p = BalancedL2Probe(C=C).fit(X_train[train], y[train])
            out[float(C)] = auc(p.decision_function(Xm)[test & role], y[test & role])
        return out

    own_p, own_dev = select_C(Xm[train], y[train], Xm[dev], y[dev], C_grid=C_grid, dev_mask=role[dev])
    tr_p, tr_dev = select_C(Xs[train], y[train], Xs[dev], y[dev], C_grid=C_grid, dev_mask=role[dev])
    alt_p, alt_dev = select_C(Xs[train], y[train], Xm[dev], y[dev], C_grid=C_grid, dev_mask=role[dev])
    by_C_own, by_C_transfer = test_auc_by_C(Xm), test_auc_by_C(Xs)
    blocks = {"own": _readout(own_p, Xm, y, test, role, own_dev, by_C_own),
              "transfer": _readout(tr_p, Xm, y, test, role, tr_dev, by_C_transfer),
              "transfer_main_dev_C": _readout(alt_p, Xm, y, test, role, alt_dev, by_C_transfer)}
    sel = test & role
    boot = bootstrap_auc({k: b["scores"][sel] for k, b in blocks.items()}, y[sel], groups[sel], n_draws=draws,
                         seed=seed)
    for name, b in blocks.items():
        a = boot["auc"][name]
        b.update(role_auc=a["auc"], role_lo=a["lo"], role_hi=a["hi"])
        del b["scores"]
    return {"main": main.name, "sibling": sibling.name, "main_weight_hash": main.weight_hash,
            "sibling_weight_hash": sibling.weight_hash, "feature": "joint_kv", "depths": kv_depths(main),
            "n": {"train": int(train.sum()), "dev_role": int((dev & role).sum()), "test_role": int(sel.sum()),
                  "test": int(test.sum())},
            **blocks, "role_auc": boot}


def transfer_from_store(store: Path | str, main_group: str, sibling_group: str, draws: int = DRAWS,
                        seed: int = 0) -> dict[str, Any]:
    """Own and transferred joint-K/V AUCs from two groups of a ``kvprobe extract`` store (``readouts.evaluate.transfer``).

    ``own``: trained and tested on ``main_group``; ``transfer``: trained on ``sibling_group``
    (C chosen on its dev split), tested on ``main_group``.
    """
    from kvprobe.extract import FeatureStore
    from kvprobe.readouts.evaluate import transfer

    with FeatureStore(store) as s:
        own = transfer(s[main_group], s[main_group], draws=draws, seed=seed)
        moved = transfer(s[sibling_group], s[main_group], draws=draws, seed=seed)

    def block(r: dict[str, Any], name: str) -> dict[str, Any]:
        a = r["role_auc"]["auc"][name]
        return {"C": r["C"], "role_auc": a["auc"], "role_lo": a["lo"], "role_hi": a["hi"],
                "all_test_auc": r["all_test_auc"]["auc"][name]["auc"]}

    return {"main": main_group, "sibling": sibling_group, "feature": "joint_kv", "store": str(store),
            "own": block(own, "in-checkpoint"), "transfer": block(moved, "transferred")}


def write_transfer(out_dir: Path | str, result: dict[str, Any]) -> Path:
    """Write ``transfer.json`` into a run directory (the summary's report then includes it)."""
    path = Path(out_dir) / TRANSFER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(result, indent=1, default=float) + "\n")
    return path


def run(model: Any, out_dir: Path | str, study: Any = None, progress: bool = True, transfer: bool = False) -> Any:
    """``kvprobe run cross-checkpoint``: :func:`kvprobe.studies.common.runner.run_study`, then (``transfer``) the
    readout transfer between the checkpoint pair, written to ``out_dir/transfer.json``."""
    from kvprobe.studies.common.protocol import RunState
    from kvprobe.studies.common.runner import run_study

    state = RunState()  # the run's sibling, reused by the transfer
    info = run_study(study, model, out_dir, progress=progress, state=state)
    if transfer:
        pair = study.sibling_pair(model, state)
        write_transfer(out_dir, readout_transfer(pair.main, pair.sibling))
    return info
