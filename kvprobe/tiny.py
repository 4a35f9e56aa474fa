"""Tiny random causal LMs built in-process, for fast tests (no download).

One model per architecture family kvprobe supports, each small (64-wide, 4-6
layers) and each exercising what makes its family different:

==================  ============================================================
``tiny-llama``      Llama, grouped-query attention (4 query / 2 KV heads).
``tiny-mistral``    Mistral: every layer a sliding window (32 tokens).
``tiny-qwen2``      Qwen2: biases on the q/k/v projections.
``tiny-qwen3``      Qwen3: QK-norm (RMSNorm on q and k per head).
``tiny-qwen3-moe``  Qwen3-MoE: routed experts (4, top 2) in every layer.
``tiny-qwen3.5``    Qwen3.5 hybrid: Gated DeltaNet layers beside full attention
                    with gated queries and partial RoPE (25 %).
``tiny-qwen3-next`` Qwen3-Next hybrid: Gated DeltaNet + attention + routed and
                    shared experts.
``tiny-gemma3``     Gemma 3: sliding (window 16) and full layers with their own
                    RoPE bases, QK-norm.
``tiny-gemma4``     Gemma 4: sliding/full layers, global layers with a larger
                    head (32) and one KV head whose values come from the key
                    projection, proportional RoPE, per-layer input embeddings,
                    routed experts, and the last two layers reusing earlier
                    layers' K/V (KV sharing).
``tiny-deepseek-v2`` DeepSeek-V2: multi-head latent attention (the cache holds a
                    16-dim latent and an 8-dim decoupled RoPE key), routed and
                    shared experts after one dense layer.
``tiny-phi3``       Phi-3: fused QKV projection, partial RoPE (50 %).
``tiny-olmo2``      OLMo2: QK-norm over the whole projection, post-norm blocks.
==================  ============================================================

Weights are drawn with a fixed seed inside :func:`torch.random.fork_rng`, so
two builds are bit-identical and the caller's RNG state is untouched.  The
random init is scaled up (``initializer_range=0.2``) so that attention is far
from uniform and masking a span visibly changes the logits. QK-norm gains are
raised for the same reason. The Gated DeltaNet layers of the hybrids are drawn
at the usual scale (0.02) instead: their chunked kernel computes in fp32 with
chunk boundaries at multiples of 64 tokens, so a cached continuation rounds
differently from one pass over the same tokens, and random 0.2-scale
recurrences amplified that to 1.2e-4 on the logits (above the verify tolerance
of 1e-4); at 0.02 it is ~5e-6, and it is exactly 0 when the history length is a
multiple of 64 (tests/test_hybrid.py).

The tokenizer is a byte-level BPE trained with the ``tokenizers`` library on a
small built-in English corpus (deterministic; ~1000 tokens) with ChatML special
tokens and chat template; every tiny model uses it.  Being byte-level, it
encodes any text, and its offsets (``trim_offsets=False``) partition the text
exactly.
"""

from __future__ import annotations

import functools
import itertools

import torch

from .attention import KVPROBE_SDPA

__all__ = ["SHAPED_MODELS", "TINY_MODELS", "TINY_SEED", "build_shaped", "build_tiny", "shaped_config", "tiny_tokenizer",
           "tiny_config"]

TINY_MODELS: tuple[str, ...] = ("tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-qwen3-moe",
                                 "tiny-qwen3.5", "tiny-qwen3-next", "tiny-gemma3", "tiny-gemma4",
                                 "tiny-deepseek-v2", "tiny-phi3", "tiny-olmo2")
TINY_SEED = 0
TINY_VOCAB_SIZE = 1000
TINY_INIT_RANGE = 0.2

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# ChatML, as used by SmolLM2 / Qwen (without a default system prompt).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# --------------------------------------------------------------------------- corpus

