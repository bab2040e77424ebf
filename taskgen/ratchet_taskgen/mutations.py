"""Procedural AST mutations (SWE-smith style), applied as minimal text edits.

Each operator finds *sites* in a module: one site is one possible bug inside one
function. Applying a site rewrites only the source segment of the mutated node
(located with lineno/col_offset), so the rest of the file stays byte-identical and
the gold diff is one or two lines. Every application is checked against the AST
we expect (the original tree with the node changed): a text edit that parses to
anything else is rejected instead of producing a surprising bug.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass
from typing import Callable, Iterator

KINDS = ("flip_cmp", "off_by_one", "swap_args", "drop_return", "negate_cond", "swap_bool")

_CMP_FLIP: dict[type, type] = {
    ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.In: ast.NotIn, ast.NotIn: ast.In,
}
_CMP_TOKEN: dict[type, str] = {
    ast.Lt: "<", ast.Gt: ">", ast.LtE: "<=", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
}
# Regexes that find the operator token inside the text between two operands.
_CMP_RE: dict[type, str] = {
    ast.Lt: r"<(?!=)", ast.Gt: r">(?!=)", ast.LtE: r"<=", ast.GtE: r">=", ast.Eq: r"==",
    ast.NotEq: r"!=", ast.Is: r"\bis\b", ast.IsNot: r"\bis\s+not\b", ast.In: r"\bin\b",
    ast.NotIn: r"\bnot\s+in\b",
}
# Operands that `not X` / `X + 1` can wrap without parentheses.
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


class MutationError(Exception):
    """A site could not be applied as a clean text edit."""


@dataclass(frozen=True)
class Site:
    """One possible bug: operator `kind` at node number `node_index` (ast.walk order)."""

    kind: str
    file: str
    function: str  # qualified name inside the file, e.g. "LRU.__getitem__"
    node_index: int
    line: int
    variant: int = 0  # operator-specific choice (e.g. +1 / -1, which arg pair)


@dataclass(frozen=True)
class Mutant:
    site: Site
    source: str  # the whole mutated file


def _pos_to_offset(lines: list[str], lineno: int, col: int) -> int:
    """Character offset of (1-based line, UTF-8 byte column) in the joined text."""
    before = sum(len(line) for line in lines[: lineno - 1])
    return before + len(lines[lineno - 1].encode("utf-8")[:col].decode("utf-8"))


class _Text:
    """Source text with node-position helpers; edits are collected then applied at once."""

    def __init__(self, source: str):
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.edits: list[tuple[int, int, str]] = []

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = _pos_to_offset(self.lines, node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = _pos_to_offset(self.lines, node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def seg(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def replace(self, start: int, end: int, text: str) -> None:
        self.edits.append((start, end, text))

    def replace_node(self, node: ast.AST, text: str) -> None:
        self.replace(*self.span(node), text)

    def result(self) -> str:
        out = self.source
        for start, end, text in sorted(self.edits, reverse=True):
            out = out[:start] + text + out[end:]
        return out


def _replace_token_between(text: _Text, left: ast.AST, right: ast.AST, pattern: str, new: str) -> None:
    gap_start = text.span(left)[1]
    gap_end = text.span(right)[0]
    gap = text.source[gap_start:gap_end]
    matches = list(re.finditer(pattern, gap))
    if len(matches) != 1 or "#" in gap:
        raise MutationError(f"operator token not unique in {gap!r}")
    m = matches[0]
    text.replace(gap_start + m.start(), gap_start + m.end(), new)


def _int_const(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _is_range_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"


# --- operators -------------------------------------------------------------------
# Each operator has `find(node, parent) -> list of variants` and
# `apply(node, variant, text, tree_node)`: edit the text, and mutate tree_node (the
# same node in a deep copy of the tree) into the AST we expect after the edit.


def _flip_cmp_find(node: ast.AST, parent: ast.AST | None) -> list[int]:
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP_FLIP:
        return [0]
    return []


def _flip_cmp_apply(node: ast.Compare, variant: int, text: _Text, twin: ast.Compare) -> None:
    op = type(node.ops[0])
    new = _CMP_FLIP[op]
    _replace_token_between(text, node.left, node.comparators[0], _CMP_RE[op], _CMP_TOKEN[new])
    twin.ops = [new()]


def _off_by_one_targets(node: ast.AST, parent: ast.AST | None) -> bool:
    """Integer constants in slices/indexes, range() bounds, comparisons and +/- arithmetic,
    and non-constant range() bounds / slice bounds."""
    if parent is None:
        return False
    if isinstance(parent, ast.Slice):
        return _int_const(node) or isinstance(node, (ast.Name, ast.Attribute, ast.Call))
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return _int_const(node)
    if _is_range_call(parent) and node in parent.args:  # type: ignore[attr-defined]
        return _int_const(node) or isinstance(node, (ast.Name, ast.Attribute, ast.Call))
    if _int_const(node) and isinstance(parent, ast.Compare):
        return True
    if _int_const(node) and isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Add, ast.Sub)):
        return True
    return False


def _off_by_one_find(node: ast.AST, parent: ast.AST | None) -> list[int]:
    if not _off_by_one_targets(node, parent):
        return []
    if _int_const(node) and node.value == 0:  # type: ignore[attr-defined]
        return [1]  # 0 -> -1 mostly means "last element": a different bug; only go up
    return [0, 1]  # 0: minus one, 1: plus one


def _off_by_one_apply(node: ast.AST, variant: int, text: _Text, twin: ast.AST) -> None:
    delta = 1 if variant == 1 else -1
    if _int_const(node):
        text.replace_node(node, str(node.value + delta))  # type: ignore[attr-defined]
        twin.value = node.value + delta  # type: ignore[attr-defined]
        return
    op = "+" if delta > 0 else "-"
    text.replace_node(node, f"{text.seg(node)} {op} 1")
    inner = copy.copy(twin)
    new = ast.BinOp(left=inner, op=ast.Add() if delta > 0 else ast.Sub(), right=ast.Constant(1))
    _become(twin, new)


def _swap_args_find(node: ast.AST, parent: ast.AST | None) -> list[int]:
    if not isinstance(node, ast.Call) or len(node.args) < 2:
        return []
    if any(isinstance(a, ast.Starred) for a in node.args):
        return []
    return [i for i in range(len(node.args) - 1) if ast.dump(node.args[i]) != ast.dump(node.args[i + 1])][:2]


def _swap_args_apply(node: ast.Call, variant: int, text: _Text, twin: ast.Call) -> None:
    a, b = node.args[variant], node.args[variant + 1]
    seg_a, seg_b = text.seg(a), text.seg(b)
    text.replace_node(a, seg_b)
    text.replace_node(b, seg_a)
    twin.args[variant], twin.args[variant + 1] = twin.args[variant + 1], twin.args[variant]


def _drop_return_find(node: ast.AST, parent: ast.AST | None) -> list[int]:
    if isinstance(node, ast.Return) and node.value is not None:
        if not (isinstance(node.value, ast.Constant) and node.value.value is None):
            return [0]
    return []


def _drop_return_apply(node: ast.Return, variant: int, text: _Text, twin: ast.Return) -> None:
    text.replace_node(node, "return None")
    twin.value = ast.Constant(None)


def _negate_cond_find(node: ast.AST, parent: ast.AST | None) -> list[int]:
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        return [0]
    return []


def _negate_cond_apply(node: ast.AST, variant: int, text: _Text, twin: ast.AST) -> None:
    test = node.test  # type: ignore[attr-defined]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        text.replace_node(test, text.seg(test.operand))
        twin.test = twin.test.operand  # type: ignore[attr-defined]
        return
    seg = text.seg(test)
    wrapped = seg if isinstance(test, _ATOMS + (ast.Compare,)) else f"({seg})"
    text.replace_node(test, f"not {wrapped}")
    twin.test = ast.UnaryOp(op=ast.Not(), operand=twin.test)  # type: ignore[attr-defined]


def _swap_bool_find(node: ast.AST, parent: ast.AST | None) -> list[int]:
    return [0] if isinstance(node, ast.BoolOp) else []


def _swap_bool_apply(node: ast.BoolOp, variant: int, text: _Text, twin: ast.BoolOp) -> None:
    old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
    for left, right in zip(node.values, node.values[1:]):
        _replace_token_between(text, left, right, rf"\b{old}\b", new)
    twin.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()


def _become(target: ast.AST, new: ast.AST) -> None:
    """Turn `target` into `new` in place, so parents in the copied tree see the change."""
    target.__class__ = new.__class__
    target.__dict__.clear()
    target.__dict__.update(new.__dict__)


_OPERATORS: dict[str, tuple[Callable[..., list[int]], Callable[..., None]]] = {
    "flip_cmp": (_flip_cmp_find, _flip_cmp_apply),
    "off_by_one": (_off_by_one_find, _off_by_one_apply),
    "swap_args": (_swap_args_find, _swap_args_apply),
    "drop_return": (_drop_return_find, _drop_return_apply),
    "negate_cond": (_negate_cond_find, _negate_cond_apply),
    "swap_bool": (_swap_bool_find, _swap_bool_apply),
}


# --- site discovery -------------------------------------------------------------


def _function_owners(tree: ast.Module) -> dict[int, tuple[str, ast.AST]]:
    """Map id(node) -> (qualified function name, function node) for nodes that belong
    directly to a function body (nested defs own their own nodes)."""
    owners: dict[int, tuple[str, ast.AST]] = {}

    def visit(node: ast.AST, scope: list[str], func: tuple[str, ast.AST] | None) -> None:
        if func is not None:
            owners[id(node)] = func
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # decorators, defaults and annotations run in the enclosing scope
            for sub in node.decorator_list + [node.args] + ([node.returns] if node.returns else []):
                visit(sub, scope, func)
            mine = (".".join(scope + [node.name]), node)
            for stmt in node.body:
                visit(stmt, scope + [node.name], mine)
        elif isinstance(node, ast.ClassDef):
            for sub in node.decorator_list + node.bases + node.keywords:
                visit(sub, scope, func)
            for stmt in node.body:
                visit(stmt, scope + [node.name], None)
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, scope, func)

    for stmt in tree.body:
        visit(stmt, [], None)
    return owners


def _walk_with_parents(tree: ast.AST) -> Iterator[tuple[int, ast.AST, ast.AST | None]]:
    parents: dict[int, ast.AST] = {}
    for index, node in enumerate(ast.walk(tree)):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
        yield index, node, parents.get(id(node))


def function_first_lines(tree: ast.Module) -> dict[str, set[int]]:
    """Qualified name -> line numbers a code object of that function may report as
    co_firstlineno (the def line, or the first decorator's line)."""
    out: dict[str, set[int]] = {}
    for name, func in {n: f for _, (n, f) in _function_owners(tree).items()}.items():
        lines = {func.lineno}  # type: ignore[attr-defined]
        lines |= {d.lineno for d in func.decorator_list}  # type: ignore[attr-defined]
        out[name] = lines
    return out


def _annotation_nodes(tree: ast.Module) -> set[int]:
    """ids of nodes inside type annotations: changing them is not a behaviour bug."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {id(n) for root in roots for n in ast.walk(root)}


def find_sites(source: str, file: str, kinds: tuple[str, ...] = KINDS) -> list[Site]:
    """All sites in the functions of one module, in a deterministic order."""
    tree = ast.parse(source)
    owners = _function_owners(tree)
    skip = _annotation_nodes(tree)
    sites: list[Site] = []
    for index, node, parent in _walk_with_parents(tree):
        owner = owners.get(id(node))
        if owner is None or not hasattr(node, "lineno") or id(node) in skip:
            continue
        for kind in kinds:
            find, _ = _OPERATORS[kind]
            for variant in find(node, parent):
                sites.append(Site(kind, file, owner[0], index, node.lineno, variant))  # type: ignore[attr-defined]
    return sites


def apply_site(source: str, site: Site) -> Mutant:
    """Apply one site; raises MutationError if the edit is not the intended AST change."""
    tree = ast.parse(source)
    twin_tree = copy.deepcopy(tree)
    node = next(n for i, n in enumerate(ast.walk(tree)) if i == site.node_index)
    twin = next(n for i, n in enumerate(ast.walk(twin_tree)) if i == site.node_index)
    text = _Text(source)
    _, apply = _OPERATORS[site.kind]
    apply(node, site.variant, text, twin)
    new_source = text.result()
    try:
        got = ast.parse(new_source)
    except SyntaxError as exc:
        raise MutationError(f"syntax error after edit: {exc}") from exc
    if ast.dump(got) != ast.dump(twin_tree):
        raise MutationError("edit does not parse to the intended AST")
    if new_source == source:
        raise MutationError("edit changed nothing")
    return Mutant(site, new_source)
