"""A JSON schema as a user gives it (a file's text, a request's `response_format` or a tool's
parameters): its depth bounded before anything walks it, its subschemas walked, and whether any
finite document satisfies it.

Depth: llguidance reads a schema's JSON with a nesting limit of about 128 levels, and every walk of
a parsed schema in Python (json.dumps, the checks below) recurses once per level, so a schema
nested 10,000 levels deep would end in a RecursionError. A schema deeper than `MAX_DEPTH` is
refused first, as text (`parse_schema`) and as a parsed value (`check_depth`), by the one reader of
bounded JSON that a request's body also goes through (edgespec.util.json_depth), with a tighter
bound.

Finite documents: llguidance compiles a schema all of whose documents are infinite (a `$ref` to
itself, an object that requires a property of its own type) without complaint; its matcher then
finds, at the first token or a few tokens later, that nothing may follow, and the reply would end
cut. `finite_problem` finds such a schema before anything loads, by the productivity fixpoint of a
grammar: a subschema has a finite document when its parts do (every `allOf`, one `anyOf` or
`oneOf`, its `$ref`, and for one of the types it allows, every required property and every item a
`minItems` asks for). It is computed for every subschema at once along an AND/OR graph, in time
linear in the schema's size however its `$ref`s loop. It errs one way only: a keyword it does not
model counts as satisfiable, so a schema it refuses has no finite document. Contradictions between
values (`minimum` above `maximum`, `allOf` of two types) are llguidance's to report; what leads
nowhere and is found by neither is an error while decoding (edgespec.decoding.constraint).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import unquote

from edgespec.util import json_depth
from edgespec.util.errors import UsageError

# Below llguidance's own limit (serde_json's 128 levels), so a schema it would refuse mid-parse is
# refused here first, in a sentence; real schemas nest a few levels, rarely twenty.
MAX_DEPTH = 100


class SchemaError(UsageError):
    """A schema refused before it is compiled: too deep, not JSON, or satisfied by no finite document."""


def parse_schema(text: str) -> dict | bool:
    """The schema in `text`: SchemaError when it nests deeper than MAX_DEPTH (`json_depth.loads`,
    from which no RecursionError escapes), is not JSON, or is no schema (an object or a boolean)."""
    try:
        schema = json_depth.loads(text, MAX_DEPTH)
    except json_depth.TooDeep:
        raise _too_deep() from None
    except ValueError as e:
        raise SchemaError(f"it is not JSON: {e}") from None
    if not isinstance(schema, dict | bool):
        raise SchemaError("it holds no JSON schema (an object, or true or false)")
    return schema


def check_depth(value: object) -> None:
    """SchemaError when `value` (parsed JSON) nests objects and arrays deeper than MAX_DEPTH."""
    if json_depth.nesting(value) > MAX_DEPTH:
        raise _too_deep()


def _too_deep() -> SchemaError:
    return SchemaError(f"it nests objects and arrays deeper than {MAX_DEPTH} levels")


# keywords whose value is a schema, a list of schemas, or a name -> schema map
_ONE = ("items", "additionalProperties", "additionalItems", "not", "if", "then", "else", "contains", "propertyNames")
_LIST = ("items", "prefixItems", "anyOf", "allOf", "oneOf")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def subschemas(node: dict | bool, where: str = "") -> Iterator[tuple[str, dict | bool]]:
    """`node` and every schema within it (objects and booleans), each with its JSON pointer. It
    recurses once per level: the schema's depth is checked first."""
    yield where, node
    if not isinstance(node, dict):
        return
    for key in dict.fromkeys(_ONE + _LIST + _MAP):
        value = node.get(key)
        if isinstance(value, dict) and key in _MAP:
            children = [(f"{where}/{key}/{escaped(name)}", child) for name, child in value.items()]
        elif isinstance(value, dict | bool) and key in _ONE:
            children = [(f"{where}/{key}", value)]
        elif isinstance(value, list) and key in _LIST:
            children = [(f"{where}/{key}/{i}", child) for i, child in enumerate(value)]
        else:
            continue
        for pointer, child in children:
            if isinstance(child, dict | bool):
                yield from subschemas(child, pointer)


def escaped(name: str) -> str:
    """`name` as one step of a JSON pointer."""
    return name.replace("~", "~0").replace("/", "~1")


def finite_problem(schema: dict | bool) -> str | None:
    """Why no finite document satisfies `schema` (naming the part that has none), or None when
    one may."""
    graph = _Graph(schema)
    if graph.finite[graph.root]:
        return None
    if schema is False:
        return "the schema is false"
    empty = [where for where, node in graph.nodes.items() if not graph.finite[node]]
    referred = [where for where in empty if where in graph.referred]
    return f"#{(referred or empty[::-1])[0]} allows none"


