"""The paper's reported rows of the source-influence panel, for comparison in reports (labelled as the paper's).

Copied from the seed text: the absolute-margin decomposition of 22 checkpoints
(table ``tab:v23_absolute_margins``, seed L1976-2000) and the five checkpoints of table
``tab:v35_controlled_added`` (seed L1946-1950). Numbers in nats (margins) and percent.
"""

from __future__ import annotations

#: model -> (m_F, Delta_A, Delta_A interval, Delta_N, Delta_N interval, Delta_A - Delta_N); seed L1976-2000.
DECOMPOSITION: dict[str, tuple[float, float, tuple[float, float], float, tuple[float, float], float]] = {
    "Qwen2.5-0.5B": (-1.05, 1.51, (1.32, 1.7), 0.15, (0.09, 0.2), 1.36),
    "Qwen3-0.6B": (1.21, 1.19, (1.03, 1.35), 0.05, (0.01, 0.08), 1.14),
    "Llama-3.2-1B": (0.37, 1.1, (0.96, 1.24), -0.02, (-0.06, 0.02), 1.12),
    "Qwen2.5-1.5B": (1.89, 1.16, (1.03, 1.31), -0.03, (-0.06, 0.01), 1.19),
    "Qwen3-1.7B": (1.29, 0.94, (0.74, 1.16), 0.05, (-0.01, 0.11), 0.9),
    "Qwen2.5-3B": (3.73, 2.13, (1.89, 2.36), 0.02, (-0.07, 0.11), 2.11),
    "Llama-3.2-3B": (1.53, 1.83, (1.67, 2.0), 0.2, (0.14, 0.25), 1.64),
    "Qwen3-4B": (4.88, 3.2, (2.94, 3.46), 0.21, (0.13, 0.29), 2.99),
    "Mistral-7B-v0.3": (4.22, 2.19, (2.02, 2.36), 0.21, (0.16, 0.26), 1.98),
    "OLMo-2-7B": (6.38, 2.8, (2.59, 3.02), 0.37, (0.28, 0.45), 2.44),
    "Qwen2.5-7B": (6.85, 1.59, (1.27, 1.91), -0.09, (-0.2, 0.03), 1.68),
    "Llama-3.1-8B": (0.44, 1.45, (1.36, 1.54), 0.13, (0.11, 0.16), 1.31),
    "Granite-3.2-8B": (3.73, 2.1, (1.93, 2.27), 0.08, (0.04, 0.11), 2.03),
    "Qwen3-8B": (5.79, 2.41, (2.22, 2.6), 0.36, (0.3, 0.41), 2.05),
    "Qwen3-14B": (7.24, 2.8, (2.57, 3.03), 0.1, (0.05, 0.14), 2.7),
    "DeepSeek-V2-Lite": (3.98, 2.79, (2.58, 2.99), 0.03, (-0.04, 0.09), 2.76),
    "Qwen3-30B-A3B-2507": (7.33, 1.45, (1.33, 1.57), 0.14, (0.08, 0.19), 1.31),
    "Qwen3-32B": (3.73, 1.63, (1.46, 1.8), -0.24, (-0.3, -0.18), 1.87),
    "Llama-3.1-70B": (2.51, 0.79, (0.72, 0.86), 0.13, (0.1, 0.16), 0.66),
    "Qwen3.8-27B": (2.61, 0.86, (0.77, 0.95), 0.01, (-0.02, 0.04), 0.85),
    "Gemma 4 26B-A4B": (2.56, 0.51, (0.17, 0.86), -0.03, (-0.37, 0.31), 0.54),
    "Gemma 4 31B": (4.61, 1.08, (0.68, 1.49), -0.14, (-0.45, 0.17), 1.22),
}

#: model -> (full, control, source accuracy %, Delta m, its interval, patterns with Delta m > 0, L.95 pp);
#: seed L1946-1950.
CONTROLLED: dict[str, tuple[float, float, float, float, tuple[float, float], int, float]] = {
    "Qwen3-32B": (96.56, 97.81, 98.12, 1.87, (1.69, 2.05), 8, 0.0),
    "Qwen3.8-27B": (93.44, 92.81, 94.69, 0.85, (0.76, 0.94), 8, -1.25),
    "Llama-3.1-70B": (92.5, 95.94, 95.31, 0.66, (0.58, 0.74), 6, 1.88),
    "Gemma 4 26B-A4B": (71.88, 72.5, 73.44, 0.54, (0.14, 0.94), 5, -2.5),
    "Gemma 4 31B": (70.31, 69.38, 73.44, 1.22, (0.79, 1.67), 6, -4.06),
}

#: model -> (native - raw Delta_m, its interval, native source - control accuracy pp, its interval,
#: native L.95 pp); seed L1883-1888 (the paired prompt-format comparison).
FORMAT_CONTRASTS: dict[str, tuple[float, tuple[float, float], float, tuple[float, float], float]] = {
    "Qwen3-4B": (-1.302, (-1.804, -0.780), 5.31, (2.19, 8.44), 1.88),
    "Qwen3-8B": (-1.011, (-1.182, -0.833), 12.81, (9.06, 16.56), -2.81),
    "Llama-3.2-3B": (-0.098, (-0.264, 0.068), 6.88, (3.75, 10.00), -0.94),
}

#: model -> (full, control, source accuracy %, obsolete-choice change source - control pp, its interval,
#: books with a favorable direction of 5); OAKS candidate decisions, 336 events, seed L2118-2122.
OAKS: dict[str, tuple[float, float, float, float, tuple[float, float], int]] = {
    "Qwen3-32B": (52.14, 51.49, 68.26, -16.77, (-21.16, -12.78), 5),
    "Qwen3.8-27B": (48.41, 48.59, 64.29, -15.70, (-20.10, -11.53), 5),
    "Llama-3.1-70B": (50.72, 50.39, 68.72, -18.33, (-23.28, -13.81), 5),
    "Gemma 4 26B-A4B": (57.27, 56.55, 65.49, -8.94, (-12.32, -5.84), 5),
    "Gemma 4 31B": (58.49, 58.56, 59.36, -0.80, (-4.10, 2.38), 2),
}
