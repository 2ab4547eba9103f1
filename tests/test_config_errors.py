"""Every configuration error is one line naming the key, its file and a did-you-mean: from `--config` and from an
overlay file alike, through `unie check-config` and through `snakemake` (unie.config.validate)."""

from pathlib import Path

import pytest
from snakemake_run import run_snakemake
import yaml

from unie.cli import main
from unie.core.options import ConfigError

pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")

from unie.config.validate import workflow_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# (what is wrong, the --config override, the same in an overlay, the one line expected after the source)
CASES = {
    "top-level typo": ({"sed": 1}, {"sed": 1}, "config key 'sed': unknown key; did you mean 'seed'?"),
    "nested typo": (
        {"sampling": {"stpes": [2]}},
        {"sampling": {"stpes": [2, 16]}},
        "config key 'sampling.stpes': unknown key; did you mean 'steps'?",
    ),
    "wrong type": ({"seed": "abc"}, {"seed": "abc"}, "config key 'seed': 'abc' is not of type 'integer'"),
}


def _overlay(tmp_path, change: dict) -> Path:
    cfg = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    for key, value in change.items():
        if isinstance(value, dict):
            cfg[key] = {**{k: v for k, v in cfg.get(key, {}).items() if k != "steps"}, **value}
        else:
            cfg[key] = value
    f = tmp_path / "my.yaml"
    f.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return f


@pytest.mark.parametrize("case", CASES)
def test_a_command_line_error_is_one_line_naming_key_source_and_fix(case):
    cli, _, expected = CASES[case]
    with pytest.raises(ConfigError) as e:
        workflow_config([REPO / "config" / "smoke.yaml"], cli)
    assert str(e.value) == f"--config: {expected}"


@pytest.mark.parametrize("case", CASES)
def test_an_overlay_error_is_one_line_in_check_config(case, tmp_path, capsys, monkeypatch):
    _, overlay, expected = CASES[case]
    f = _overlay(tmp_path, overlay)
    monkeypatch.chdir(tmp_path)  # the file is named as the user would: relative to where they are
    assert main(["check-config", str(f)]) == 1
    out = capsys.readouterr()
    hint = " (--verbose: the schema's full report)" if case == "wrong type" else ""
    assert out.err.splitlines() == [f"unie: config error: my.yaml: {expected}{hint}"] and out.out == ""
    assert main(["check-config", "--verbose", str(f)]) == 1
    verbose = capsys.readouterr().err
    assert verbose.rstrip().splitlines()[-1] == f"unie: config error: my.yaml: {expected}"
    if case == "wrong type":  # the schema's own report only on request
        assert "Failed validating" in verbose


def test_a_cross_check_error_names_its_file_and_the_closest_key(tmp_path):
    f = _overlay(tmp_path, {})
    cfg = yaml.safe_load(f.read_text())
    cfg["models"]["mdlm"]["train"]["stpes"] = 3
    f.write_text(yaml.safe_dump(cfg, sort_keys=False))
    with pytest.raises(ConfigError) as e:
        workflow_config([f])
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{f}: models.mdlm.train: unknown key(s) 'stpes' (did you mean 'steps'?)")


def test_a_grid_key_in_a_profile_still_says_so(tmp_path):
    f = _overlay(tmp_path, {"figures": {"fig3_tradeoff": {"K": 3}}})
    with pytest.raises(ConfigError, match="config key 'figures.fig3_tradeoff.K' is part of the experiment grid"):
        workflow_config([f])


def test_broken_yaml_is_one_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("seed: [1\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML \(line \d+, column \d+\)") as e:
        workflow_config([f])
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--config", "sed=1"], "--config: config key 'sed': unknown key; did you mean 'seed'?"),
        (["--configfile", "my.yaml"], "my.yaml: config key 'sampling.stpes': unknown key; did you mean 'steps'?"),
        (["--configfile", "bound.yaml"], "bound.yaml: config key 'models.mdlm.train.steps': -5 must be >= 1"),
    ],
)
def test_snakemake_prints_the_one_line_and_no_schema(tmp_path, args, expected):
    _overlay(tmp_path, CASES["nested typo"][1])
    smoke = (REPO / "config" / "smoke.yaml").read_text()
    (tmp_path / "bound.yaml").write_text(smoke.replace("train: {steps: 40,", "train: {steps: -5,", 1))
    r = run_snakemake(["-s", REPO / "Snakefile", "-d", tmp_path, "-n", *args], tmp_path)
    assert r.returncode == 1
    hint = " (--verbose: the schema's full report)" if args[0] == "--config" else ""
    assert r.stderr.strip().splitlines() == [f"unie: config error: {expected}{hint}"], r.stderr[-2000:]


@pytest.mark.parametrize("where", [("models", "mdlm", "train"), ("dllm", "models", "llada", "train")])
def test_a_bound_in_a_file_names_the_file_and_the_key(tmp_path, where):
    """``steps: -5`` in a profile: the training options' own bound (TrainConfig), named by its config key and file."""
    f = _overlay(tmp_path, {})
    cfg = yaml.safe_load(f.read_text())
    node = cfg
    for key in where:
        node = node[key]
    node["steps"] = -5
    f.write_text(yaml.safe_dump(cfg, sort_keys=False))
    with pytest.raises(ConfigError) as e:
        workflow_config([f])
    assert str(e.value) == f"{f}: config key '{'.'.join(where)}.steps': -5 must be >= 1"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("seed: [1\n", r"not valid YAML \(line \d+, column \d+\)"),
        ("- seed: 1\n", "expected a mapping at the top level"),
    ],
)
def test_a_file_that_is_not_a_mapping_is_one_line_in_check_config(tmp_path, capsys, monkeypatch, text, problem):
    """What Snakemake's own reading of ``--configfile`` reports without the file's name (it reads the files before
    the workflow starts: README), ``unie check-config FILE`` names."""
    import re

    (tmp_path / "bad.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert main(["check-config", "bad.yaml"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert re.fullmatch(rf"unie: config error: bad\.yaml: {problem}.*", line), line


def test_a_missing_config_file_is_one_line_in_check_config(tmp_path, capsys, monkeypatch):
    """``unie check-config --configfile config/nope.yaml``: the file and the profiles there are, in one line."""
    monkeypatch.chdir(REPO)
    assert main(["check-config", "--configfile", "config/nope.yaml"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "unie: config error: config/nope.yaml: no such config file (the profiles: config/config.yaml, "
        "config/gpu-smoke.yaml, config/paper.yaml, config/smoke.yaml)"
    )
    assert main(["check-config", str(tmp_path)]) == 1
    assert f"{tmp_path}: not a file (the profiles: " in capsys.readouterr().err


def test_a_missing_configfile_stops_snakemake_before_the_workflow(tmp_path):
    """What config/README.md says: Snakemake reads the ``--configfile`` files itself while it parses its command line
    (snakemake 9: ``ConfigSettings``), before the Snakefile, so a missing one is Snakemake's own traceback, which ends
    naming the file, and no line of the workflow's; ``unie check-config`` is the one-line check.  Should a Snakemake
    let the workflow see it first, this fails: the Snakefile then says it in one line and the note goes."""
    r = run_snakemake(["-s", REPO / "Snakefile", "-d", tmp_path, "-n", "--configfile", "config/nope.yaml"], tmp_path)
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 1 and "unie:" not in out, out[-2000:]
    assert out.splitlines()[-1] == "FileNotFoundError: [Errno 2] No such file or directory: 'config/nope.yaml'"
    assert "config/README.md" in (REPO / "docs" / "configuration.md").read_text()
    assert "no such config file" in (REPO / "config" / "README.md").read_text()
