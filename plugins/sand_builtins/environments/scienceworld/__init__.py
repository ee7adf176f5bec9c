"""ScienceWorld (Wang et al., 2022) as a SAND environment, on the ETO/MPO protocol.

ScienceWorld simulates 30 elementary-science tasks (boil water, grow a plant,
test conductivity, ...) in a Scala engine reached through py4j. The
``scienceworld`` package (install extra ``scienceworld``) ships the jar and
generates every task variation itself, so no game data is needed; a Java
runtime (>= 11) must be on ``PATH``.

Task ids
    ETO's ``f"{taskname2id[task_name]}_{variation_idx}"``, e.g. ``0_12`` is
    variation 12 of ``task-1-boil``. Ids therefore match ETO's (and SAND's)
    trajectory files. The id map and splits ship with this package under
    ``data/sciworld/`` (see ``PROVENANCE.md`` there).

Splits (ETO's index files)
    ``train``  ``train_indices.json`` (1,483 tasks);
    ``seen``   ``dev_indices.json`` (194; ETO's "test-seen");
    ``unseen`` ``test_indices.json`` (211; ETO's "test-unseen").
    Note: 54 ``seen`` tasks also occur in ``train`` -- this is ETO's data and is
    kept as is, so figures stay comparable with the papers.

Episode
    ``reset`` loads the task with ETO's ``"easy"`` simplifications (teleport,
    open doors, self-watering pots, no electrical actions outside the
    electrical tasks), makes ScienceWorld's usual first move ``look around``
    and returns ScienceWorld's task description (``Task Description:\n...``,
    ETO's ``info['taskDesc']``) followed by that look. Each ``step`` counts
    towards the per-task cap from ETO's ``max_steps.json``.

Reward (ETO)
    The maximum score seen during the episode / 100, clipped to [0, 1]. A
    negative score (ScienceWorld's -100 for a failed task, e.g. focusing on the
    wrong object) ends the episode with reward 0 (``keep_max_on_failure`` keeps
    the maximum instead, as ETO's evaluation loop does). ``success`` means the
    task was completed (score 100). See :class:`ScoreBook`.

Expert
    ScienceWorld's own gold action sequence for the variation (generated at
    load time with the same simplifications), cleaned: it ends at the action
    that completes the task (gold paths often go on, e.g. a trailing
    ``wait1``), and with ``shorten_expert`` each walk through doors
    (``open door to kitchen``, ``go to kitchen``, ...) becomes one
    ``teleport to kitchen``, as in ETO's instruction and examples. Each variant
    is replayed and kept only if it succeeds; otherwise the raw gold path is
    returned (``sand env check`` reports such tasks). With ``expert_thoughts``
    (default) each gold action gets one short ReAct thought built from the
    task's goal and the action type (:mod:`.thoughts`).

Speed and robustness
    Every instance owns one JVM (heap capped by ``java_heap``) that is started
    on first use and kept warm; ``clone()`` builds a new instance with its own
    JVM; ``close()`` shuts it down and reaps it. Steps go through the server's
    raw ``step``/``getScore`` calls, skipping the valid-action listing that
    ``ScienceWorldEnv.step`` builds on every call (5-50x slower). Branching
    is reset + replay (ScienceWorld has no snapshot API). A JVM that died
    (killed, OOM) is detected on the next call, restarted, and the episode
    replayed transparently; ``faults_survived`` counts such restarts.

Determinism (measured)
    Observations are the same across resets and JVMs except one thing:
    objects with the same name (three "wood cup"s) are listed in a different
    order after each reset; :func:`canonical_listing` orders such ties so a
    replay reproduces the recorded text. In the electrical tasks
    (power-component, conductivity) the score may rise one tick earlier or
    later between runs of the same actions, with identical observations.

Modules
    :mod:`.tasks` (ids, splits, step caps), :mod:`.scoring` (reward),
    :mod:`.listing` (deterministic listings), :mod:`.prompts` (the
    instruction), :mod:`.gold` (gold paths as demonstrations),
    :mod:`.thoughts` (expert thoughts), :mod:`.server` (the JVM),
    :mod:`.env` (the environment).
"""


from sand_builtins.environments.scienceworld.env import ScienceWorldEnv
from sand_builtins.environments.scienceworld.listing import canonical_listing
from sand_builtins.environments.scienceworld.scoring import ScoreBook, episode_reward
from sand_builtins.environments.scienceworld.tasks import make_task_id, parse_task_id, split_pairs, taskname2id
from sand_framework import hookimpl

__all__ = ["ScienceWorldEnv", "ScoreBook", "canonical_listing", "episode_reward", "make_task_id", "parse_task_id",
           "split_pairs", "taskname2id"]


@hookimpl
def sand_register_environments(register):
    register(ScienceWorldEnv)
