"""The trainer's checkpoint keys match the TypeScript layout (src/artifacts/keys.ts), case by case.

The cases are the TypeScript side's own (test/fixtures/artifacts/keys.json, checked against
src/artifacts/keys.ts by test/unit/artifacts/keys.test.ts), so a change on either side fails here.
"""

import json
from pathlib import Path

from ratchet_trainer.core.checkpoint import checkpoint_attempt_key, checkpoint_dir, checkpoint_key

FIXTURE = Path(__file__).resolve().parents[2] / "test" / "fixtures" / "artifacts" / "keys.json"


def test_checkpoint_keys_match_typescript() -> None:
    cases = [c for c in json.loads(FIXTURE.read_text())["cases"] if c["fn"] == "checkpoint"]
    assert len(cases) >= 3
    for c in cases:
        run_id, step, *rest = c["args"]
        assert checkpoint_key(run_id, step, *rest) == c["key"], c
        assert checkpoint_dir(Path("/art"), run_id, step, *rest) == Path("/art") / c["key"], c


def test_checkpoint_attempt_keys_match_typescript() -> None:
    cases = [c for c in json.loads(FIXTURE.read_text())["cases"] if c["fn"] == "checkpointAttempt"]
    assert len(cases) >= 2
    for c in cases:
        run_id, step, sha, attempt = c["args"]
        assert checkpoint_attempt_key(run_id, step, sha, attempt) == c["key"], c
