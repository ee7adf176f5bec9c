"""``sand plan RECIPE --gpus N``: what goes on which device for a node, before any GPU is touched.

Each component that places work on devices says where for the node (its
``device_plan(params, node)`` classmethod, see :func:`sand_framework.accelerator.plan_lines`): the
``vllm`` policy its engines (GPUs, tensor parallelism, memory share, LoRA,
CUDA graphs, whether both stay awake), the trainer its processes. Runs on any
machine, CPU-only included; the same plan is what ``sand run`` uses on a node
with that many GPUs.
"""

from __future__ import annotations

import click

from sand_framework.cli.common import PLUGINS_DIR, friendly


@click.command("plan")
@click.argument("recipe")
@click.argument("overrides", nargs=-1)
@click.option("--gpus", type=click.IntRange(min=0), default=None,
              help="GPUs on the node (default: the ones this machine has; 0 = CPU only).")
@click.option("--gpu-memory", "gpu_memory", type=click.FloatRange(min=1), default=None,
              help="GB of memory per GPU (default: this machine's first GPU, else 80).")
@PLUGINS_DIR
@friendly
def command(recipe, overrides, gpus, gpu_memory, plugin_dirs):
    """Print where RECIPE's engines and training processes go on a node of --gpus GPUs."""
    from sand_framework.accelerator import plan_lines
    from sand_framework.config.preflight import recipe_node
    from sand_framework.app.runner import resolve

    r, _, registries = resolve(recipe, list(overrides), list(plugin_dirs))
    if gpus is None or gpu_memory is None:
        here, memory = _this_machine()
        gpus = here if gpus is None else gpus
        gpu_memory = gpu_memory or memory or 80.0
    node = recipe_node(r, registries, gpus, gpu_memory if gpus else None)
    where = f"{gpus} GPU(s) of {gpu_memory:g} GB" if gpus else "CPU only"
    click.echo(f"plan for {recipe} on {where} (model {r.model.base}, trainer writes "
               f"{node.trained_weights or 'unknown'} weights)")
    sections = plan_lines(r.slots, registries, node)
    if not sections:
        click.echo("nothing in this recipe places work on devices")
    for title, lines in sections:
        click.echo(f"{title}:")
        for line in lines:
            click.echo(f"  {line}")


def _this_machine() -> tuple[int, float | None]:
    import sys

    if "torch" not in sys.modules:
        try:
            import torch  # noqa: F401
        except ImportError:
            return 0, None
    import torch

    if not torch.cuda.is_available():
        return 0, None
    n = torch.cuda.device_count()
    return n, (torch.cuda.get_device_properties(0).total_memory / 1e9 if n else None)
