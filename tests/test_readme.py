"""The README's commands and code stay true."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_readme_notebook_command_starts_jupyterlab(tmp_path):
    """After the README's install (the `notebook` extra), its notebook command starts JupyterLab on the notebook."""
    import os
    import shutil
    import urllib.error
    import urllib.request

    pytest.importorskip("jupyterlab", reason="the notebook extra: pip install -e '.[notebook]'")
    m = re.search(r"`(jupyter lab (notebooks/\S*))`", README)
    assert m, "the README names no `jupyter lab notebooks/...` command"
    assert (REPO / m.group(2)).exists()
    jupyter = shutil.which("jupyter", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    assert jupyter, "the notebook extra installs the `jupyter` command"
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "run"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"),
    }  # nothing written to the user's home
    extra = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    cmd = [jupyter, *m.group(1).split()[1:], "--no-browser", "--ServerApp.port=0", *extra]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url, seen = None, []
        for line in proc.stderr:  # JupyterLab logs its address once it serves
            seen.append(line)
            hit = re.search(r"(http://(?:localhost|127\.0\.0\.1):\d+/lab\?token=\w+)", line)
            if hit:
                url = hit.group(1)
                break
        assert url, "".join(seen[-20:])
        url = url.replace("//localhost:", "//127.0.0.1:")
        import time

        for _ in range(40):  # the address is logged just before the server accepts connections
            try:
                with urllib.request.urlopen(url, timeout=30) as r:
                    assert r.status == 200 and "JupyterLab" in r.read().decode()
                break
            except urllib.error.URLError:
                time.sleep(0.5)
        else:
            raise AssertionError(f"JupyterLab logged {url} but does not answer")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_every_number_the_readme_quotes_is_on_a_generated_page():
    """README's "What the numbers say" quotes changes as ``+1.8 ± 0.6``: each is a cell of a page a rule generated
    (docs/replicates.md, the aggregate of the three trainings, or docs/results.md, one run), so the summary cannot
    drift from the results (the minus sign read as a hyphen)."""
    section = README.split("## What the numbers say", 1)[1].split("\n## ", 1)[0]
    quoted = re.findall(r"[+−-]?\d+(?:\.\d+)? ± \d+(?:\.\d+)?", section)
    pages = "".join((REPO / "docs" / name).read_text() for name in ("replicates.md", "results.md")).replace("−", "-")
    assert quoted, "the summary quotes no change with its s.e."
    missing = [q for q in quoted if q.replace("−", "-") not in pages]
    assert not missing, f"quoted in README but on no generated page: {missing}"
