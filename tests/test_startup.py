"""What a workflow's start-up does, counted, not timed (docs/time-budget.md has the seconds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHECK = """
import sys
from unie.config.validate import workflow_config
workflow_config([{profile!r}], {{}}, grid={grid!r}, schema={schema!r})
assert "jsonschema" in sys.modules
print("rfc3987_syntax" in sys.modules)
"""


def test_checking_a_profile_does_not_build_the_iri_grammars():
    """The schema check imports jsonschema without its optional IRI checker (rfc3987_syntax, seconds of grammar
    building on import, for a format the schema never names), and leaves that module importable afterwards."""
    code = CHECK.format(
        profile=str(REPO / "config" / "smoke.yaml"),
        grid=str(REPO / "config" / "experiments.yaml"),
        schema=str(REPO / "workflow" / "schemas" / "config.schema.yaml"),
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False"


def test_the_block_lasts_only_for_the_import():
    from unie.config import validate

    validate._jsonschema()
    assert sys.modules.get("rfc3987_syntax", "absent") is not None  # never left blocked
