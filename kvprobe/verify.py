"""Deprecated: ``kvprobe.verify`` moved to :mod:`kvprobe.tools.verify` (its access checks: ``.access``).

Names are looked up there on first use (``from kvprobe.verify import LOGIT_TOLERANCE`` still works, with a
DeprecationWarning); the alias goes in the next release.
"""


def __getattr__(name: str):
    import warnings

    from kvprobe.tools.verify import access

    if name.startswith("__"):
        raise AttributeError(name)
    warnings.warn(f"kvprobe.verify.{name} moved to kvprobe.tools.verify.{name}; the alias goes in the next "
                  "release", DeprecationWarning, stacklevel=2)
    return getattr(access, name)
