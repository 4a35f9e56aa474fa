"""The protocol hooks every study over quantity-task histories shares (quantity, cross-checkpoint)."""

from __future__ import annotations

import kvprobe
from kvprobe.studies.common.protocol import HistoryStudy
from . import tasks


class QuantityTaskHistories(HistoryStudy):
    """A :class:`~kvprobe.studies.common.protocol.HistoryStudy` whose cases are quantity-task cases
    (:class:`tasks.Case`): resampled by group, prompted with :func:`tasks.build_prompt`, and the
    second information condition of a group reuses the first one's K/V up to record B (the two
    differ only in B, the last segment)."""

    def group(self, case: tasks.Case) -> str:
        return case.group.group_id

    def reuse_key(self, case: tasks.Case) -> str:
        return case.group.group_id

    def prompt(self, model: kvprobe.Model, case: tasks.Case) -> kvprobe.Prompt:
        return tasks.build_prompt(case)
