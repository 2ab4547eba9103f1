"""Shared fixtures: a tiny brute-forceable HMM, the real toy-world HMM, its tokenizer, tiny transformers; no
network for lm-eval runs; a stand-in for the torchrun subprocess; one completed run of the workflow on
config/smoke.yaml."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from unie.core.options import ModelConfig
from unie.models.transformer import Transformer
from unie.data.tokenizer import word_tokenizer
from unie.data.toy_world import HMM, word_list

# Every tensor here is tiny: intra-op threading only adds synchronisation overhead, and on a loaded
# 2-core machine it makes small matmuls ~30x slower.  One thread keeps the suite fast and deterministic.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_hmm() -> HMM:
    """S=3 hidden states, V=3 symbols, random strictly positive matrices (small enough to enumerate)."""
    g = torch.Generator().manual_seed(1234)
    T = torch.rand(3, 3, generator=g, dtype=torch.float64) + 0.1
    E = torch.rand(3, 3, generator=g, dtype=torch.float64) + 0.1
    return HMM.from_matrices(T / T.sum(1, keepdim=True), E / E.sum(1, keepdim=True))


@pytest.fixture(scope="session")
def owt_hmm() -> HMM:
    return HMM("owt")


@pytest.fixture(scope="session")
def tok():
    return word_tokenizer(word_list())


@pytest.fixture(scope="session")
def tok_info(tok) -> dict:
    return tok.info()


def make_net(
    vocab_size: int,
    causal: bool = False,
    d_model: int = 16,
    n_layers: int = 1,
    n_heads: int = 2,
    max_len: int = 16,
    seed: int = 0,
) -> Transformer:
    """A tiny randomly initialised transformer (deterministic for a seed)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        mlp_ratio=2,
        max_len=max_len,
        causal=causal,
    )
    return Transformer(cfg).eval()


@pytest.fixture(scope="session")
def net_factory(tok):
    """``net_factory(causal=..., **sizes)``: a tiny transformer over the toy-world vocabulary."""

    def build(**kw):
        return make_net(tok.vocab_size, **kw)

    return build


@pytest.fixture(scope="session")
def random_words(tok):
    """``random_words(n, L, seed)``: ``(n, L)`` ids uniform over the words + <eos> (never <bos>/<mask>)."""

    def draw(n: int, L: int, seed: int = 0) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, tok.eos_id + 1, (n, L), generator=g)

    return draw


@pytest.fixture
def hf_offline(monkeypatch, tmp_path):
    """No network, no writes to the user's Hugging Face cache (subprocesses, e.g. torchrun ranks, inherit it)."""
    import datasets.config

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    # datasets reads these once at import; patch the live values too (load_dataset reads them per call)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf" / "datasets")


def skip_outside_remote_code_range() -> str:
    """Skip the calling test, naming the ``paper`` extra, when the installed transformers is outside the range
    LLaDA's and Dream's remote code is known to run under (pyproject.toml, :func:`unie.models.hf.remote_code_transformers`,
    which the loaders enforce for any ``auto_map`` checkpoint); returns the range."""
    import transformers
    from packaging.specifiers import SpecifierSet

    from unie.models.hf import remote_code_transformers

    spec = remote_code_transformers()
    assert spec, "the paper extra names a transformers range (pyproject.toml)"
    if not SpecifierSet(spec).contains(transformers.__version__, prereleases=True):
        pytest.skip(
            f"the paper extra: pip install -e '.[paper]' (transformers {spec} for remote code; this is "
            f"{transformers.__version__})"
        )
    return spec


@pytest.fixture
def fake_torchrun(monkeypatch):
    """``subprocess.Popen`` replaced for :func:`unie.core.ranks.run_ranks`: the returned class records each
    launch in ``launched`` as ``(cmd, the ARGS.json it names, OMP_NUM_THREADS)``, calls ``on_launch(args)`` if set,
    prints ``says`` as the ranks' output and exits with ``rc``."""

    class Ranks:
        launched: list = []
        on_launch = None
        says = "rank 0 says hello\n"
        rc = 0

        def __init__(self, cmd, **kw):
            args = json.loads(Path(cmd[-1]).read_text())
            Ranks.launched.append((cmd, args, kw["env"]["OMP_NUM_THREADS"]))
            if Ranks.on_launch is not None:
                Ranks.on_launch(args)
            self.stdout = iter([Ranks.says])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait(self):
            return Ranks.rc

    monkeypatch.setattr(subprocess, "Popen", Ranks)
    return Ranks


