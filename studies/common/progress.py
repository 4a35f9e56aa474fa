"""A run's progress bar, in cases (``kvprobe run``'s bar; :func:`kvprobe.studies.common.runner.run_study`).

The bar counts cases, not batches: it starts at the cases already on disk (a resumed run shows them done),
advances by every case of a batch at once when the batch's rows are written (one update, so the bar shows
them; several updates within tqdm's redraw interval used to show only the first, ``1/8`` after four cases),
and estimates the time left from this invocation's own rate (cases run here over the seconds spent here:
``smoothing=0`` with ``initial=``, tqdm's average rate ``(n - initial) / elapsed``), so the cases found on disk
do not count as instantaneous. While a batch runs, the elapsed time is redrawn every :data:`REFRESH_SECONDS`
(a resumed run used to sit at ``4/8 [00:00<?]`` until its first batch ended).

Example:
    >>> with CaseProgress(total=8, done=4, desc="quantity on smollm2", cases_per_batch=4) as bar:  # doctest: +SKIP
    ...     bar.advance(4)  # a batch of four cases written
"""

from __future__ import annotations

import threading
from typing import Any

#: Seconds between redraws while no batch finishes (the elapsed time keeps moving).
REFRESH_SECONDS = 1.0


class CaseProgress:
    """A tqdm bar over a run's cases (module docstring); a context manager that closes the bar and its redraws.

    Attributes:
        bar: the tqdm bar (``bar.n`` cases done, ``bar.total`` cases, ``bar.initial`` cases found on disk).
    """

    def __init__(self, total: int, done: int, desc: str, cases_per_batch: int = 1):
        from tqdm import tqdm

        self.bar: Any = tqdm(total=total, initial=done, desc=desc, unit="case", smoothing=0,
                             postfix=f"{cases_per_batch} cases per batch" if cases_per_batch > 1 else None)
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._redraw, name="kvprobe-progress", daemon=True)
        self._ticker.start()

    def _redraw(self) -> None:
        while not self._stop.wait(REFRESH_SECONDS):
            self.bar.refresh()

    def advance(self, cases: int) -> None:
        """``cases`` more cases written (a batch's, at once)."""
        if cases:
            self.bar.update(cases)
            self.bar.refresh()  # tqdm skips the redraw of an update within its interval

    def close(self) -> None:
        """Stop the redraws and close the bar (idempotent)."""
        self._stop.set()
        if self._ticker.is_alive():
            self._ticker.join()
        self.bar.close()

    def __enter__(self) -> "CaseProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
