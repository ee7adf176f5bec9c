"""``sand view``: a static site to browse a run's synthesis and evaluations (offline, opens from file://)."""

from __future__ import annotations

from pathlib import Path

import click

from sand_framework.cli.common import friendly


@click.command("view")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder of the site (default: PATH/view).")
@click.option("--serve", is_flag=True, help="Then serve it on 127.0.0.1 (this machine only) until Ctrl-C.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Port for --serve (0: any free port).")
@friendly
def command(path, out_dir, serve, port):
    """Write a browsable site for PATH: a run directory, a `sand eval` folder or a `sand sweep` folder.

    Overview (recipe, stages, metrics, cost, figures, synthesis totals), every synthesized step (samples,
    detector, rollouts, critiques, deliberation, the training target under the model's chat template) and every
    evaluated episode side by side. Open OUT/index.html in a browser; nothing is fetched from the network.
    """
    from sand_framework.view import build_site, serve as serve_site

    out = Path(out_dir) if out_dir else Path(path) / "view"
    info = build_site(path, out)
    for note in info["notes"]:
        click.echo(f"note: {note}", err=True)
    b = info["bytes"]
    click.echo(f"view: {info['index']} ({info['kind']}; {info['chunks']} data files, "
               f"{(b['chunks'] + b['index.js']) / 1e6:.2f} MB of data, {info['seconds']:.1f} s)")
    if serve:
        serve_site(out, port, echo=click.echo)
