"""``kvprobe verify`` and ``kvprobe matrix``: prove on a model that conditions compute what they claim.

* :mod:`.access`: the access checks (a)-(i) (masks, batching, shared history, attention paths),
  the tolerances (:func:`scaled_tolerance`, :func:`precision_floor`) and :class:`CheckResult`;
* :mod:`.operations`: one or two checks per cache operation, each against an independent reference
  (``kvprobe.reference``, the model's own RoPE code), and :func:`verify_model`, everything
  ``kvprobe verify`` runs;
* :mod:`.context`: :class:`CheckContext`, what every check of one model, history and question reads
  (spans, tolerances) and where it records its result;
* :mod:`.matrix`: ``kvprobe verify`` over many models as the family x operation table.

Example::

    import kvprobe
    from kvprobe.tools.verify import verify_model
    assert all(r.passed for r in verify_model(kvprobe.load_model("tiny-llama")))
"""

from .access import (LOGIT_TOLERANCE, CheckResult, PrecisionFloor, precision_floor, results_as_dicts,
                     scaled_tolerance, verify_access)
from .operations import verify_model, verify_operations

__all__ = ["LOGIT_TOLERANCE", "CheckResult", "PrecisionFloor", "precision_floor", "results_as_dicts",
           "scaled_tolerance", "verify_access", "verify_model", "verify_operations"]
