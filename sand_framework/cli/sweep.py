"""``sand sweep``: run an experiment's arms × seeds (resumable) and tabulate mean ± std."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from sand_framework.cli.common import PLUGINS_DIR, friendly


@click.command("sweep")
@click.argument("sweep_file", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Folder of the sweep's runs (default: the file's output_dir).")
@click.option("--arm", "arms", multiple=True, help="Only this arm (repeatable); arms it reuses must be done.")
@click.option("--seed", "seeds", multiple=True, type=int,
              help="Only this seed (repeatable); one `sand sweep --seed K` per seed can run side by side.")
@click.option("--plan", is_flag=True, help="Validate every arm's recipe and print the runs, without running "
              "(exit 2: a recipe problem; exit 4: this machine lacks what an arm needs, as `sand validate`).")
@click.option("--for-another-machine", is_flag=True,
              help="With --plan: check only the recipes; what this machine lacks is listed on stderr, not a failure.")
@click.option("--table-only", is_flag=True,
              help="Only rebuild results.md / results.json / success_by_arm.png from finished runs.")
@click.option("--compare", "compare_only", is_flag=True,
              help="Only print the paired comparisons of the file's `comparisons:` from finished runs; "
                   "runs and writes nothing.")
@click.option("--status", "status_only", is_flag=True,
              help="Only print where every run stands (finished, running, stopped part way, not started; the stage "
                   "in progress and how far it got); runs and writes nothing.")
@click.option("--export", "export_dir", type=click.Path(file_okay=False),
              help="Only copy every finished run, and every run stopped part way, without its weights into this "
                   "folder (to keep or commit the results) and write its results.md; runs nothing.")
@click.option("--rebuild-starts", is_flag=True,
              help="Before an arm that needs the SFT start of the arm it reuses, exported without its weights, train "
                   "that start again (`sand run --resume RUN --rebuild-weights`, once per seed).")
@click.option("--until", metavar="STAGE",
              help="Each run that has STAGE (expert, train/iterK, synth/iterK, eval) computes up to it and stops "
                   "(`sand run --until`); a later sweep without it finishes them.")
@PLUGINS_DIR
@friendly
def command(sweep_file, out_dir, arms, seeds, plan, for_another_machine, table_only, compare_only, status_only,
            export_dir, rebuild_starts, until, plugin_dirs):
    """Run every arm of SWEEP_FILE for every seed, each in OUT/<arm>/seed<k>; rerun to resume.

    Finished runs are skipped, interrupted ones resumed (`sand run --resume`), and arms with `reuse:` start
    from the same seed's expert data and SFT weights of the arm they name. Ends by writing OUT/results.md
    (with the paired tests of `comparisons:`) and OUT/success_by_arm.png. SIGTERM or SIGINT stops the run in
    progress cleanly, starts no other, and exits 143 / 130 with the command that continues.
    """
    from sand_framework.app.runner import resolve
    from sand_framework.config.codegate import ALLOW_FLAG, recipe_plugins_allowed
    from sand_framework.config.preflight import Findings, check
    from sand_framework.errors import RecipeError
    from sand_framework.store import RunLayout
    from sand_framework.sweep import collect, comparisons_markdown, describe, load_sweep, run_sweep, write_results

    if sum((plan, table_only, compare_only, status_only, export_dir is not None)) > 1:
        raise click.UsageError("--plan, --table-only, --compare, --status and --export exclude each other")
    if for_another_machine and not plan:
        raise click.UsageError("--for-another-machine goes with --plan")
    spec = load_sweep(sweep_file)
    out = Path(out_dir or spec.output_dir)
    if compare_only:
        if not spec.comparisons:
            raise RecipeError(["--compare: the sweep file declares no `comparisons:` "
                               "(e.g. {question: ..., a: sand/final, b: sft-control/final})"], sweep_file)
        data = collect(spec, out)
        click.echo(comparisons_markdown(data["comparisons"], spec.alpha))
        return
    if status_only:
        from sand_framework.sweep.status import status_markdown, sweep_status

        click.echo(status_markdown(sweep_status(spec, out)))
        return
    if export_dir is not None:
        from sand_framework.sweep.export import export_results

        done = export_results(spec, out, Path(export_dir))
        path = write_results(spec, Path(export_dir))
        click.echo(f"exported {len(done.runs)} finished run(s) without weights into {export_dir} "
                   f"({done.bytes / 1e6:.1f} MB); results: {path}")
        if done.stopped:
            click.echo(f"exported {len(done.stopped)} run(s) stopped part way, with their finished stages and units "
                       f"({', '.join(done.stopped)}): on another machine the sweep continues them, at once where no "
                       "stage left reads their SFT start, else once `sand run --resume RUN --rebuild-weights` has "
                       "trained it again (in the run, or in the arm it reuses; `sand sweep --rebuild-starts` does it)")
        if done.unfinished:
            click.echo("not exported (not started, or running: stop it first): " + ", ".join(done.unfinished),
                       err=True)
        return
    unknown = [a for a in arms if a not in {x.name for x in spec.arms}]
    if unknown:
        raise RecipeError([f"--arm {a!r}: no such arm (arms: {', '.join(x.name for x in spec.arms)})" for a in unknown])
    if plan:
        runs = describe(spec)
        found = Findings()
        for r in runs:
            where = f"arm {r['arm']} seed {r['seed']}"
            try:
                recipe, _, registries = resolve(r["recipe"], r["overrides"], list(plugin_dirs))
            except RecipeError as exc:
                found.recipe += [f"{where}: {p}" for p in exc.problems]
                continue
            arm = check(recipe, registries)
            found.recipe += [f"{where}: {p}" for p in arm.recipe]
            found.machine += [f"{where}: {p}" for p in arm.machine]
        if found.recipe and found.machine:
            click.echo(f"this machine also lacks {len(found.machine)} thing(s) to run the arms (not recipe "
                       "problems):\n" + "\n".join(f"  - {p}" for p in found.machine), err=True)
        found.raise_for(sweep_file, for_another_machine)
        if found.machine:
            click.echo(f"not ready here: this machine lacks {len(found.machine)} thing(s) to run the arms:\n"
                       + "\n".join(f"  - {p}" for p in found.machine), err=True)
        click.echo(json.dumps(runs, indent=2))
        return
    failed, busy, partial = [], [], []
    if until is not None and RunLayout.parse_stage(until) is None:
        raise RecipeError([f"--until {until!r}: not a stage name (expert, train/iterK, synth/iterK, eval)"])
    if not table_only:
        resume = shlex.join(["sand", "sweep", sweep_file, *(["-o", out_dir] if out_dir else []),
                             *[w for a in arms for w in ("--arm", a)], *[w for s in seeds for w in ("--seed", str(s))],
                             *[w for d in plugin_dirs for w in ("--plugins-dir", d)],
                             *(["--rebuild-starts"] if rebuild_starts else []),
                             *(["--until", until] if until else []),
                             *([ALLOW_FLAG] if recipe_plugins_allowed() else [])])
        outcomes = run_sweep(spec, out, list(arms), list(plugin_dirs), seeds=list(seeds), resume=resume,
                             rebuild_starts=rebuild_starts, until=until)
        failed = [o for o in outcomes if o.status in ("failed", "blocked")]
        busy = [o for o in outcomes if o.status == "busy"]
        partial = [o for o in outcomes if o.status == "until"]
    path = write_results(spec, out)
    click.echo(path.read_text())
    click.echo(f"results: {path}")
    if partial:
        click.echo(f"computed up to {until} as asked (--until), not finished: "
                   + ", ".join(f"{o.arm}/seed{o.seed}" for o in partial), err=True)
    if busy:
        click.echo("left to the process running them: " + ", ".join(f"{o.arm}/seed{o.seed} ({o.message})"
                                                                   for o in busy), err=True)
    if failed:
        click.echo("not finished: " + ", ".join(f"{o.arm}/seed{o.seed} ({o.status}: {o.message})" for o in failed),
                   err=True)
        sys.exit(1)
