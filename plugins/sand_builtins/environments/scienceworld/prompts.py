"""ScienceWorld's instruction in ETO's wording, adapted to the simplifications in use."""

from __future__ import annotations

_ROOMS = "kitchen, foundry, workshop, bathroom, outside, living room, bedroom, greenhouse, art studio, hallway"
_ACTIONS = """open OBJ: open a container
close OBJ: close a container
activate OBJ: activate a device
deactivate OBJ: deactivate a device
connect OBJ to OBJ: connect electrical components
disconnect OBJ: disconnect electrical components
use OBJ [on OBJ]: use a device/item
look around: describe the current room
examine OBJ: describe an object in detail
look at OBJ: describe a container's contents
read OBJ: read a note or book
move OBJ to OBJ: move an object to a container
pick up OBJ: move an object to the inventory
pour OBJ into OBJ: pour a liquid into a container
mix OBJ: chemically mix a container
teleport to LOC: teleport to a specific room
focus on OBJ: signal intent on a task object
wait: task no action for 10 steps
wait1: task no action for a step"""


def instruction(simplifications: str) -> str:
    """The environment instruction; teleporting and open containers are mentioned only where they hold."""
    easy = simplifications == "easy"
    lines = [
        "You are a helpful assistant to do some scientific experiment in an environment.",
        f"In the environment, there are several rooms: {_ROOMS}",
        "You should explore the environment and find the items you need to complete the experiment.",
    ]
    if easy or "teleportAction" in simplifications:
        lines.append("You can teleport to any room in one step.")
    if easy or "openContainers" in simplifications:
        lines.append("All containers in the environment have already been opened, "
                     "you can directly get items from the containers.")
    lines += ["", "The available actions are:", _ACTIONS, "",
              "If the environment asks which object you meant, answer with the number of the option.",
              "Every turn, reply in exactly this format:",
              "Thought: <your reasoning about the current situation and plan>",
              "Action: <one action>"]
    return "\n".join(lines)
