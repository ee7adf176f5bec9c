"""Writing the ``sand view`` site: ``index.html`` (Jinja2, autoescaped), static CSS/JS, figures, JS data files.

Layout of ``OUT/``::

    index.html            overview (rendered here) + the browsers' shells (filled in by static/view.js)
    static/view.css, static/view.js
    figures/*.png         the report's figures for these runs (and the sweep's, copied)
    data/index.js         SAND.index({...}): the lists (one row per trajectory, task or pair), loaded with the page
    data/s0/12.js ...     SAND.chunk("s0/12", {...}): one trajectory's synthesis, loaded when it is opened
    data/e/3.js ...       every model's episode on one evaluated task
    .sand-view            marks the folder as this command's, so a rebuild may replace data/ and figures/

Data files are JavaScript rather than JSON because Chromium refuses ``fetch`` from ``file://``; a chunk is
loaded by adding a ``<script src>``. Their JSON is written with ``<``, ``>``, ``&`` and U+2028/9 escaped, and
the page only ever puts data into the DOM as text (``textContent``), never as markup.
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import socketserver
import time
from functools import partial
from pathlib import Path
from typing import Any

from sand_framework.errors import SandError
from sand_framework.view.build import SiteData, collect

HERE = Path(__file__).resolve().parent
MARKER = ".sand-view"
_JS_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


class ViewError(SandError):
    exit_code = 2


def js_json(value: Any) -> str:
    """JSON that is also safe JavaScript source wherever it is put (no ``</script>``, no line separators)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    for ch, esc in _JS_UNSAFE.items():
        text = text.replace(ch, esc)
    return text


def _write(path: Path, text: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8", "backslashreplace")  # a lone surrogate becomes the JS escape \udxxx
    path.write_bytes(data)
    return len(data)


def _prepare(out: Path) -> None:
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise ViewError(f"{out} exists and was not made by `sand view` (no {MARKER} in it); "
                        "choose another folder with -o")
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("data", "figures", "static"):
        if (out / sub).is_dir():
            shutil.rmtree(out / sub)
    (out / MARKER).write_text("made by `sand view`; `sand view` may replace this folder's contents\n")


def figures(site: SiteData, out: Path) -> list[dict[str, str]]:
    """The report's figures for the site's runs, written into ``out/figures`` (none when nothing was evaluated)."""
    from sand_framework.report import figures as fig

    made = []
    folder = out / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    runs = site.runs
    if any(r.evals for r in runs):
        plots = [(fig.results_figure, "results.png", "Average reward ×100 per split."),
                 (fig.deliberation_violin, "deliberation_by_difficulty.png",
                  "Per-trajectory deliberation rate by difficulty band (dots: episodes)."),
                 (fig.step_reward_figure, "reward_by_step.png",
                  "Bars: average reward ×100 of episodes that ended at step t; line: deliberation rate at step t.")]
        for make, name, caption in plots:
            if make(runs, folder / name):
                made.append({"src": f"figures/{name}", "caption": caption})
    sweep = site.overview.get("sweep") or {}
    if sweep.get("figure") and (site.source / sweep["figure"]).is_file():
        shutil.copy2(site.source / sweep["figure"], folder / sweep["figure"])
        made.append({"src": f"figures/{sweep['figure']}",
                     "caption": "Success per seed of every row, mean over seeds and a 95% interval over games."})
    return made


def cell(value: Any):
    """A report table cell as HTML: escaped first, then its markdown `code` and **bold** made into tags."""
    from markupsafe import Markup, escape

    text = str(escape("–" if value is None else value))
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", text)
    return Markup(text)


def render_index(site: SiteData, figs: list[dict[str, str]], links: list[dict[str, str]]) -> str:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

    env = Environment(loader=FileSystemLoader(str(HERE / "templates")), undefined=StrictUndefined,
                      autoescape=select_autoescape(["html"], default=True), trim_blocks=True, lstrip_blocks=True)
    env.filters["cell"] = cell
    return env.get_template("index.html").render(site=site, ov=site.overview, figures=figs, links=links,
                                                  notes=site.notes)


def build_site(path: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """Write the site for ``path`` into ``out_dir``; returns what was written (files, bytes, seconds)."""
    import os

    t0 = time.perf_counter()
    site = collect(path)
    out = Path(out_dir)
    _prepare(out)
    figs = figures(site, out)
    links = []
    for rel, text in (("report/report.md", "report (sand report)"), ("results.md", "sweep results (results.md)")):
        if (site.source / rel).is_file():
            links.append({"href": os.path.relpath(site.source / rel, out), "text": text})
    sizes = {"index.html": 0, "static": 0, "index.js": 0, "chunks": 0, "figures": 0}
    for name in ("view.css", "view.js"):
        sizes["static"] += _write(out / "static" / name, (HERE / "static" / name).read_text(encoding="utf-8"))
    sizes["index.js"] = _write(out / "data" / "index.js", f"SAND.index({js_json(site.index)});\n")
    largest = 0
    for key, data in site.chunks.items():
        n = _write(out / "data" / f"{key}.js", f"SAND.chunk({js_json(key)},{js_json(data)});\n")
        sizes["chunks"] += n
        largest = max(largest, n)
    sizes["index.html"] = _write(out / "index.html", render_index(site, figs, links))
    sizes["figures"] = sum(p.stat().st_size for p in (out / "figures").glob("*.png"))
    return {"index": out / "index.html", "kind": site.kind, "chunks": len(site.chunks), "bytes": sizes,
            "largest_chunk": largest, "open_bytes": sizes["index.html"] + sizes["static"] + sizes["index.js"],
            "seconds": round(time.perf_counter() - t0, 2), "notes": site.notes}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        pass


def serve(out_dir: str | Path, port: int = 8000, echo=print) -> None:
    """Serve ``out_dir`` on 127.0.0.1 only (reach it from elsewhere through ``ssh -L``) until interrupted."""
    handler = partial(_Quiet, directory=str(out_dir))
    socketserver.TCPServer.allow_reuse_address = True
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as httpd:
        port = httpd.server_address[1]
        echo(f"serving {out_dir} on http://127.0.0.1:{port}/ (this machine only; Ctrl-C stops)")
        echo(f"from another machine: ssh -L {port}:127.0.0.1:{port} USER@THIS_HOST, then open "
             f"http://127.0.0.1:{port}/")
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
