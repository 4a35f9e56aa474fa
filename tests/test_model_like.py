"""``kvprobe.model_like.ModelLike`` is what the modules below ``kvprobe/model.py`` read of a model: a loaded
``kvprobe.Model`` has every member it declares, so annotating with the protocol hides nothing."""

from __future__ import annotations

import inspect

import kvprobe
from kvprobe.model_like import ModelLike


def _members(protocol: type) -> set[str]:
    declared = set(getattr(protocol, "__annotations__", {}))
    declared |= {name for name, value in vars(protocol).items()
                 if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))}
    return declared


def test_a_loaded_model_has_every_member_of_model_like(llama: kvprobe.Model):
    members = _members(ModelLike)
    assert {"hf", "arch", "device", "dtype", "attention_envoy", "empty_state"} <= members
    missing = sorted(name for name in members if not hasattr(llama, name))
    assert not missing, f"kvprobe.Model lacks {missing}: update ModelLike or Model"
    for name in members:
        if inspect.isfunction(vars(ModelLike).get(name)):
            assert callable(getattr(llama, name)), name
