"""The paper's reported numbers for the matched experiment, for reports and panels (labelled as the paper's).

Copied from the seed text; the table label and its line
are beside each. Margins in nats, accuracy changes in percentage points, counts out of the table's n.
"""

from __future__ import annotations

Interval = tuple[float, float]

#: tab:v7_bridge (seed L5615-5624), 150 replacement cases, exact field: model -> (Delta m, its interval,
#: Delta exact pp, its interval, corrections, reversals, unit-omitted reversals, UNKNOWN reversals).
V7_BRIDGE: dict[str, tuple[float, Interval, float, Interval, int, int, int, int]] = {
    "Qwen3-4B": (1.38, (1.17, 1.62), -5.3, (-8.7, -2.0), 0, 8, 5, 3),
    "Qwen3-8B": (1.72, (1.41, 2.06), -11.3, (-18.7, -4.7), 0, 17, 15, 2),
    "Llama-3.2-3B": (0.31, (0.13, 0.50), 0.7, (-2.0, 3.3), 3, 2, 0, 0),
}
#: Reversals on cases whose margin rose (seed L5595-5597): model -> (those reversals, all reversals).
REVERSALS_MARGIN_ROSE: dict[str, tuple[int, int]] = {"Qwen3-4B": (8, 8), "Qwen3-8B": (11, 17)}
#: Control minus full generation changes, pp (seed L5633-5635): dataset -> per model.
CONTROL_MINUS_FULL: dict[str, dict[str, float]] = {
    "records": {"Qwen3-4B": -0.33, "Qwen3-8B": 0.00, "Llama-3.2-3B": 0.33},
    "oaks": {"Qwen3-4B": 0.00, "Qwen3-8B": -0.86, "Llama-3.2-3B": 2.59},
}
#: OAKS old-mask minus full generation gains, pp (seed L5655-5656).
OAKS_MASK_MINUS_FULL: dict[str, float] = {"Qwen3-4B": 22.41, "Qwen3-8B": 4.31, "Llama-3.2-3B": 12.07}

#: tab:v35_r570 (seed L4961-4975), complete answers of 150 replacement cases: model -> (full, control, mask,
#: mask - control margin, its interval, mask - control accuracy pp, its interval).
R570: dict[str, tuple[int, int, int, float, Interval, float, Interval]] = {
    "Qwen3-4B": (150, 150, 142, 1.38, (1.16, 1.62), -5.3, (-8.7, -2.0)),
    "Qwen3-8B": (145, 145, 128, 1.72, (1.41, 2.05), -11.3, (-18.7, -4.7)),
    "Qwen3-32B": (150, 150, 149, 0.75, (0.51, 1.01), -0.7, (-2.0, 0.0)),
    "Qwen3.8-27B": (150, 150, 150, 0.66, (0.54, 0.77), 0.0, (0.0, 0.0)),
    "Llama-3.2-3B": (105, 106, 107, 0.31, (0.13, 0.50), 0.7, (-2.0, 4.0)),
    "Llama-3.1-70B": (137, 133, 130, 0.12, (-0.07, 0.29), -2.0, (-6.7, 2.0)),
    "Gemma 4 26B-A4B": (150, 150, 150, 1.00, (0.78, 1.21), 0.0, (0.0, 0.0)),
    "Gemma 4 31B": (150, 150, 150, 1.02, (0.90, 1.16), 0.0, (0.0, 0.0)),
}
#: tab:v35_r570_all (seed L4995-5007), complete answers of all 300 cases: model -> (full, control, mask,
#: corrections, reversals, mask - control accuracy pp, its interval).
R570_ALL: dict[str, tuple[int, int, int, int, int, float, Interval]] = {
    "Qwen3-4B": (300, 299, 241, 0, 58, -19.3, (-21.7, -17.3)),
    "Qwen3-8B": (295, 295, 222, 0, 73, -24.3, (-29.0, -20.0)),
    "Qwen3-32B": (296, 296, 248, 0, 48, -16.0, (-17.7, -14.3)),
    "Qwen3.8-27B": (300, 300, 250, 0, 50, -16.7, (-16.7, -16.7)),
    "Llama-3.2-3B": (191, 192, 187, 3, 8, -1.7, (-4.0, 0.7)),
    "Llama-3.1-70B": (263, 263, 227, 8, 44, -12.0, (-16.3, -7.7)),
    "Gemma 4 26B-A4B": (300, 300, 250, 0, 50, -16.7, (-16.7, -16.7)),
    "Gemma 4 31B": (300, 300, 250, 0, 50, -16.7, (-16.7, -16.7)),
}
#: tab:v35_oaks (seed L5028-5042), complete answers of 116 OAKS questions: model -> (full, control, mask,
#: mask - control margin, its interval, mask - control accuracy pp, its interval).
OAKS: dict[str, tuple[int, int, int, float, Interval, float, Interval]] = {
    "Qwen3-4B": (76, 76, 102, 9.49, (7.39, 11.72), 22.4, (14.7, 31.0)),
    "Qwen3-8B": (97, 96, 102, 3.77, (2.56, 5.02), 5.2, (0.9, 10.3)),
    "Qwen3-32B": (99, 98, 104, 4.40, (3.58, 5.27), 5.2, (0.0, 10.3)),
    "Qwen3.8-27B": (100, 100, 109, 1.02, (0.74, 1.31), 7.8, (3.4, 12.9)),
    "Llama-3.2-3B": (75, 78, 89, 1.17, (0.81, 1.55), 9.5, (2.6, 17.2)),
    "Llama-3.1-70B": (104, 103, 110, 0.67, (0.31, 1.06), 6.0, (1.7, 11.2)),
    "Gemma 4 26B-A4B": (23, 29, 32, 1.70, (0.99, 2.45), 2.6, (-3.4, 8.6)),
    "Gemma 4 31B": (99, 99, 101, 1.17, (0.42, 2.00), 1.7, (-1.7, 5.2)),
}
#: tab:v35_oaks_failures (seed L5068-5080), source-mask outcomes of 116 questions: model -> (wrong, UNKNOWN,
#: format, limit, corrections, reversals against the control).
OAKS_FAILURES: dict[str, tuple[int, int, int, int, int, int]] = {
    "Qwen3-4B": (13, 1, 0, 0, 28, 2),
    "Qwen3-8B": (5, 9, 0, 0, 8, 2),
    "Qwen3-32B": (5, 7, 0, 0, 8, 2),
    "Qwen3.8-27B": (7, 0, 0, 0, 9, 0),
    "Llama-3.2-3B": (26, 1, 0, 0, 16, 5),
    "Llama-3.1-70B": (6, 0, 0, 0, 8, 1),
    "Gemma 4 26B-A4B": (1, 3, 63, 17, 8, 5),
    "Gemma 4 31B": (9, 6, 0, 0, 3, 1),
}
#: tab:v35_generation_budgets (seed L5366-5377): (model, panel) -> (outputs, truncated at 40, 128, 256,
#: complete correct at every limit).
BUDGETS: dict[tuple[str, str], tuple[int, int, int, int, int]] = {
    ("Gemma 4 26B-A4B", "OAKS"): (348, 248, 130, 60, 84),
    ("Llama-3.1-70B", "Synthetic"): (900, 34, 0, 0, 753),
    ("Llama-3.1-70B", "Factorial"): (1800, 1, 0, 0, 1508),
}
