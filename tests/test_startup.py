"""What a workflow's start-up does, counted, not timed (docs/time-budget.md has the seconds): the modules it imports
(no torch), the registries filled at their first read, the configuration remembered by the bytes it depends on, and
the check of the run's files, which on an unchanged run reads no token file and still finds a flipped byte.  Inside
Snakemake's process the work is counted by tests/startup_probe.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "config" / "smoke.yaml"
PROBE = Path(__file__).with_name("startup_probe.py")


def _fresh(code: str) -> subprocess.CompletedProcess:
    """``code`` run in a fresh interpreter in the repository."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)


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
    r = _fresh(code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False"


def test_the_block_lasts_only_for_the_import():
    from unie.config import validate

    validate._jsonschema()
    assert sys.modules.get("rfc3987_syntax", "absent") is not None  # never left blocked


def test_whoever_imports_jsonschema_first_skips_the_iri_grammars():
    """Snakemake imports nbformat (and so jsonschema) for every ``script:`` job it starts; once the Snakefile has called
    ``skip_iri_grammars`` that import builds no IRI grammars either, and ``rfc3987_syntax`` stays importable."""
    code = (
        "import sys, importlib.util\n"
        "from unie.config.validate import skip_iri_grammars\n"
        "skip_iri_grammars()\n"
        "import jsonschema\n"
        "if importlib.util.find_spec('nbformat'):\n"
        "    import nbformat\n"
        "print('rfc3987_syntax' in sys.modules)\n"
        "if importlib.util.find_spec('rfc3987_syntax'):\n"
        "    import rfc3987_syntax\n"
        "    assert rfc3987_syntax is not None\n"
    )
    r = _fresh(code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False"
    assert "skip_iri_grammars()" in REPO.joinpath("Snakefile").read_text()


def test_work_around_an_import_runs_once_for_whoever_imports_first():
    """``unie.core.imports.around_import``: the module is loaded through the function given last, the hook then
    leaves ``sys.meta_path``; nothing is hooked for a module imported already.  ``torch_threads`` rides on it: the
    threads asked for last are torch's once it is imported."""
    code = (
        "import sys\n"
        "from unie.core.imports import around_import, _AroundImport\n"
        "seen = []\n"
        "def first(exec_module, module):\n"
        "    seen.append('first')\n"
        "    exec_module(module)\n"
        "def second(exec_module, module):\n"
        "    exec_module(module)\n"
        "    seen.append(module.__name__)\n"
        "assert 'colorsys' not in sys.modules\n"
        "assert around_import('colorsys', first) and around_import('colorsys', second)\n"
        "assert sum(isinstance(f, _AroundImport) for f in sys.meta_path) == 1\n"
        "import colorsys\n"
        "assert seen == ['colorsys'] and colorsys.rgb_to_hsv(1, 0, 0) == (0.0, 1.0, 1)\n"
        "assert not any(isinstance(f, _AroundImport) for f in sys.meta_path)\n"
        "assert not around_import('colorsys', first) and seen == ['colorsys']\n"
        "from unie.pipeline.rule import torch_threads\n"
        "torch_threads(1)\n"
        "torch_threads(3)\n"
        "assert 'torch' not in sys.modules\n"
        "import torch\n"
        "assert torch.get_num_threads() == 3, torch.get_num_threads()\n"
    )
    r = _fresh(code)
    assert r.returncode == 0, r.stderr[-2000:]


# ---------------------------------------------------------------------- the package and the registries without torch
def _torch_free(code: str) -> subprocess.CompletedProcess:
    """``code`` run in a fresh interpreter that then fails if torch was imported."""
    check = "\nimport sys\nassert 'torch' not in sys.modules, 'torch was imported'\n"
    return _fresh(code + check)


def _workflow_modules() -> list[str]:
    """Every ``unie`` module the Snakefile and the rule files import, and those the table and figure jobs import (the
    whole of ``unie.report``, which they call)."""
    import re

    texts = [REPO.joinpath("Snakefile").read_text()]
    texts += [f.read_text() for f in sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    found = {m for t in texts for m in re.findall(r"^\s*from (unie[\w.]*) import", t, re.M)}
    report = {f"unie.report.{f.stem}" for f in (REPO / "unie" / "report").glob("*.py") if f.stem != "__init__"}
    return sorted(
        found | report | {"unie.pipeline.rule", "unie.pipeline.tables_figures", "unie.pipeline.paper_vs_ours"}
    )


def test_the_package_and_the_workflows_modules_import_no_torch():
    """``import unie``, the modules the Snakefile and its rule files import, and those of the table and figure jobs
    load no torch: the registries fill when first read (``unie.REGISTERING``), ``unie.load`` and
    ``unie.CheckpointError`` are imported when asked for."""
    modules = _workflow_modules()
    assert "unie.config.cache" in modules and "unie.pipeline.run" in modules and len(modules) > 10
    code = (
        "import unie\n" + "".join(f"import {m}\n" for m in modules) + "unie.CheckpointError, unie.load, unie.config\n"
    )
    r = _torch_free(code)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_tokenize_job_imports_no_torch(tok, tmp_path):
    """Rule tokenize (a job per split: four in a smoke run) writes a token file without torch (1.4 s of each job's
    start-up): ``unie.data.tokens`` imports torch only where it makes a tensor.  (Rule tokenizer saves through
    transformers, which imports it.)"""
    from unie.data.toy_vocab import word_list

    tok.save(tmp_path / "resources" / "tokenizer")  # as rule tokenizer writes it
    r = _torch_free(
        "from pathlib import Path\n"
        "from unie.data.corpus import write_text_parquet\n"
        "from unie.data.tokens import read_token_meta\n"
        "from unie.pipeline.data_files import tokenize_split\n"
        f"d = Path({str(tmp_path)!r})\n"
        f"write_text_parquet([{' '.join(word_list()[:12])!r}] * 20, d / 'raw.parquet')\n"
        "out = d / 'resources' / 'tokenized' / 'owt' / 'valid.parquet'\n"
        "n = tokenize_split(d / 'raw.parquet', d / 'resources' / 'tokenizer', out, 8, domain='owt', split='valid',"
        " insert_eos=True, chunk_specials=True, source={'kind': 'test'}, log=lambda _m: None)\n"
        "assert n > 0 and read_token_meta(out)['rows'] == n, n\n"
    )
    assert r.returncode == 0, r.stderr[-2000:]


def test_every_read_of_a_registry_fills_it_first(monkeypatch):
    """Whatever reads a registry (a lookup, ``in``, iteration, ``dict(...)``, ``{**...}``, ``json.dumps``, a copy)
    finds it filled: a registry is read only through its own methods."""
    import copy
    import json

    from unie.core import registry

    reg = registry.Registry("thing")
    reads = {
        "[]": lambda r: r["a"],
        "in": lambda r: "a" in r,
        "get": lambda r: r.get("a"),
        "len": len,
        "bool": bool,
        "list": list,
        "sorted": sorted,
        "dict()": dict,
        "{**}": lambda r: {**r},
        "update": lambda r: {}.update(r),
        "|": lambda r: r | {},
        "r|": lambda r: {} | r,
        "keys": lambda r: list(r.keys()),
        "values": lambda r: list(r.values()),
        "items": lambda r: list(r.items()),
        "copy": lambda r: r.copy(),
        "copy.copy": copy.copy,
        "json": lambda r: json.dumps(dict(r)),  # json.dumps(r) of an unread registry: "{}" (Registry doc)
        "==": lambda r: r == {"a": 1},
        "repr": repr,
        "reversed": lambda r: list(reversed(r)),
        "unknown_message": lambda r: r.unknown_message("b"),
    }
    for name, read in reads.items():
        dict.clear(reg)
        monkeypatch.setattr(registry, "_FILL", {"fn": lambda: reg.add("a", 1), "state": "empty"})
        read(reg)
        assert dict.__contains__(reg, "a"), f"{name} read the registry without filling it"
        assert registry._FILL["state"] == "full"


def test_registering_names_every_module_that_registers():
    """``unie.REGISTERING`` is every module that calls a registry's decorator (what the first read imports)."""
    import re

    import unie

    pkg = REPO / "unie"
    pattern = re.compile(
        r"(BACKBONES|SCHEDULES|ENERGIES|SAMPLERS|METHODS|EVALUATORS|DLLM_SAMPLERS)\.(register|add)\("
        r"|@register_(sampler|dllm_sampler|energy)\("
    )
    registering = {
        ".".join(f.relative_to(pkg).with_suffix("").parts)
        for f in pkg.rglob("*.py")
        if f != pkg / "core" / "registry.py" and pattern.search(f.read_text())
    }
    assert registering == set(unie.REGISTERING)


DUMP = """
import json, sys
from unie.core import registry
names = ("BACKBONES", "SCHEDULES", "ENERGIES", "SAMPLERS", "METHODS", "EVALUATORS", "DLLM_SAMPLERS")
print(json.dumps({n: sorted(dict.keys(getattr(registry, n))) for n in names}))
"""


def test_the_first_read_fills_every_registry_as_importing_every_module_does():
    """A process that reads one registry finds in all of them what a process that imported every module below the
    configuration layer finds (without reading a registry)."""
    lazy = subprocess.run(
        [sys.executable, "-c", "from unie.core.registry import SAMPLERS\nlen(SAMPLERS)\n" + DUMP],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    eager_imports = """
import importlib, pkgutil, unie
for layer in ("core", "data", "models", "methods", "energy", "dllm", "eval"):
    pkg = importlib.import_module(f"unie.{layer}")
    for m in pkgutil.iter_modules(pkg.__path__, f"unie.{layer}."):
        try:
            importlib.import_module(m.name)
        except ImportError:  # an optional dependency
            pass
"""
    eager = _fresh(eager_imports + DUMP)
    assert lazy.returncode == 0 and eager.returncode == 0, lazy.stderr[-2000:] + eager.stderr[-2000:]
    filled = json.loads(lazy.stdout)
    assert filled == json.loads(eager.stdout)
    assert set(filled["SAMPLERS"]) >= {"ancestral", "energy", "ar"} and set(filled["EVALUATORS"]) == {
        "exact",
        "model",
        "hf",
    }


# ---------------------------------------------------------------------- the configuration, remembered
def _probe(wd: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Snakemake on the repository's Snakefile in ``wd``, its start-up's work counted (tests/startup_probe.py)."""
    out = wd.parent / f"{wd.name}.probe.json"
    env = {**os.environ, "UNIE_PROBE_OUT": str(out), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, str(PROBE), "-s", str(REPO / "Snakefile"), "-d", str(wd), *args]
    r = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, env=env)
    return r, json.loads(out.read_text())


def test_a_rerun_of_a_checked_configuration_resolves_checks_and_imports_nothing(tmp_path):
    """The first dry run resolves and checks the smoke profile (the registries filled, torch imported); the next one
    finds it in .snakemake/unie/config/ and plans the same jobs without resolving, validating, cross-checking or
    reading a registry, and imports no torch."""
    pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
    wd = tmp_path / "run"
    wd.mkdir()
    args = ("-n", "--cores", "2", "--configfile", str(SMOKE))
    first, counts = _probe(wd, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert counts["workflow_config"] == counts["run_directory"] == counts["rule_facts"] == 1, counts
    assert counts["cache"] == {"hits": 0, "misses": 1} and counts["registries"] == "full"
    again, counts = _probe(wd, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert counts["cache"] == {"hits": 1, "misses": 0}, counts
    assert counts["workflow_config"] == counts["run_directory"] == counts["resolve_config"] == 0, counts
    assert counts["rule_facts"] == 0 and counts["registries"] == "empty", counts
    assert "torch" not in counts["modules"], counts["modules"]  # (jsonschema: Snakemake's nbformat, planning jobs)
    planned = [line for line in first.stdout.splitlines() if line.startswith("total")]
    assert planned and planned == [line for line in again.stdout.splitlines() if line.startswith("total")]
    assert len(list((wd / ".snakemake/unie/config").glob("*.pickle"))) == 1


@pytest.mark.slow
def test_a_noop_rerun_of_a_finished_run_hashes_nothing_and_imports_no_torch(smoke_pristine, tmp_path):
    """On a finished smoke run (a copy: its files have new inodes and change times, so its first rerun hashes every
    recorded file once and checks the configuration), a no-op plans nothing, starts no job, reads its configuration
    from the cache, hashes no file, reads no registry and imports no torch, and still checks every record (damage is
    caught: test_damage_workflow.py)."""
    import shutil

    wd = tmp_path / "run"
    shutil.copytree(smoke_pristine, wd, symlinks=True)
    jobs = wd / "runs" / "smoke" / "benchmarks" / "jobs.jsonl"
    before = jobs.read_bytes()
    args = ("--cores", "2", "--configfile", str(SMOKE))
    first, counts = _probe(wd, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert counts["files_hashed"] > 0 and counts["cache"] == {"hits": 0, "misses": 1}, counts
    r, counts = _probe(wd, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Nothing to be done" in r.stdout + r.stderr and jobs.read_bytes() == before  # no job started
    assert counts["cache"] == {"hits": 1, "misses": 0} and counts["workflow_config"] == 0, counts
    assert counts["files_hashed"] == 0 and counts["registries"] == "empty", counts
    assert "torch" not in counts["modules"] and "jsonschema" not in counts["modules"], counts["modules"]


def test_a_config_error_is_said_without_torch_and_never_remembered(tmp_path):
    """``--config seed=abc``: one line, before torch would load (the schema's error comes before the cross-checks,
    which read the registries); said again on the next run, nothing kept."""
    pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
    for _ in range(2):
        r, counts = _probe(tmp_path, "-n", "--configfile", str(SMOKE), "--config", "seed=abc")
        assert r.returncode == 1
        assert r.stderr.strip().splitlines() == [
            "unie: config error: --config: config key 'seed': 'abc' is not of type 'integer' "
            "(--verbose: the schema's full report)"
        ], r.stderr[-2000:]
        assert "torch" not in counts["modules"] and counts["registries"] == "empty", counts["modules"]
        assert counts["cache"] == {"hits": 0, "misses": 1}
    assert not list(tmp_path.glob(".snakemake/unie/config/*.pickle"))


def test_the_configuration_is_remembered_by_the_bytes_it_depends_on(tmp_path, monkeypatch):
    """A changed byte of a config file, another ``--config``, a changed schema: another entry, checked in full; an
    error is checked and said every time, never kept."""
    from unie.config.cache import STATS, configured
    from unie.core.options import ConfigError

    monkeypatch.chdir(tmp_path)
    overlay = tmp_path / "my.yaml"
    overlay.write_text(SMOKE.read_text())
    schema = tmp_path / "schema.yaml"
    schema.write_text((REPO / "workflow/schemas/config.schema.yaml").read_text())
    hits, misses = STATS["hits"], STATS["misses"]

    def counts():
        return STATS["hits"] - hits, STATS["misses"] - misses

    first = configured([overlay], {"seed": 3}, schema=schema)
    assert counts() == (0, 1) and first.run_dir == "runs/smoke+seed-3"
    again = configured([overlay], {"seed": 3}, schema=schema)
    assert counts() == (1, 1)
    assert again == first and again.config is not first.config
    configured([overlay], {"seed": 4}, schema=schema)  # another --config
    assert counts() == (1, 2)
    schema.write_text(schema.read_text() + "\n# a comment\n")  # another schema (its bytes)
    configured([overlay], {"seed": 3}, schema=schema)
    assert counts() == (1, 3)
    overlay.write_text(overlay.read_text() + "\n# the same settings, other bytes\n")
    assert configured([overlay], {"seed": 3}, schema=schema).config == first.config and counts() == (1, 4)
    cfg = yaml.safe_load(overlay.read_text())
    cfg["sampling"]["stpes"] = [2]
    overlay.write_text(yaml.safe_dump(cfg, sort_keys=False))
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"my\.yaml: config key 'sampling\.stpes': unknown key"):
            configured([overlay], {"seed": 3}, schema=schema)
    assert counts() == (1, 6)
    assert len(list((tmp_path / ".snakemake/unie/config").glob("*.pickle"))) == 4


def test_the_key_covers_the_package_code_and_the_base_profiles(tmp_path, monkeypatch):
    """The key changes with any byte of the package's code and of a base profile a profile is written over."""
    from unie.config import cache

    base = tmp_path / "base.yaml"
    base.write_text(SMOKE.read_text())
    mine = tmp_path / "mine.yaml"
    mine.write_text("base: base.yaml\nseed: 2\n")
    key = cache.cache_key([mine], {})
    base.write_text(base.read_text() + "\n")
    assert cache.cache_key([mine], {}) != key
    code = tmp_path / "repo" / "unie" / "m.py"
    code.parent.mkdir(parents=True)
    code.write_text("x = 1\n")
    monkeypatch.setattr(cache, "REPO", tmp_path / "repo")
    key = cache.cache_key([mine], {}, config_dir=REPO / "config")
    code.write_text("x = 2\n")
    assert cache.cache_key([mine], {}, config_dir=REPO / "config") != key


# ---------------------------------------------------------------------- the check of the run's files
PLAN = """
import json, sys
from unie.pipeline.damage import plan_rebuilds
said = []
remake = plan_rebuilds(".", None, log=said.append, dry_run=True, run="runs/t")
print(json.dumps({"remake": remake, "said": said, "torch": "torch" in sys.modules, "pyarrow": "pyarrow" in sys.modules}))
"""


def _flip(path: Path, at: int) -> None:
    """One byte of ``path`` changed, its modification time put back."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_an_unchanged_runs_check_reads_no_token_file_and_still_finds_a_flipped_byte(tmp_path, monkeypatch):
    """After a check has verified them, the next one takes the token files whose size and times are unchanged as
    verified (no footer read: neither pyarrow nor torch is imported) and reads the identities of the inputs from its
    cache; a byte flipped with the modification time kept (the change time moves) is found all the same."""
    import torch

    from unie.core.integrity import write_json
    from unie.data.tokens import write_token_file
    from unie.pipeline.damage import plan_rebuilds

    monkeypatch.chdir(tmp_path)
    tokens = Path("runs/t/resources/tokenized/owt/train.parquet")
    meta = {"tokenizer": "fp", "source": {"dataset": "owt", "split": "train"}}
    write_token_file(tokens, [torch.arange(32).view(8, 4).numpy()], 4, meta)
    samples = Path("runs/t/results/samples/mdlm/steps2.txt")
    samples.parent.mkdir(parents=True)
    samples.write_text("the cat chews the bone .\n" * 4)
    result = Path("runs/t/results/genppl/mdlm/steps2.json")
    result.parent.mkdir(parents=True)
    from unie.pipeline.damage import identities

    write_json({"genppl": 1.5}, result, made_by="genppl", made_from=identities([tokens]), records=[samples])
    assert plan_rebuilds(".", None, log=print, run="runs/t") == []  # verifies them, once

    def check() -> dict:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        r = subprocess.run([sys.executable, "-c", PLAN], capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout)

    unchanged = check()
    assert unchanged == {"remake": [], "said": [], "torch": False, "pyarrow": False}
    _flip(samples, 4)
    flipped = check()
    assert flipped["remake"] == [str(samples)] and not flipped["torch"], flipped
    assert "content hash differs" in flipped["said"][0]
    _flip(samples, 4)  # put back
    _flip(tokens, tokens.stat().st_size // 2)
    flipped = check()
    assert str(tokens) in flipped["remake"], flipped