class _Graph:
    """The AND/OR graph of which subschema's finite documents need which others': a node is
    finite when all its children are (AND) or one of them is (OR); a leaf AND is always finite, a
    leaf OR never. `finite` is the fixpoint, propagated from the leaves (Dowling and Gallier)."""

    def __init__(self, schema: dict | bool):
        self.need_all: list[bool] = []
        self.children: list[list[int]] = []
        self.nodes = {where: self._new(True) for where, _ in subschemas(schema)}
        self.referred: set[str] = set()
        self.root = self.nodes[""]
        for where, node in subschemas(schema):
            self.children[self.nodes[where]] = self._parts(node, where)
        self.finite = self._fixpoint()

    def _new(self, need_all: bool, children: list[int] | None = None) -> int:
        self.need_all.append(need_all)
        self.children.append(children or [])
        return len(self.children) - 1

    def _any(self, children: list[int]) -> int:
        return self._new(False, children)

    def _parts(self, node: dict | bool, where: str) -> list[int]:
        """What a finite document of `node` needs, each part a node of the graph (all of them)."""
        if node is False:
            return [self._any([])]
        if not isinstance(node, dict):
            return []
        parts = []
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            target = unquote(ref[1:])
            if target in self.nodes:  # a ref elsewhere (another document, an anchor) is not followed
                self.referred.add(target)
                parts.append(self.nodes[target])
        for key, all_of in (("allOf", True), ("anyOf", False), ("oneOf", False)):
            branches = node.get(key)
            if isinstance(branches, list) and all(isinstance(b, dict | bool) for b in branches):
                ids = [self.nodes[f"{where}/{key}/{i}"] for i in range(len(branches))]
                parts.extend(ids if all_of else [self._any(ids)])
        kinds = node.get("type")
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if isinstance(kinds, list) and kinds and set(kinds) <= {"object", "array"}:
            shapes = {"object": self._object, "array": self._array}
            parts.append(self._any([self._new(True, shapes[kind](node, where)) for kind in set(kinds)]))
        return parts

    def _object(self, node: dict, where: str) -> list[int]:
        """An object needs each required property: its own schema, else `additionalProperties`
        (a `patternProperties` may take it: not followed)."""
        required = node.get("required")
        properties = node.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        parts = []
        for name in required if isinstance(required, list) else []:
            if not isinstance(name, str):
                continue
            if name in properties and isinstance(properties[name], dict | bool):
                parts.append(self.nodes[f"{where}/properties/{escaped(name)}"])
            elif "patternProperties" not in node and isinstance(node.get("additionalProperties"), dict | bool):
                parts.append(self.nodes[f"{where}/additionalProperties"])
        return parts

    def _array(self, node: dict, where: str) -> list[int]:
        """An array needs its first `minItems` items (each from `prefixItems`, or a list-valued
        `items`, then from the schema for the rest) and, unless `minContains` is 0, a `contains`."""
        least = node.get("minItems")
        least = least if isinstance(least, int) and not isinstance(least, bool) else 0
        items = node.get("items")
        prefix_key, rest_key = ("items", "additionalItems") if isinstance(items, list) else ("prefixItems", "items")
        prefix = node.get(prefix_key)
        prefix = prefix if isinstance(prefix, list) else []
        parts = []
        for i in range(min(least, len(prefix))):
            if isinstance(prefix[i], dict | bool):
                parts.append(self.nodes[f"{where}/{prefix_key}/{i}"])
        if least > len(prefix) and isinstance(node.get(rest_key), dict | bool):
            parts.append(self.nodes[f"{where}/{rest_key}"])
        if isinstance(node.get("contains"), dict | bool) and node.get("minContains", 1) != 0:
            parts.append(self.nodes[f"{where}/contains"])
        return parts

    def _fixpoint(self) -> list[bool]:
        waiting = [len(c) if all_ else 1 for c, all_ in zip(self.children, self.need_all, strict=True)]
        parents: list[list[int]] = [[] for _ in self.children]
        for node, children in enumerate(self.children):
            for child in children:
                parents[child].append(node)
        finite = [False] * len(self.children)
        ready = [node for node, n in enumerate(waiting) if n == 0]
        while ready:
            node = ready.pop()
            if finite[node]:
                continue
            finite[node] = True
            for parent in parents[node]:
                waiting[parent] -= 1
                if waiting[parent] == 0:
                    ready.append(parent)
        return finite
