"""ScienceWorld's gold paths made into demonstrations: walks collapsed to teleports, which tasks score unsteadily."""

from __future__ import annotations


def is_electrical(task_name: str) -> bool:
    return "power-component" in task_name or "conductivity" in task_name


def teleport_allowed(simplifications: str) -> bool:
    return simplifications == "easy" or "teleportAction" in simplifications.split(",")


def shorten_gold_path(actions: list[str]) -> list[str]:
    """Collapse each run of walking actions into one ``teleport to <last room reached>``.

    ScienceWorld's gold paths walk room to room (``open door to kitchen``,
    ``go to kitchen``, ``open door to outside``, ``go to outside``) even when
    teleporting is allowed; ETO's instruction and examples teleport. A run of
    ``open door to``/``go to`` actions becomes one teleport to the room of its
    last ``go to``; a run without a ``go to`` is kept as is. Callers verify
    that the result still succeeds.
    """
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        rooms = [a[len("go to "):] for a in run if a.startswith("go to ")]
        out.extend([f"teleport to {rooms[-1]}"] if rooms else run)
        run.clear()

    for action in actions:
        if action.startswith(("open door to ", "go to ")):
            run.append(action)
        else:
            flush()
            out.append(action)
    flush()
    return out
