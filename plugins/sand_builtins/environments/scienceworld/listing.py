"""ScienceWorld's object listings made deterministic, so a replay reproduces the recorded observations."""

from __future__ import annotations

import re

_KEY_RE = re.compile(r"^\s*(?:a |an |the )?([^(.,:]*)")


def _item_key(item: str) -> str:
    """An object listing entry's name (``"a wood cup (containing red paint)"`` -> ``"wood cup"``)."""
    m = _KEY_RE.match(item)
    return m.group(1).strip() if m else item


def _tie_sorted(items: list[str]) -> list[str]:
    """Sort runs of adjacent items with the same name by their full text; everything else keeps its place."""
    out, i = [], 0
    while i < len(items):
        j = i + 1
        while j < len(items) and _item_key(items[j]) == _item_key(items[i]):
            j += 1
        out.extend(sorted(items[i:j]))
        i = j
    return out


def _split_top(text: str) -> list[str] | None:
    """Split at ", " outside parentheses; None when parentheses do not balance."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0 and text.startswith(", ", k):
            parts.append(text[start:k])
            start = k + 2
    return parts + [text[start:]] if depth == 0 else None


def canonical_listing(observation: str) -> str:
    """Make ScienceWorld's object listings deterministic.

    ScienceWorld lists a room's or container's contents sorted by name, but
    objects with the same name (three "wood cup"s with different paints) come
    in a different order after every reset, so replaying a prefix would not
    reproduce the recorded observation. Only such ties are reordered (by their
    full text), in tab-indented listings and in inline ``... is: a, b, c.``
    lists; everything else is left byte for byte as ScienceWorld wrote it.
    """
    lines = observation.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("\t"):
            j = i
            while j < len(lines) and lines[j].startswith("\t"):
                j += 1
            out.extend("\t" + x for x in _tie_sorted([line[1:] for line in lines[i:j]]))
            i = j
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(_canonical_inline(line) for line in out)


def _canonical_inline(line: str) -> str:
    if ", " not in line:
        return line
    # "a table. On the table is: a jug (containing nothing), a wood cup (...)." -- each "is: ..." part.
    pieces = re.split(r"(\bis: |\bare: )", line)
    if len(pieces) < 3:
        return line
    rebuilt = [pieces[0]]
    for k in range(1, len(pieces), 2):
        body = pieces[k + 1]
        end = body.rfind(".")
        head, tail = (body[:end], body[end:]) if end > 0 else (body, "")
        parts = _split_top(head)
        if parts is not None and len(parts) > 1:
            head = ", ".join(_tie_sorted(parts))
        rebuilt += [pieces[k], head + tail]
    return "".join(rebuilt)