REPO = Path(__file__).resolve().parents[1]


# what a smoke run is made of: a change to any of these is another run
_SMOKE_SOURCES = ("Snakefile", "pyproject.toml", "workflow", "unie", "config")
_SMOKE_PACKAGES = ("torch", "snakemake", "lm_eval", "transformers", "datasets", "tokenizers", "pyarrow", "pandas")


@functools.cache
def _smoke_key() -> str:
    """A digest of everything a smoke run depends on: the workflow's and the package's files (bytes and paths) and the
    versions of Python and the libraries that compute or record its results (computed once per process)."""
    import hashlib
    from importlib import metadata

    h = hashlib.sha256(sys.version.encode())
    for name in _SMOKE_PACKAGES:
        try:
            h.update(f"{name}={metadata.version(name)}\n".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{name}=none\n".encode())
    for top in _SMOKE_SOURCES:
        root = REPO / top
        files = (
            [root]
            if root.is_file()
            else sorted(
                f for f in root.rglob("*") if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"
            )
        )
        for f in files:
            h.update(f"{f.relative_to(REPO).as_posix()}\0".encode() + f.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def _smoke_base(config, tmp_path_factory) -> Path:
    """The folder of the shared smoke runs: pytest's cache, else the folder the run's workers share, else this run's."""
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider: this run's own folder
    if cache is not None:
        return cache.mkdir("unie-smoke")
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the folder above each worker's, which the run's workers share
        base = tmp_path_factory.getbasetemp().parent / "unie-smoke"
        base.mkdir(exist_ok=True)
        return base
    return tmp_path_factory.mktemp("unie-smoke")


def _smoke_built(config) -> bool:
    """Whether this tree's shared smoke run is complete, so that :func:`smoke_pristine` will not build it (asked under
    pytest-xdist only, where the workers share its folder)."""
    return (_smoke_base(config, config._tmp_path_factory) / _smoke_key() / ".complete").exists()


@pytest.fixture(scope="session")
def smoke_pristine(request, tmp_path_factory) -> Path:
    """A working directory in which the whole workflow ran once on config/smoke.yaml (``snakemake --cores 2`` with
    the default target), from nothing, and which no test changes: kept in pytest's cache under a digest of the
    sources and library versions (:func:`_smoke_key`), so a second pytest process on the same tree reuses it (CI's
    Slurm test compares its cluster run with it instead of running the smoke config locally again).  Built under a
    lock, marked complete only after Snakemake succeeded; an incomplete one is built again."""
    import fcntl
    import shutil

    pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
    base = _smoke_base(request.config, tmp_path_factory)
    key = _smoke_key()
    wd = base / key
    with open(base / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for old in base.iterdir():  # earlier sources' runs
            if old.is_dir() and old.name != key:
                shutil.rmtree(old, ignore_errors=True)
        if not (wd / ".complete").exists():
            shutil.rmtree(wd, ignore_errors=True)
            wd.mkdir()
            cmd = [
                sys.executable,
                "-m",
                "snakemake",
                "-s",
                str(REPO / "Snakefile"),
                "-d",
                str(wd),
                "--cores",
                "2",
                "--configfile",
                str(REPO / "config" / "smoke.yaml"),
            ]
            r = subprocess.run(cmd, cwd=wd, capture_output=True, text=True)
            if r.returncode != 0:
                raise AssertionError(f"snakemake failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
            (wd / ".complete").write_text(key + "\n")
    return wd


@pytest.fixture(scope="session")
def smoke_tree(smoke_pristine, tmp_path_factory) -> Path:
    """A copy of :func:`smoke_pristine` (modification times kept) for the modules that read it and run the workflow
    in it again (``test_workflow.py``, ``test_runs.py``) and the one that damages a copy of it
    (``test_damage_workflow.py``, which runs first)."""
    import shutil

    wd = tmp_path_factory.mktemp("smoke")
    shutil.copytree(smoke_pristine, wd, symlinks=True, dirs_exist_ok=True)
    return wd


def pytest_collection_modifyitems(config, items):
    """Every test that runs Snakemake on a workflow (marked ``slow`` or ``slurm``) or reads the shared smoke run is also marked
    ``workflow``: ``pytest -m "not workflow"`` is the quick loop while working; the README's ``pytest -q`` runs all."""
    shared = {"smoke_tree", "smoke_pristine", "smoke_run", "damaged"}
    for item in items:
        if (
            item.get_closest_marker("slow")
            or item.get_closest_marker("slurm")
            or shared & set(getattr(item, "fixturenames", ()))
        ):
            item.add_marker(pytest.mark.workflow)
    # the Slurm test starts a throw-away Slurm (root, apt-get where it is missing): only when asked for, by a ``-m``
    # naming ``slurm`` or by UNIE_TESTS_SLURM=1 beside the rest (CI: `UNIE_TESTS_SLURM=1 pytest -q`, one run for both)
    if "slurm" not in (config.option.markexpr or "") and os.environ.get("UNIE_TESTS_SLURM") != "1":
        slurm = [item for item in items if item.get_closest_marker("slurm")]
        if slurm:
            config.hook.pytest_deselected(items=slurm)
            items[:] = [item for item in items if item not in slurm]
    # under pytest-xdist each file goes to a worker in this order: first the files with a test marked ``alone`` (such
    # a test waits for the tests running beside it to end: at the start, the other worker's first test), then the
    # Slurm test (minutes, mostly waiting on Slurm: handed out last, it would end the run alone), then the files whose
    # tests take longest, longest first (LONGEST_FIRST), then the rest: handed out last, a long file ended the run
    # with the other worker idle (test_workflow.py's 52 s, 21 s of idle worker)
    first = {item.path: (0, 0) for item in items if item.get_closest_marker("slurm")}
    first.update({item.path: (-1, 0) for item in items if item.get_closest_marker("alone")})
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path, (1, rank.get(item.path.name, len(rank)))))


# the test files that took longest, longest first (worker-seconds under two workers, the smoke run already built, on
# an Intel Xeon with AVX-512, 2026-11-30): the damage runs (70; they also build the shared smoke run), replicates (61),
# prefetch (56), the recovery walk (53), the workflow tests (51), tokenizing 200 MB (47), the stand-ins (30), start-up
# (29), lm-eval's determinism (27), the paper profile (25), lm-eval (21); a file not named here comes after them
LONGEST_FIRST = (
    "test_damage_workflow.py",
    "test_replicates.py",
    "test_prefetch.py",
    "test_recovery_workflow.py",
    "test_workflow.py",
    "test_tokenize_stream.py",
    "test_gpu_smoke.py",
    "test_startup.py",
    "test_lmeval_determinism.py",
    "test_paper_profile.py",
    "test_lmeval.py",
)


# --- tests in parallel (pytest-xdist, `-n auto` in pyproject.toml) and the few that need the machine to themselves ---
#
# Each test holds a shared lock on one file per test run while it runs; a test marked ``alone`` holds it exclusively,
# so it starts once the tests running in the other workers have ended and none starts beside it.  A gate taken
# around each acquisition keeps the exclusive request from waiting behind an endless stream of shared ones.


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one worker per core this process may run on (its CPU affinity, and the cgroup's CPU quota where one
    is set), not psutil's count of the host's physical cores, which a container limited to 2 cores can exceed many
    times over (each worker imports torch and may run a workflow)."""
    import math

    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            n = min(n, math.floor(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, n)


def _run_lock_path() -> Path | None:
    import tempfile

    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the same in every worker of one run; absent without xdist
    return Path(tempfile.gettempdir()) / f"unie-tests-{uid}.lock" if uid else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import fcntl

    path = _run_lock_path()
    if path is None:
        return (yield)
    # the test that builds the shared smoke run has the machine to itself: beside another test its timed jobs (both
    # cores held, two torch threads) were slowed 20-fold and their CPU time tenfold, and the run took 286 s, not 83
    builds_smoke = "smoke_pristine" in getattr(item, "fixturenames", ()) and not _smoke_built(item.config)
    mode = fcntl.LOCK_EX if item.get_closest_marker("alone") or builds_smoke else fcntl.LOCK_SH
    with open(path.with_suffix(".gate"), "a") as gate, open(path, "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(lock, mode)
        fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
