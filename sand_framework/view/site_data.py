"""What ``sand view`` collected about a folder, as the site's builders fill it in."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sand_framework.report.data import RunData


@dataclass
class SiteData:
    kind: str
    """``run``, ``eval`` (a ``sand eval`` folder) or ``sweep``."""
    title: str
    source: Path
    runs: list[RunData]
    overview: dict[str, Any] = field(default_factory=dict)
    index: dict[str, Any] = field(default_factory=dict)
    chunks: dict[str, Any] = field(default_factory=dict)
    """Data file key (``s0/12``, ``e/3``, ``p0/1``) -> its JSON-able content."""
    notes: list[str] = field(default_factory=list)
    """Things the site could not show and why (no tokenizer, unreadable lines), also shown in the page."""
