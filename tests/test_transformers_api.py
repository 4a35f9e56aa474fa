"""kvprobe's calls into transformers use the names the installed version defines: no FutureWarning.

transformers 5.24 renamed the cache argument and output field (``past_key_values`` -> ``cache``;
the old names warn and go in 5.40). Every kvprobe forward, score, generation and recompute runs here
with FutureWarnings turned into errors (transformers' own deprecation path), on one family per cache
layout.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import kvprobe
from conftest import QUESTIONS, make_history
from kvprobe.interventions import CONDITIONS, parse_condition, refusal
from kvprobe.transformers_api import cache_argument, cache_argument_name, output_cache


def test_the_installed_transformers_takes_the_new_name_and_kvprobe_uses_it(llama):
    assert cache_argument_name(llama.hf) == "cache"
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        out = llama.hf(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True)
        cache = output_cache(out)
        again = llama.hf(input_ids=torch.tensor([[4]]), use_cache=True, **cache_argument(llama.hf, cache))
    assert cache.get_seq_length() == 4 and again.logits.shape[1] == 1


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-qwen3-next"])
def test_no_future_warning_from_any_condition(name):
    model = kvprobe.load_model(name)
    h = make_history(model)
    built = {n: parse_condition(c.spec(n), h) for n, c in CONDITIONS.items()}
    access = {n: c for n, c in built.items() if refusal(c, h) is None}  # what the family supports
    assert len(access) >= 13, sorted(set(built) - set(access))  # a hybrid model refuses row deletion and selection
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        h2 = make_history(model)
        model.generate(h2, QUESTIONS[0], access=access, max_new_tokens=2)
        model.score(h2, QUESTIONS[0], ['{"answer": "x"}'], access={"mask": access["mask"]})
    assert h2.check_digest()
