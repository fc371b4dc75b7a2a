"""gpudoctor: environment doctor and setup validator for GPU machines."""

from __future__ import annotations

__version__ = "0.1.0"