_BASE_SENTENCES = """\
The record for the unit was updated yesterday, and the new value replaces the old one.
Please note that the duration is measured in hours, not in minutes or seconds.
The current color of the box is blue; earlier it was red, and before that green.
A correction was issued: the weight of the package is twelve kilograms.
The meeting moved from Monday to Thursday at three o'clock in the afternoon.
What is the capital of France? The capital of France is Paris.
The temperature today is 21 degrees Celsius, colder than last week.
Alice owns a yellow bicycle. Bob owns a purple car. Carol owns a white boat.
The price was 45 dollars, but after the update it is 52 dollars.
Note: the previous entry was wrong. The correct distance is 300 meters.
He said the answer is seven. She confirmed that the answer is still seven.
Numbers: zero, one, two, three, four, five, six, seven, eight, nine, ten, 0 1 2 3 4 5 6 7 8 9 10 100 1000.
Colors: red, orange, yellow, green, blue, indigo, violet, black, white, gray, brown, pink.
Units: meters, kilometers, grams, kilograms, liters, seconds, minutes, hours, days, weeks, years.
The system keeps a history of every change, so a reader can tell a replacement from a confirmation.
"Is the value still the same?" asked the user. "Yes, it has not changed," said the assistant.
Question: which city hosts the annual festival? Answer: the festival is held in Berlin.
The file contains 1,234 lines; the last line ends with a newline character.
The library opens at nine in the morning and closes at six in the evening on weekdays.
Students borrowed forty books last month; most of them were novels, histories and science guides.
A small village near the mountains grows apples, pears, cherries and plums every summer.
The engineer checked the bridge, measured the cables, and wrote a short report about safety.
Our kitchen has a wooden table, four chairs, a silver kettle and a shelf of spices.
During the storm, the electricity failed, so everyone lit candles and told stories.
The children played football in the park until the sun went down behind the hills.
Scientists observed that the comet returns every seventy-six years, bright and quiet.
My neighbor repairs old clocks; his workshop is full of gears, springs and tiny screws.
The museum displays ancient coins, painted vases, bronze statues and maps of forgotten kingdoms.
Travelers crossed the desert by camel, carrying water, dates, blankets and a compass.
The orchestra rehearsed the symphony twice before the concert on Saturday night.
Farmers harvest wheat in August, then plant winter crops after the first autumn rain.
The doctor advised rest, plenty of water, and a walk outside whenever the weather is mild.
In the harbor, fishing boats unload their catch while seagulls circle above the market.
Remember: always save your work, check the numbers twice, and label every chart clearly.
"""

_SUBJECTS = ("The record", "The unit", "The account", "The sensor", "The project", "The station",
             "The library", "The train", "The garden", "The river")
_ATTRS = (("color", ("red", "blue", "green", "yellow", "purple", "orange")),
          ("duration", ("3 hours", "18 hours", "45 minutes", "2 days", "90 seconds", "1 week")),
          ("weight", ("12 kilograms", "300 grams", "7 kilograms", "1.5 tons", "40 pounds", "9 ounces")),
          ("location", ("Paris", "London", "Tokyo", "Berlin", "Madrid", "Cairo")),
          ("owner", ("Alice", "Bob", "Carol", "David", "Erin", "Frank")))
_VERBS = ("was changed to", "is now", "has been confirmed as", "remains", "was updated to",
          "used to be")


def tiny_corpus() -> str:
    """The fixed English training text of the tiny tokenizer."""
    lines = [_BASE_SENTENCES]
    for i, (subj, (attr, values), verb) in enumerate(
            itertools.product(_SUBJECTS, _ATTRS, _VERBS)):
        value = values[i % len(values)]
        lines.append(f"{subj}'s {attr} {verb} {value}.")
        if i % 4 == 0:
            lines.append(f"Question: what is the {attr} of {subj.lower()}? Answer: {value}.")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------ tokenizer


@functools.lru_cache(maxsize=1)
def _tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    # trim_offsets=False: a token "Ġword" is mapped to " word", so the offsets
    # of consecutive tokens partition the text exactly.
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB_SIZE,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(tiny_corpus().splitlines(keepends=True), trainer=trainer)
    return tok.to_str()


