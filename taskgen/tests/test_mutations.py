"""Each mutation operator on small snippets: the edit is minimal and parses as intended."""

from __future__ import annotations

import pytest

from ratchet_taskgen.mutations import MutationError, apply_site, find_sites

# (kind, function body line, variant, expected line after the edit)
CASES = [
    ("flip_cmp", "return a < b", 0, "return a > b"),
    ("flip_cmp", "return a >= b", 0, "return a <= b"),
    ("flip_cmp", "return a == b", 0, "return a != b"),
    ("flip_cmp", "return a is not None", 0, "return a is None"),
    ("flip_cmp", "return a  in  b", 0, "return a  not in  b"),
    ("flip_cmp", "return a not in b", 0, "return a in b"),
    ("off_by_one", "return a[1]", 0, "return a[0]"),
    ("off_by_one", "return a[1]", 1, "return a[2]"),
    ("off_by_one", "return a[:n]", 0, "return a[:n - 1]"),
    ("off_by_one", "return list(range(len(a)))", 1, "return list(range(len(a) + 1))"),
    ("off_by_one", "return a + 0", 1, "return a + 1"),
    ("swap_args", "return f(a, b)", 0, "return f(b, a)"),
    ("swap_args", "return f(a, g(b), c)", 1, "return f(a, c, g(b))"),
    ("drop_return", "return a * b", 0, "return None"),
    ("negate_cond", "return a if b else c", 0, "return a if not b else c"),
    ("negate_cond", "return a if not b else c", 0, "return a if b else c"),
    ("negate_cond", "return a if b or c else d", 0, "return a if not (b or c) else d"),
    ("swap_bool", "return a and b", 0, "return a or b"),
    ("swap_bool", "return a or b or c", 0, "return a and b and c"),
]

HEADER = "import os  # untouched\n\n\ndef f(a, b=1, c=2, d=3, n=4, g=len):\n    "
FOOTER = "\n\n\nX = [1, 2]  # module level: never mutated\n"


def _site(source: str, kind: str, variant: int):
    sites = [s for s in find_sites(source, "m.py", (kind,)) if s.variant == variant]
    assert sites, f"no {kind} site with variant {variant} in {source!r}"
    return sites[0]


@pytest.mark.parametrize("kind,line,variant,expected", CASES)
def test_operator_rewrites_only_the_node(kind: str, line: str, variant: int, expected: str) -> None:
    source = HEADER + line + FOOTER
    mutant = apply_site(source, _site(source, kind, variant))
    assert mutant.source == HEADER + expected + FOOTER
    assert mutant.site.function == "f"


def test_if_statement_negation() -> None:
    source = "def f(x):\n    if x > 1:\n        return 1\n    return 2\n"
    sites = find_sites(source, "m.py", ("negate_cond",))
    assert len(sites) == 1
    assert apply_site(source, sites[0]).source == source.replace("if x > 1", "if not x > 1")


def test_module_level_code_and_annotations_are_not_sites() -> None:
    source = "X = a[1] if b else c\n\ndef f(a: list[int], n: int = 3) -> dict[str, int]:\n    y: list[int] = []\n    return y\n"
    kinds = {(s.kind, s.line) for s in find_sites(source, "m.py")}
    assert kinds == {("drop_return", 5)}


def test_methods_and_nested_functions_get_qualified_names() -> None:
    source = "class A:\n    def m(self, x):\n        def inner(y):\n            return y < 1\n        return inner(x)\n"
    names = {(s.kind, s.function) for s in find_sites(source, "m.py")}
    assert ("flip_cmp", "A.m.inner") in names
    assert ("drop_return", "A.m") in names


def test_non_ascii_columns_are_handled() -> None:
    source = "def f(a):\n    s = 'é€'; return a < 2\n"
    site = _site(source, "flip_cmp", 0)
    assert apply_site(source, site).source == "def f(a):\n    s = 'é€'; return a > 2\n"


def test_ambiguous_token_edit_is_rejected() -> None:
    # a comment between the operands could hold the token: refuse instead of guessing
    source = "def f(a, b):\n    return (a <  # < here\n            b)\n"
    with pytest.raises(MutationError):
        apply_site(source, _site(source, "flip_cmp", 0))


def test_sites_are_deterministic() -> None:
    source = HEADER + "return f(a, b) if a < b and c else a[1:n]" + FOOTER
    assert find_sites(source, "m.py") == find_sites(source, "m.py")
    assert {s.kind for s in find_sites(source, "m.py")} == {
        "flip_cmp", "off_by_one", "swap_args", "drop_return", "negate_cond", "swap_bool"}


def test_node_ids_with_double_colon_parameters_are_not_selectable() -> None:
    from ratchet_taskgen.generate import selectable

    assert selectable("tests/test_u.py::test_rt[http://localhost/]")
    assert selectable("tests/test_u.py::TestA::test_b")
    assert not selectable("tests/test_u.py::test_rt[https://[::1]:80/]")
