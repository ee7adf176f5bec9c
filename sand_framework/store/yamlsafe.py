"""Bounded YAML: PyYAML's safe loader plus limits on size, nesting and alias expansion.

``yaml.safe_load`` never constructs Python objects, but it happily loads a few
hundred bytes of nested aliases (a "billion laughs" document) describing a tree
of billions of values. PyYAML shares the aliased objects, so loading is cheap;
everything that walks or copies the tree afterwards (merging, validation,
writing ``recipe.yaml``) expands it and runs for minutes with gigabytes of
memory. So the composed node graph is measured *before* it is constructed, and
a document whose expanded tree exceeds the limits is refused, as are aliases
that refer to themselves and files that are not text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1 << 20
"""A recipe is a page of settings; a megabyte is far beyond any real one."""
MAX_VALUES = 100_000
"""Values (mappings, lists, scalars, keys) in the document with every alias expanded."""
MAX_DEPTH = 100
"""Nesting depth of mappings and lists."""


class YAMLLimitError(ValueError):
    """The document is not YAML text, or is valid YAML beyond the limits above."""


def read_text(path: str | Path) -> str:
    """A YAML file's text; raise :class:`YAMLLimitError` for binary, non-UTF-8 or oversized files."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)  # never more: the file may be huge (or endless, like a device)
    if len(data) > MAX_BYTES:
        raise YAMLLimitError(f"file is larger than {MAX_BYTES:,} bytes, the most a recipe may be")
    if b"\x00" in data:
        raise YAMLLimitError("not a text file (it contains NUL bytes); a recipe is a YAML text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YAMLLimitError(f"not UTF-8 text ({exc}); save the recipe as UTF-8") from None


def _measure(root: yaml.Node) -> None:
    """Refuse a node graph whose alias-expanded tree is too big, too deep or cyclic (iteratively: no recursion)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            on_path.discard(key)
            if size[key] > MAX_VALUES:
                raise YAMLLimitError(f"its aliases expand to more than {MAX_VALUES:,} values (a 'billion laughs' "
                                     "document?); write the values out instead of nesting aliases")
            if depth[key] > MAX_DEPTH:
                raise YAMLLimitError(f"it is nested more than {MAX_DEPTH} levels deep")
            continue
        if key in size:
            continue
        if key in on_path:
            raise YAMLLimitError("an alias refers to the value that contains it (an endless, recursive value)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


class _Loader(yaml.SafeLoader):
    """The safe loader with YAML 1.2's floats: ``2e-4`` and ``1e5`` are numbers. PyYAML follows YAML 1.1, whose
    floats need a dot, so a learning rate written ``2e-4`` (as the docs and most papers write it) was the string
    ``'2e-4'`` and refused as "expected a number". The pattern is the one OmegaConf adds for the same reason.

    A key given twice in one mapping is refused: PyYAML keeps the last value without a word, so a recipe with
    ``run:`` twice lost the first block silently. Keys a ``<<:`` merge brings in may be overridden, as YAML
    means them to be."""

    def construct_mapping(self, node, deep=False):  # noqa: D401 - PyYAML's hook
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                if key in first:
                    raise yaml.constructor.ConstructorError(
                        f"while reading the mapping at line {node.start_mark.line + 1}", None,
                        f"the key {key!r} is given twice (first on line {first[key].start_mark.line + 1}, again "
                        f"on line {key_node.start_mark.line + 1}); a recipe names each key once: keep one of them",
                        None)
                first[key] = key_node
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                   |\.[0-9_]+(?:[eE][-+][0-9]+)?
                   |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def load(text: str) -> Any:
    """Parse one YAML document with the safe loader, within the limits above.

    Raises ``yaml.YAMLError`` for invalid YAML and :class:`YAMLLimitError` for
    valid YAML that is too large or too deep.
    """
    if len(text) > MAX_BYTES:
        raise YAMLLimitError(f"text is {len(text):,} characters; at most {MAX_BYTES:,} are read")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure(node)
        return loader.construct_document(node)
    except RecursionError:
        raise YAMLLimitError(f"it is nested too deeply (more than {MAX_DEPTH} levels are refused)") from None
    finally:
        loader.dispose()


def non_string_keys(value: Any, where: str = "") -> list[str]:
    """Problems for every mapping key that is not a string (``1:``, ``null:``, ``true:``), with its location."""
    problems: list[str] = []
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if not isinstance(k, str):
                    shown = "null" if k is None else str(k).lower() if isinstance(k, bool) else repr(k)
                    kind = ("null" if k is None else "a boolean" if isinstance(k, bool) else
                            "a number" if isinstance(k, (int, float)) else f"a {type(k).__name__}")
                    problems.append(f"{at + '.' if at else ''}{shown}: keys must be names (strings), got "
                                    f"{kind}; quote it (\"{shown}\":) if it is meant as a name")
                else:
                    stack.append((v, f"{at}.{k}" if at else k))
        elif isinstance(node, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(node))
    return sorted(problems)
