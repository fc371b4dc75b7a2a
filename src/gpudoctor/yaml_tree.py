"""Turning a composed YAML document (PyYAML's node graph) into values in one pass.

PyYAML's own constructor is written in Python and does much that gpudoctor's files never need:
a generator per mapping for recursive documents, a table of constructed objects, merge keys,
timestamps. For 10 000 rules it is two thirds of a cold load. :class:`Builder` makes the same values
(gpudoctor.inputs' LineDict and LineList with their lines, strings cleaned, the same integers,
floats, booleans and nulls) straight from the nodes, and checks on the way what
inputs._expansion_problem checks after PyYAML: the document's size and depth. It takes only the
plain case: a tree (no alias), scalar keys, no two keys equal, the tags str, int, float, bool,
null, map and seq, nesting within the limit, size within the limit. Anything else (an alias, a
merge key, a timestamp, a custom tag, a bad integer, a duplicate key, a scalar its tag refuses)
returns :data:`SLOW`, and the caller builds the document with PyYAML's constructor and checks it
as before, so every refusal and its message stay those of that one path.

Imports nothing at import time; PyYAML's node classes are passed in by the caller.
"""

from __future__ import annotations

from typing import Any, Callable

# Builder.document's answer when the document needs PyYAML's constructor.
SLOW: Any = object()

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_TAG + t for t in ("str", "int", "float", "bool", "null"))
_MAP, _SEQ = _TAG + "map", _TAG + "seq"


class _Slow(Exception):
    """The document leaves the plain case (see the module docstring)."""


class Builder:
    """One document's build: ``Builder(...).document(root)``.

    ``loader``: the PyYAML loader that composed it (its construct_yaml_int, _float and _bool make
    those scalars, as the slow path would). ``kinds``: yaml's ScalarNode, SequenceNode and
    MappingNode. ``make``: the mapping and list classes (a ``line`` each; the list also
    ``item_lines``). ``clean``: applied to every string. ``limit`` and ``max_depth``: those of
    inputs._expansion_problem, counted the same way (a string: 1 + len // 64 values). A class, not
    nested functions: those would make a reference cycle per document, for the collector to find."""

    def __init__(
        self,
        loader: Any,
        kinds: tuple[type, type, type],
        make: tuple[type, type],
        clean: Callable[[str], str],
        limit: int,
        max_depth: int,
    ) -> None:
        self.loader = loader
        self.scalar_kind: Any = kinds[0]
        self.sequence_kind: Any = kinds[1]
        self.mapping_kind: Any = kinds[2]
        self.line_dict, self.line_list = make
        self.clean = clean
        self.limit = limit
        self.max_depth = max_depth
        self.seen: set[int] = set()  # every node met: one met twice is an alias (or a cycle)

    def document(self, root: Any) -> Any:
        """The value of the document whose root node is ``root``, or SLOW."""
        try:
            return self.value(root, 0)[0]
        except Exception:  # noqa: BLE001 - _Slow, or a scalar its tag refuses: the slow path says
            # what is wrong, in its own order (it checks a mapping's keys before its values)
            return SLOW

    def scalar(self, node: Any) -> tuple[Any, int]:
        if type(node) is not self.scalar_kind:
            raise _Slow
        tag = node.tag
        if tag == _STR:
            text = self.clean(node.value)
            return text, 1 + len(text) // 64
        if tag == _INT:
            return self.loader.construct_yaml_int(node), 1
        if tag == _BOOL:
            return self.loader.construct_yaml_bool(node), 1
        if tag == _NULL:
            return None, 1
        if tag == _FLOAT:
            return self.loader.construct_yaml_float(node), 1
        raise _Slow

    def value(self, node: Any, depth: int) -> tuple[Any, int]:
        """(value, size) of a node at ``depth`` (the root's is 0)."""
        seen = self.seen
        if id(node) in seen:
            raise _Slow
        seen.add(id(node))
        kind = type(node)
        if kind is self.scalar_kind:
            return self.scalar(node)
        if depth > self.max_depth:
            raise _Slow
        below = depth + 1
        total = 1
        if kind is self.mapping_kind and node.tag == _MAP:
            mapping = self.line_dict()
            for key_node, value_node in node.value:
                if id(key_node) in seen:
                    raise _Slow
                seen.add(id(key_node))
                name, size = self.scalar(key_node)
                if name in mapping:
                    raise _Slow
                item, item_size = self.value(value_node, below)
                mapping[name] = item
                total += size + item_size
            mapping.line = node.start_mark.line + 1
            result: Any = mapping
        elif kind is self.sequence_kind and node.tag == _SEQ:
            items = self.line_list()
            for item_node in node.value:
                item, item_size = self.value(item_node, below)
                items.append(item)
                total += item_size
            items.line = node.start_mark.line + 1
            items.item_lines = tuple(item.start_mark.line + 1 for item in node.value)
            result = items
        else:
            raise _Slow
        if total > self.limit:
            raise _Slow
        return result, total


__all__ = ["SLOW", "Builder"]
