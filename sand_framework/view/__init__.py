"""``sand view``: a static, offline site to browse what a run synthesized and how its models behaved.

``build_site("runs/qs", "runs/qs/view")`` writes ``index.html`` (opens from ``file://``, no network), its CSS
and JS, the report's figures and one small JS data file per trajectory and per evaluated task, loaded on
demand. It reads the same durable artifacts as ``sand report`` (:mod:`sand_framework.report.data`) and works on
a run directory, a ``sand eval`` folder or a ``sand sweep`` output folder. See ``docs/reports.md``.
"""

from __future__ import annotations

from sand_framework.view.build import SiteData, collect
from sand_framework.view.site import build_site, serve

__all__ = ["SiteData", "build_site", "collect", "serve"]
