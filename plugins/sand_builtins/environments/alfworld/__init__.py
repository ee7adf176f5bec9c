"""ALFWorld (text mode, TextWorld engine) as a SAND environment.

Install with ``pip install 'sand-framework[alfworld]'`` (alfworld 0.4.2; it
compiles two dependencies, ~100 s, needs gcc and cmake). The game files come
from ``alfworld-download`` or any folder laid out like ``$ALFWORLD_DATA``
(``json_2.1.1/{train,valid_seen,valid_unseen}/<task>/<trial>/game.tw-pddl``);
set ``ALFWORLD_DATA`` or the ``data_dir`` parameter. This module imports
without alfworld; using the environment without it raises
:class:`~sand_framework.errors.EnvironmentUnavailable`.

Task ids
    ``<split dir>/<task>/<trial>``, e.g.
    ``valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790``:
    the game's path below ``json_2.1.1``, so an id means the same game on any
    machine (ALFWorld's own listing is ``os.walk`` order, which is not portable).

Splits (ETO/MPO protocol, which SAND follows)
    ``train``  ``json_2.1.1/train``; ``seen`` ``valid_seen`` (140 games, ETO's
    "test-seen"/dev); ``unseen`` ``valid_unseen`` (134, ETO's "test-unseen").
    Only *playable* games are listed, by ALFWorld's own rule: the path holds
    neither ``movable`` nor ``Sliced``, ``traj_data.json``'s task type is one of
    the six, ``game.tw-pddl`` exists and says ``"solvable": true``.

Text
    :meth:`reset` returns what ETO shows: the room description and
    ``Your task is to: ...`` (TextWorld's banner dropped). "You arrive at loc N. "
    is stripped from observations like ETO's ``process_ob``.

Actions
    The 2.1.1 game files (up to alfworld 0.3.x, and ETO's copies) place objects
    with ``put X in/on Y``; the 2.1.2 files of alfworld >= 0.4 use ``move X to Y``.
    Both spellings (and ``put X in Y`` / ``put X on Y``) are accepted and
    rewritten to what the loaded game's grammar expects (:attr:`AlfworldEnv.put_syntax`,
    :meth:`AlfworldEnv.describe`). An action that is not admissible gets the
    engine's own ``Nothing happens.``, marked ``valid=False``, and still costs a step.

Reward
    Success, 0 or 1; the episode ends on success or after ``max_steps`` steps
    (default 30; ETO and MPO use 30-40).

Expert
    ``<data>/expert_trajs/<split dir>.jsonl`` when it lists the game (the
    handcoded expert's actions, verified to replay to success), else ALFWorld's
    handcoded TextWorld expert run live with the ``put X in/on Y`` command of
    alfworld 0.3.5 (0.4.x's expert emits ``move X to Y``, which the 2.1.1 games
    reject; :mod:`.expert` wraps the installed one). Both are rewritten to the game's syntax; the expert's opening
    ``look`` (it repeats the first observation) is dropped unless
    ``keep_initial_look``.

Speed
    A fresh TextWorld PDDL reset translates PDDL to SAS in Python twice
    (1.7-3 s per reset on a loaded 2-core machine). The translation is cached
    per game file (process-wide LRU, :mod:`.engine`), so a second reset of a
    game costs a fraction of that. Branching is reset + replay (the planner
    state lives in C; deepcopy fails).

Modules
    :mod:`.games` (files on disk: splits, ids, stored experts), :mod:`.text`
    (ETO's text, the two placing spellings, the instruction), :mod:`.engine`
    (the TextWorld import and translation cache), :mod:`.expert` (the live
    expert in 0.3.5 syntax), :mod:`.eto_ids` (ETO records -> games),
    :mod:`.env` (the environment).
"""


from sand_builtins.environments.alfworld.env import AlfworldEnv
from sand_builtins.environments.alfworld.games import playable_games
from sand_builtins.environments.alfworld.text import NOTHING_HAPPENS, process_observation, task_text
from sand_framework import hookimpl

__all__ = ["NOTHING_HAPPENS", "AlfworldEnv", "playable_games", "process_observation", "task_text"]


@hookimpl
def sand_register_environments(register):
    register(AlfworldEnv)
