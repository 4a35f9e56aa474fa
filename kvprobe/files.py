"""Small file helpers shared by the library, benchmarks and studies."""

from __future__ import annotations

import os
import platform
import tempfile
from pathlib import Path

from .version import __version__


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temp file in the same folder, then a rename.

    Readers see the old file or the new one, never a partial write; a failed write
    leaves no temp file behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def versions() -> dict[str, str]:
    """Versions of the packages that decide the numbers (recorded by every run and store)."""
    import nnsight
    import torch
    import transformers

    return {"kvprobe": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "nnsight": getattr(nnsight, "__version__", "unknown"), "python": platform.python_version()}
