"""The paper's numbers the factorial report sets beside ours (seed line numbers beside each).

Factor contrasts are percentage-point changes of the mask-minus-control contrast with 95 % intervals over
ten groups (tables tab:v35_quantity_factors, seed L5181-5193, and tab:v35_endpoint_factors, L5247-5258);
counts are out of 30 cases (seed L4741-4745, L4831-4848, L4865-4868). Only the models with the 40-token
budget (Qwen3-4B, Qwen3-8B, Llama-3.2-3B) and Qwen3-32B, the brief's headline, are quoted.
"""

from __future__ import annotations

#: One anchor: (model, estimate, (low, high) or None).
Anchor = tuple[str, float, tuple[float, float] | None]

#: Factor contrasts by (matrix, contrast key of :func:`contrasts.factor_contrasts`), pp.
FACTOR_ANCHORS: dict[tuple[str, str], list[Anchor]] = {
    # tab:v35_quantity_factors, "Number minus whole" (seed L5184-5188).
    ("quantity", "scope"): [("Qwen3-4B", 23.8, (20.4, 27.1)), ("Qwen3-8B", 15.8, (12.5, 19.2)),
                            ("Qwen3-32B", 25.0, (23.3, 27.1)), ("Llama-3.2-3B", 2.1, (0.0, 4.6))],
    # "Explicit request" (the masks averaged).
    ("quantity", "wording/both"): [("Qwen3-4B", 11.2, (6.2, 15.8)), ("Qwen3-8B", 10.8, (4.2, 16.7)),
                                   ("Qwen3-32B", 8.3, (4.2, 12.5)), ("Llama-3.2-3B", -2.1, (-6.2, 2.5))],
    # "Earlier unit needed" (B refers to A minus B stated).
    ("quantity", "information/both"): [("Qwen3-4B", -4.6, (-10.8, 2.1)), ("Qwen3-8B", 10.8, (4.2, 16.7)),
                                       ("Qwen3-32B", -16.7, (-23.8, -9.2)), ("Llama-3.2-3B", 0.4, (-1.7, 2.5))],
    # Endpoint minus whole, seed L4886-4889 (app:v17_scope text).
    ("endpoint", "scope"): [("Qwen3-4B", 0.0, (0.0, 0.0)), ("Qwen3-8B", 1.7, (0.0, 4.2)),
                            ("Llama-3.2-3B", 2.5, (-4.2, 10.8))],
    # tab:v35_endpoint_factors (seed L5251-5255).
    ("endpoint", "wording/both"): [("Qwen3-4B", 1.7, (-3.3, 6.7)), ("Qwen3-8B", 1.7, (0.0, 4.2)),
                                   ("Llama-3.2-3B", -0.8, (-5.0, 4.2))],
    ("endpoint", "note/both"): [("Qwen3-4B", 6.7, (1.7, 11.7)), ("Qwen3-8B", 1.7, (0.0, 4.2)),
                                ("Llama-3.2-3B", 0.8, (-2.5, 4.2))],
}

#: Whole-source mask and its control in the quantity cell (B stated, notebook, original question),
#: complete answers of 30 (seed L4741-4744): (model, whole, whole control, number, number control).
STATED_NOTEBOOK_ORIGINAL = [("Qwen3-4B", 25, 30, 30, 30), ("Qwen3-8B", 10, 25, 27, 25),
                            ("Qwen3-32B", 29, 30, 30, 30), ("Llama-3.2-3B", 0, 0, 0, 0)]

#: The same cell's candidate scores under the whole mask against its control (seed L4831-4835): change of
#: log p(current answer) and of log p(old answer), nats; and the number mask's change of log p(current)
#: against its control (seed L4837-4838).
STATED_NOTEBOOK_ORIGINAL_SCORES = [("Qwen3-4B", -0.511, -2.107, 0.006), ("Qwen3-8B", -1.835, -4.230, 0.258)]

#: B refers to A, original question: whole mask against its control, complete answers of 30, per note
#: (seed L4842-4845, tables L5148-5160): (model, note, whole, whole control).
REFERS_ORIGINAL_WHOLE = [("Qwen3-4B", "notebook", 1, 18), ("Qwen3-4B", "shelf", 0, 15),
                         ("Qwen3-32B", "notebook", 0, 20), ("Qwen3-32B", "shelf", 0, 18)]