def tiny_tokenizer():
    """A fresh fast tokenizer (byte-level BPE, ChatML). Training is cached per process."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json()),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


# --------------------------------------------------------------------------- models


_ROPE = {"rope_type": "default", "rope_theta": 10000.0}
_HYBRID_LAYERS = ["linear_attention", "full_attention", "linear_attention", "full_attention"]
_GATED_DELTANET = dict(linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
                       linear_value_head_dim=16, linear_conv_kernel_dim=4)
_EXPERTS = dict(num_experts_per_tok=2, moe_intermediate_size=32)

#: tiny model -> (model_type, config fields beyond the shared ones).
TINY_CONFIGS: dict[str, tuple[str, dict]] = {
    "tiny-llama": ("llama", dict(num_hidden_layers=4, rope_parameters=_ROPE)),
    "tiny-mistral": ("mistral", dict(num_hidden_layers=4, sliding_window=32, rope_parameters=_ROPE)),
    "tiny-qwen2": ("qwen2", dict(num_hidden_layers=4, rope_parameters=_ROPE)),
    "tiny-qwen3": ("qwen3", dict(num_hidden_layers=4, rope_parameters=_ROPE, use_sliding_window=False)),
    "tiny-qwen3-moe": ("qwen3_moe", dict(num_hidden_layers=4, rope_parameters=_ROPE, num_experts=4,
                                         norm_topk_prob=True, **_EXPERTS)),
    "tiny-qwen3.5": ("qwen3_5_text", dict(num_hidden_layers=4, layer_types=_HYBRID_LAYERS, **_GATED_DELTANET,
                                          rope_parameters={**_ROPE, "partial_rotary_factor": 0.25})),
    "tiny-qwen3-next": ("qwen3_next", dict(num_hidden_layers=4, layer_types=_HYBRID_LAYERS, **_GATED_DELTANET,
                                           rope_parameters={**_ROPE, "partial_rotary_factor": 0.25},
                                           num_experts=4, shared_expert_intermediate_size=32, **_EXPERTS)),
    "tiny-gemma3": ("gemma3_text", dict(
        num_hidden_layers=6, layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
        sliding_window=16, query_pre_attn_scalar=16, tie_word_embeddings=True,
        rope_parameters={"sliding_attention": _ROPE,
                         "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}})),
    "tiny-gemma4": ("gemma4_text", dict(
        num_hidden_layers=6, layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
        sliding_window=16, global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True,
        num_kv_shared_layers=2, enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
        hidden_size_per_layer_input=8, tie_word_embeddings=True,
        rope_parameters={"sliding_attention": _ROPE,
                         "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                            "rope_theta": 1000000.0}})),
    "tiny-deepseek-v2": ("deepseek_v2", dict(
        num_hidden_layers=4, num_key_value_heads=4, head_dim=8, kv_lora_rank=16, q_lora_rank=None,
        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4, n_shared_experts=1,
        first_k_dense_replace=1, rope_parameters=_ROPE, **_EXPERTS)),
    "tiny-phi3": ("phi3", dict(num_hidden_layers=4, rope_parameters={**_ROPE, "partial_rotary_factor": 0.5})),
    "tiny-olmo2": ("olmo2", dict(num_hidden_layers=4, rope_parameters=_ROPE)),
}


def tiny_config(name: str, tokenizer=None):
    """The ``PretrainedConfig`` of tiny model ``name`` (vocab from the tiny tokenizer)."""
    from transformers import AutoConfig

    if name not in TINY_CONFIGS:
        raise ValueError(f"unknown tiny model {name!r}; choose one of {', '.join(TINY_MODELS)}")
    tok = tokenizer if tokenizer is not None else tiny_tokenizer()
    model_type, fields = TINY_CONFIGS[name]
    common = dict(
        vocab_size=len(tok),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.pad_token_id,  # no BOS is prepended; <|endoftext|> stands in
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        initializer_range=TINY_INIT_RANGE,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
    )
    if model_type == "gemma4_text":
        common["vocab_size_per_layer_input"] = len(tok)
    return AutoConfig.for_model(model_type, **{**common, **fields})


def build_tiny(name: str, *, dtype: torch.dtype = torch.float32, attn_implementation: str = KVPROBE_SDPA):
    """Build tiny model ``name`` -> ``(model, tokenizer)``; deterministic, eval mode, no grads."""
    from transformers import AutoModelForCausalLM

    tok = tiny_tokenizer()
    config = tiny_config(name, tok)
    config._attn_implementation = attn_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        model = AutoModelForCausalLM.from_config(config)
    _sharpen_qk_norm(model)
    _calm_recurrences(model)
    model = model.to(dtype)
    model.eval()
    model.requires_grad_(False)
    model.name_or_path = name
    model.config.name_or_path = name
    return model, tok


# QK-norm rescales q and k to unit RMS, which with a random init leaves the
# attention almost uniform; a larger norm gain (2.5 -> logits ~6x larger)
# gives peaked attention, like a trained model's. The gain is for attention
# scaled by 1/sqrt(head_dim); a family that scales otherwise (Gemma 4: 1.0) gets
# the gain that gives the same logits. (At 2.5 with scaling 1.0, Gemma 4's
# attention was one-hot, with logits up to 143, and float32 rounding of 5e-7 in
# one attention output reached 9e-4 in the logits: SDPA vs eager.)
QK_NORM_GAIN = 2.5


#: Scale of the Gated DeltaNet weights of the hybrids (see the module docstring).
RECURRENT_INIT_RANGE = 0.02


@torch.no_grad()
def _sharpen_qk_norm(model) -> None:
    """Set every q/k norm's effective gain to ``QK_NORM_GAIN`` (for 1/sqrt(head_dim) scaling),
    whether it scales by w or by 1 + w."""
    modules = dict(model.named_modules())
    for mod_name, module in modules.items():
        if mod_name.endswith(("q_norm", "k_norm")) and getattr(module, "weight", None) is not None:
            attn = modules[mod_name.rsplit(".", 1)[0]]
            head_dim = module.weight.shape[-1]
            relative = float(getattr(attn, "scaling", head_dim**-0.5)) * head_dim**0.5  # 1 for 1/sqrt(d)
            gain = QK_NORM_GAIN / relative**0.5 if relative > 1 else QK_NORM_GAIN
            module.weight.zero_()
            probe = torch.ones(1, head_dim, device=module.weight.device, dtype=module.weight.dtype)
            offset = float(module(probe).abs().mean())  # 0 for w scaling, 1 for (1 + w)
            module.weight.fill_(gain - round(offset))


@torch.no_grad()
def _calm_recurrences(model) -> None:
    """Redraw-free rescale of linear-attention (Gated DeltaNet) matrices to ``RECURRENT_INIT_RANGE``."""
    for name, param in model.named_parameters():
        if ".linear_attn." in name and param.dim() > 1:
            param.mul_(RECURRENT_INIT_RANGE / TINY_INIT_RANGE)


# --------------------------------------------------------------------------- full-size shapes

#: Released models' shapes with random weights and the tiny tokenizer: benchmarks of real sizes with no
#: download (``kvprobe bench gpu``). The vocabulary is the tiny tokenizer's (1000 ids, so the output
#: projection is small) and RoPE scaling is left out; everything else is the released config's.
SHAPED_MODELS: dict[str, tuple[str, dict]] = {
    "random-llama-3.1-8b": ("llama", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                          num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                                          max_position_embeddings=131072, rms_norm_eps=1e-5,
                                          rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    # the same architecture at 1/16 of the width, for a CPU run of the same code
    "random-llama-mini": ("llama", dict(hidden_size=256, intermediate_size=896, num_hidden_layers=4,
                                        num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                                        max_position_embeddings=131072, rms_norm_eps=1e-5,
                                        rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
}


def shaped_config(name: str, tokenizer=None):
    """The transformers config of ``name`` from :data:`SHAPED_MODELS`: the real model's shapes with the tiny
    tokenizer's vocabulary (``ValueError`` naming the choices for an unknown name)."""
    from transformers import AutoConfig

    if name not in SHAPED_MODELS:
        raise ValueError(f"unknown shaped model {name!r}; choose one of {', '.join(SHAPED_MODELS)}")
    tok = tokenizer or tiny_tokenizer()
    model_type, fields = SHAPED_MODELS[name]
    return AutoConfig.for_model(model_type, vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                                pad_token_id=tok.pad_token_id, bos_token_id=tok.pad_token_id,
                                initializer_range=0.02, tie_word_embeddings=False, **fields)


def build_shaped(name: str, *, dtype: torch.dtype = torch.bfloat16, device: str | torch.device = "cpu",
                 attn_implementation: str = KVPROBE_SDPA):
    """Build ``name`` from :data:`SHAPED_MODELS` with random weights (std 0.02, seed :data:`TINY_SEED`),
    created directly on ``device`` in ``dtype`` -> ``(model, tokenizer)``."""
    from transformers import AutoModelForCausalLM

    tok = tiny_tokenizer()
    config = shaped_config(name, tok)
    config._attn_implementation = attn_implementation
    devices = [torch.device(device)] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.device(device):
        torch.manual_seed(TINY_SEED)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    model.requires_grad_(False)
    model.name_or_path = model.config.name_or_path = name
    return model, tok
