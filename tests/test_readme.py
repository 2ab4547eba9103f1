"""The README's commands and code stay true."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_readme_api_example_runs():
    """The "use Uni-E on your own models" snippet runs as written."""
    section = README.split("## Use Uni-E decoding on your own models", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert "torch.Size([4, 16])" in r.stdout


def test_ci_runs_the_readme_test_command():
    """CI installs what the README's install command installs (the package with the same extras) and runs the
    README's test command; the extras exist in pyproject.toml."""
    import tomllib

    commands = re.findall(r"```bash\n(.*?)\n```", README, re.S)
    install, tests = commands[0], commands[1]
    assert install.rstrip().endswith("snakemake --cores 2")
    m = re.search(r"pip install -e (\S+)", install)
    assert m, install
    spec = m.group(1).strip("'\"")
    assert spec == "." or re.fullmatch(r"\.\[[\w,-]+\]", spec), spec
    extras = set(re.findall(r"[\w-]+", spec.removeprefix(".")))
    assert {"workflow", "dev", "notebook"} <= extras  # the workflow's exact versions, pytest, the notebook test
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras <= set(declared)
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(rf"pip install (-q )?-e ['\"]?{re.escape(spec)}['\"]?\n", ci), ci
    assert tests.strip() in ci
