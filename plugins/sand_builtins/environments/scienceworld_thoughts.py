"""Short ReAct thoughts for ScienceWorld gold actions, grounded in the task and the action type.

ETO's and SAND's ScienceWorld expert data carry a short reason before every
action ("I need to heat the water, so I should move it to the stove"); the
simulator's gold paths carry none. These templates give each gold action one
first-person sentence built from the task's goal (``Your task is to ...``),
the action's verb and objects, and the latest observation where it matters
(an ambiguity question). They never name an object or room the action, the
task or the observations so far do not name; every word they add themselves
is in :data:`TEMPLATE_WORDS`.
"""

from __future__ import annotations

import re
from typing import Sequence

from sand_framework.types import Step

_GOAL = re.compile(r"Your task is to ([^.]+)\.")
_HEATERS = ("stove", "oven", "blast furnace", "fire pit", "hot plate", "lighter")
_COOLERS = ("freezer", "fridge", "ice box")
_POWER = ("battery", "generator", "solar panel", "wind generator")
_STATE_WORDS = ("boil", "melt", "freeze", "state of matter", "temperature", "melting point", "boiling point")
MAX_GOAL_WORDS = 9
"""The goal is quoted in thoughts; longer goals are cut at a word boundary to keep thoughts short."""

TEMPLATE_WORDS = frozenset("""
to i i'll i'm need the so should it is what for task a an this that then now there my will do let me see here
heat cool down move put place says get into them combine mix everything in wait while change happen plants grow
examine check how doing measure temperature of with thermometer dig soil shovel use on help build circuit
connect disconnect pick up down drop pour read may tell open at inside close turn off done switch power water
running activate deactivate look around carrying asks which one mean first listed option answer go points
eat focus signal around be where whatever make progress thing
""".split())
"""Every word the templates below add themselves (lower case)."""


def goal(task: str) -> str:
    """``"Your task is to boil water. ..."`` -> ``"boil water"`` (at most MAX_GOAL_WORDS words)."""
    m = _GOAL.search(task)
    text = m.group(1) if m else "finish the task"
    text = text.replace("a(n) ", "a ").split(",")[0].strip()
    words = text.split()
    return " ".join(words[:MAX_GOAL_WORDS])


def head(obj: str) -> str:
    """An object's name without ScienceWorld's qualifiers: ``"metal pot containing water in kitchen"`` ->
    ``"metal pot"``."""
    return re.split(r" (?:containing|in|on|with) ", obj.strip(), maxsplit=1)[0]


def _any(text: str, words: Sequence[str]) -> bool:
    return any(re.search(rf"\b{re.escape(w)}\b", text) for w in words)


def _move(task: str, obj: str, dest: str) -> str:
    g = goal(task)
    if _any(dest, _HEATERS):
        return f"To {g}, I need to heat it, so I'll move the {obj} to the {dest}."
    if _any(dest, _COOLERS):
        return f"To {g}, I need to cool it down, so I'll move the {obj} to the {dest}."
    if dest in task:
        return f"The task says to put it in the {dest}, so I'll move the {obj} there."
    if "sink" in dest:
        return f"I'll move the {obj} to the {dest} so I can get water into it."
    if "flower pot" in dest:
        return f"I'll put the {obj} in the {dest} to help the plants grow."
    return f"I'll move the {obj} to the {dest}; I need it there to {g}."


def _activate(task: str, obj: str) -> str:
    if _any(obj, _HEATERS):
        return f"I'll turn on the {obj} to heat what is on it."
    if "sink" in obj:
        return f"I'll turn on the {obj} to get water."
    if _any(obj, _POWER):
        return f"I'll switch on the {obj} to power the circuit."
    return f"I'll activate the {obj}; I need it running to {goal(task)}."


def _wait(task: str) -> str:
    if _any(task, ("grow",)):
        return "Now I'll wait a while for the plants to grow."
    if _any(task, _STATE_WORDS):
        return "Now I'll wait a while for the temperature to change."
    return "Now I'll wait a while for the change to happen."


def _teleport(task: str, room: str) -> str:
    if room in task:
        return f"The task points me to the {room}, so I'll go there."
    return f"To {goal(task)}, I should look in the {room}, so I'll go there."


def expert_thought(task: str, history: Sequence[Step], action: str) -> str:
    """One short first-person sentence justifying ``action`` from the task and the latest observation."""
    a = " ".join(action.split())
    last = history[-1].observation if history else task
    g = goal(task)
    if a.isdigit() and "Ambiguous request" in last:
        return f"The game asks which one I mean; option {a} is the one, so I'll answer {a}."
    if m := re.fullmatch(r"(?:teleport to|go to) (.+)", a):
        return _teleport(task, m.group(1))
    if m := re.fullmatch(r"open door to (.+)", a):
        return f"I'll open the door to the {m.group(1)} so I can go there."
    if a == "look around":
        return "Let me look around to see what is here."
    if a == "inventory":
        return "Let me check what I am carrying."
    if m := re.fullmatch(r"focus on (.+)", a):
        return f"For the task to {g}, I should focus on the {head(m.group(1))} now."
    if m := re.fullmatch(r"pick up (.+)", a):
        obj = head(m.group(1))
        return f"I'll need the {obj} to {g}, so I'll pick it up."
    if m := re.fullmatch(r"move (.+?) to (.+)", a):
        return _move(task, head(m.group(1)), head(m.group(2)))
    if m := re.fullmatch(r"drop (.+)", a):
        return f"I'll put the {head(m.group(1))} down here."
    if m := re.fullmatch(r"pour (.+) (?:into|in) (.+)", a):
        return f"I'll pour the {head(m.group(1))} into the {head(m.group(2))} to combine them."
    if m := re.fullmatch(r"mix (.+)", a):
        return f"Everything is in the {head(m.group(1))} now, so I'll mix it."
    if m := re.fullmatch(r"activate (.+)", a):
        return _activate(task, head(m.group(1)))
    if m := re.fullmatch(r"deactivate (.+)", a):
        return f"I'm done with the {head(m.group(1))}, so I'll turn it off."
    if a in ("wait", "wait1", "wait 1"):
        return _wait(task)
    if m := re.fullmatch(r"(?:examine|look at) (.+)", a):
        return f"I'll examine the {head(m.group(1))} to check how it is doing."
    if m := re.fullmatch(r"use (.+?) on (.+)", a):
        tool, target = head(m.group(1)), head(m.group(2))
        if "thermometer" in tool:
            return f"I'll measure the temperature of the {target} with the {tool}."
        if "shovel" in tool:
            return f"I'll dig the {target} with the {tool} to get soil."
        return f"I'll use the {tool} on the {target} to help me {g}."
    if m := re.fullmatch(r"connect (.+?) to (.+)", a):
        return f"To build the circuit, I'll connect the {m.group(1)} to the {m.group(2)}."
    if m := re.fullmatch(r"disconnect (.+)", a):
        return f"I'll disconnect the {head(m.group(1))}."
    if m := re.fullmatch(r"read (.+)", a):
        return f"The {head(m.group(1))} may tell me what to do, so I'll read it."
    if m := re.fullmatch(r"open (.+)", a):
        return f"I'll open the {head(m.group(1))} to look at what is inside."
    if m := re.fullmatch(r"close (.+)", a):
        return f"I'm done with the {head(m.group(1))}, so I'll close it."
    if m := re.fullmatch(r"eat (.+)", a):
        return f"I'll eat the {head(m.group(1))}."
    return f"To {g}, I'll {a} now."
