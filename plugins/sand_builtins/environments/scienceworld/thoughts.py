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
MAX_GOAL_WORDS = 12
"""The goal is quoted in thoughts; longer goals are cut at a word boundary to keep thoughts short."""

TEMPLATE_WORDS = frozenset("""
a activate am an and answer around asks at build can carrying change check circuit close combine connect cool
dig disconnect do doing done door down eat everything examine focus for game get given go grow happen heat help here
how i i'll i'm in inside into is it let look may me mean measure mix move need now observed of off on one open option
outside pick plant plants points pour power put read running says should so soil switch task tell temperature that
the them there to turn up use wait water what which while with
""".split())
"""Every word the templates below add themselves (lower case)."""


def description(task: str) -> str:
    """The task description alone, without the first look that ``reset`` appends (``initial_look``).

    Rooms and objects in that look are not what the task *asks* for, so phrases
    like "the task says ..." consult the description only.
    """
    lines = []
    for line in task.splitlines():
        if line.startswith(("This room is called", "This outside location")):
            break
        lines.append(line)
    return "\n".join(lines)


def _article(text: str) -> str:
    """ScienceWorld's ``a(n) animal`` -> ``an animal``."""
    return re.sub(r"\ba\(n\) (\w)", lambda m: ("an " if m.group(1) in "aeiou" else "a ") + m.group(1), text)


def goal(task: str) -> str:
    """``"Your task is to boil water. ..."`` -> ``"boil water"`` (its first clause, at most MAX_GOAL_WORDS words)."""
    m = _GOAL.search(task)
    text = _article(m.group(1)) if m else "finish the task"
    return " ".join(text.split(",")[0].split()[:MAX_GOAL_WORDS])


def _sentences(desc: str) -> list[str]:
    return [x.strip() for x in re.split(r"(?<=[.!?])\s+", " ".join(desc.split())) if x.strip()]


def _rule_for(desc: str, thing: str) -> str | None:
    """The task sentence that names ``thing`` (a box, a room), or None."""
    for sentence in _sentences(desc):
        if re.search(rf"\b{re.escape(thing)}\b", sentence):
            return sentence
    return None


def _focus(task: str, history: Sequence[Step], obj: str) -> str:
    """Focus actions follow the task's "focus on ..." instructions in order; conditional ones ("If ...,
    focus on the green box") follow what was observed."""
    desc = description(task)
    rule = _rule_for(desc, obj)
    if rule is not None and rule.startswith("If"):
        return f"Given what I observed, the task says to focus on the {obj} now."
    done = sum(1 for s in history if s.observation.startswith("You focus on"))
    steps = [m.group(1) for x in _sentences(desc) if not x.startswith("If")
             for m in [re.search(r"[Ff]ocus on (the [^.,]+)", x)] if m]
    if done < len(steps) and obj not in steps[done]:
        return f"The task says to focus on {_article(steps[done])}, and that is the {obj}."
    return f"For the task to {goal(task)}, I should focus on the {obj} now."


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
    rule = _rule_for(description(task), dest)
    if rule is not None and rule.startswith("If"):
        return f"Given what I observed, the task says to put it in the {dest}, so I'll move the {obj} there."
    if rule is not None:
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
    where = "outside" if room == "outside" else f"to the {room}"
    if _rule_for(description(task), room) is not None:
        return f"The task points me {where}, so I'll go there."
    where = "outside" if room == "outside" else f"in the {room}"
    return f"To {goal(task)}, I should look {where}, so I'll go there."


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
        return _focus(task, history, head(m.group(1)))
    if m := re.fullmatch(r"pick up (.+)", a):
        obj = head(m.group(1))
        return f"I'll need the {obj} to {g}, so I'll pick it up."
    if m := re.fullmatch(r"move (.+?) to (.+)", a):
        return _move(task, head(m.group(1)), head(m.group(2)))
    if m := re.fullmatch(r"drop (.+)", a):
        return f"I'll put the {head(m.group(1))} down here."
    if m := re.fullmatch(r"pour (.+) (?:into|in) (.+)", a):
        what, dest = head(m.group(1)), head(m.group(2))
        purpose = "water the plant" if "flower pot" in dest else "combine them"
        return f"I'll pour the {what} into the {dest} to {purpose}."
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
    if m := re.fullmatch(r"close door to (.+)", a):
        return f"I'll close the door to the {m.group(1)}."
    if m := re.fullmatch(r"close (.+)", a):
        return f"I'm done with the {head(m.group(1))}, so I'll close it."
    if m := re.fullmatch(r"eat (.+)", a):
        return f"I'll eat the {head(m.group(1))}."
    return f"To {g}, I'll {a} now."
