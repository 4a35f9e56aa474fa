"""The version of kvprobe, in one module that imports nothing (``kvprobe.__version__``, and what
``kvprobe.files.versions`` records in every run's config; pyproject.toml names the same number)."""

__version__ = "0.1.0"
