"""The issue text comes from the failing tests and never shows the patch's lines."""

from __future__ import annotations

from ratchet_taskgen.statement import changed_lines, write_statement

PATCH = """diff --git a/p/m.py b/p/m.py
--- a/p/m.py
+++ b/p/m.py
@@ -1,2 +1,2 @@
 def f(items):
-    return items[1:]
+    return items[:-1]
"""


def test_changed_lines_ignore_headers() -> None:
    assert changed_lines(PATCH) == ["return items[1:]", "return items[:-1]"]


def test_message_lines_that_quote_the_patch_are_dropped() -> None:
    messages = {"tests/test_m.py::test_f": "AssertionError: assert [1] == [2]\n"
                                          ">       return items[1:]\n"
                                          "x = <object at 0x7f00deadbeef>"}
    text = write_statement("p", ["tests/test_m.py::test_f"], messages, PATCH)
    assert "assert [1] == [2]" in text
    assert "tests/test_m.py::test_f" in text
    for line in changed_lines(PATCH):
        assert line not in text
    assert "0x7f00deadbeef" not in text  # addresses would make the text irreproducible


def test_long_lists_are_bounded() -> None:
    tests = [f"tests/test_m.py::test_{i}" for i in range(12)]
    text = write_statement("p", tests, {}, PATCH)
    assert "and 7 more" in text and "test_11" not in text
