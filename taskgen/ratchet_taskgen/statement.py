"""Issue text written from the failing tests only, never from the patch."""

from __future__ import annotations

import re

MAX_TESTS_LISTED = 5
MAX_MESSAGE_LINES = 8
MAX_MESSAGE_CHARS = 600


def changed_lines(patch: str) -> list[str]:
    """The stripped text of every line the patch removes or adds."""
    out = []
    for line in patch.splitlines():
        if line.startswith(("+++", "---")):
            continue
        if line.startswith(("+", "-")) and line[1:].strip():
            out.append(line[1:].strip())
    return out


def _leaks(line: str, secrets: list[str]) -> bool:
    flat = re.sub(r"\s+", "", line)
    return any(len(s) >= 4 and (s in line or re.sub(r"\s+", "", s) in flat) for s in secrets)


def _excerpt(message: str, secrets: list[str]) -> str:
    # object reprs carry memory addresses: mask them so the text is reproducible
    message = re.sub(r"0x[0-9a-fA-F]{6,}", "0x...", message)
    lines = [ln for ln in message.strip().splitlines() if ln.strip() and not _leaks(ln, secrets)]
    text = "\n".join(lines[:MAX_MESSAGE_LINES])
    return text[:MAX_MESSAGE_CHARS]


def write_statement(package: str, fail_to_pass: list[str], messages: dict[str, str], patch: str) -> str:
    """A bug report a user could have filed: which tests break and how.

    `messages` maps a failing node id to pytest's crash message. Any message line
    that contains a changed line of the patch is dropped, so the report cannot
    point at the fix.
    """
    secrets = changed_lines(patch)
    files = sorted({n.split("::", 1)[0] for n in fail_to_pass})
    n = len(fail_to_pass)
    parts = [
        f"{package}: {n} test{'s' if n != 1 else ''} in {', '.join(files)} "
        f"{'fail' if n != 1 else 'fails'} after a recent change",
        "",
        f"Since the last change to {package}, the test suite reports failures that it did not "
        "report before. The tests themselves did not change and are believed to be correct, "
        "so the bug is in the library code.",
        "",
        "Failing tests:",
    ]
    parts += [f"- {t}" for t in fail_to_pass[:MAX_TESTS_LISTED]]
    if n > MAX_TESTS_LISTED:
        parts.append(f"- ... and {n - MAX_TESTS_LISTED} more")
    for test in fail_to_pass[:2]:
        excerpt = _excerpt(messages.get(test, ""), secrets)
        if excerpt:
            parts += ["", f"Output of `{test}`:", "```", excerpt, "```"]
    parts += ["", "Expected: these tests pass again, without breaking the rest of the suite."]
    return "\n".join(parts) + "\n"
