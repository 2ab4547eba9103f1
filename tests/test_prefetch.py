"""`snakemake --profile slurm prefetch` (unie.pipeline.prefetch): it fetches exactly what `all` downloads, on stand-ins
with the hub unreachable (a Hugging Face cache written here, `HF_HUB_OFFLINE=1`); it opens every fetched file offline;
lm-eval's task datasets are loaded into HF_HOME and checked from there alone; the checkpoints to place by hand are
one console line each."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
pytest.importorskip("lm_eval", reason="the dllm extra: pip install -e '.[dllm]'")

from unie.pipeline.prefetch import PrefetchError, Plan, check_offline, fetch_lmeval_tasks, plan
from unie.config.profile import resolve_config

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "config" / "paper.yaml"


def _jobs(out: str, rules) -> set:
    """``(rule, wildcards)`` of every planned job of ``rules`` in a dry run's output."""
    blocks = re.findall(r"^(?:local)?rule (\w+):\n(.*?)(?=^\[|\n\n|\Z)", out, re.S | re.M)
    return {(name, (re.search(r"wildcards: (.*)", b) or [None, ""])[1]) for name, b in blocks if name in rules}


def _dry(tmp_path, target):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path / target),
            target,
            "--configfile",
            str(PAPER),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


DOWNLOADS = ("tokenizer", "download", "download_hf_model", "download_released", "download_task_file")


def test_prefetch_fetches_exactly_what_all_downloads(tmp_path):
    cfg = resolve_config([PAPER])
    p = plan(cfg)
    assert p.tokenizer == "gpt2" and len(p.datasets) == 10 and sorted(p.models) == sorted(cfg["hf_models"])
    assert p.released == {"mdlm": "kuleshov-group/mdlm-owt", "bd3lm": "kuleshov-group/bd3lm-owt-block_size4"}
    assert len(p.task_files) == 6 and p.lmeval_tasks == ("minerva_math500", "gsm8k")
    assert [(b["name"], b["path"]) for b in p.by_hand] == [
        ("ar", "resources/released/ar.ckpt"),
        ("sedd", "resources/released/sedd.ckpt"),
        ("duo", "resources/released/duo.ckpt"),
    ]
    everything, pre = _dry(tmp_path, "all"), _dry(tmp_path, "prefetch")
    assert _jobs(pre, DOWNLOADS) == _jobs(everything, DOWNLOADS) and len(_jobs(pre, DOWNLOADS)) == 27
    planned = set(re.findall(r"^(?:local)?rule (\w+):", pre, re.M))
    assert planned == {*DOWNLOADS, "prefetch_lmeval", "prefetch"}  # nothing trained, imported or placed by hand
    smk = (REPO / "workflow" / "rules" / "prefetch.smk").read_text()  # on the submit host, as the downloads (or,
    # where the site names one, the lm-eval task data on its download partition, like every download)
    local = {
        n: re.search(r"localrule: (\w+)", body).group(1)
        for n, body in re.findall(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", smk, re.S | re.M)
    }
    assert local == {"prefetch_lmeval": "DOWNLOADS_LOCAL", "prefetch": "True"}


TASK_YAML = """task: {name}
dataset_path: {path}
{kwargs}output_type: generate_until
test_split: test
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def test_lmeval_task_data_is_fetched_then_checked_offline(tmp_path, monkeypatch):
    """The hub unreachable: a task whose data is at hand loads (fetch, then the offline check in a fresh process); a
    task whose dataset is a hub name not in HF_HOME is refused in one line naming it and HF_HOME."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i} + 1", "answer": str(i + 1)}) + "\n" for i in range(5)))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "standin.yaml").write_text(
        TASK_YAML.format(name="standin", path="json", kwargs=f'dataset_kwargs:\n  data_files:\n    test: "{data}"\n')
    )
    (tasks / "uncached.yaml").write_text(TASK_YAML.format(name="uncached", path="org/not-in-the-cache", kwargs=""))
    rec = fetch_lmeval_tasks(
        ["standin"], tmp_path / "lmeval.json", include_path=str(tasks), include_defaults=False, log=lambda m: None
    )
    assert rec == {"standin": {"dataset": "json", "name": None, "docs": 5}}
    written = json.loads((tmp_path / "lmeval.json").read_text())
    assert {k: v for k, v in written.items() if k != "content_sha256"} == rec  # a result file carries its hash
    (checked,) = check_offline(
        Plan(lmeval_tasks=("standin",)), files={}, include_path=str(tasks), include_defaults=False
    )
    assert checked["path"] == "standin" and "5 documents from HF_HOME" in checked["ok"]
    with pytest.raises(PrefetchError) as e:
        fetch_lmeval_tasks(["uncached"], tmp_path / "x.json", include_path=str(tasks), include_defaults=False)
    msg = str(e.value)
    assert "\n" not in msg and "lm-eval task 'uncached'" in msg and "org/not-in-the-cache" in msg
    assert f"HF_HOME={tmp_path / 'hf'}" in msg and not (tmp_path / "x.json").exists()
    with pytest.raises(PrefetchError, match="does not load offline: .*uncached"):
        check_offline(Plan(lmeval_tasks=("uncached",)), files={}, include_path=str(tasks), include_defaults=False)


NEEDS_PACKAGE = """try:
    import unie_standin_package_not_installed  # noqa: F401
except ModuleNotFoundError as e:  # lm-eval's own tasks re-raise it in their words (minerva_math's utils.py)
    raise type(e)("`unie_standin_package_not_installed` is required for this task: pip install lm-eval[x]") from e


def process_docs(dataset):
    return dataset
"""


def test_a_task_that_imports_a_missing_package_is_refused_by_prefetch(tmp_path, monkeypatch):
    """A task whose Python helpers import a package that is not installed (as minerva_math500 imports lm-eval's
    `math` extra) is refused by prefetch on the submit host, in one line naming the package and the extra, both when
    its data is fetched and in the offline check: not by the dllm_eval job on a GPU."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"question": f"{i} + 1", "answer": str(i + 1)}) + "\n" for i in range(3)))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "utils.py").write_text(NEEDS_PACKAGE)
    (tasks / "needs_package.yaml").write_text(
        TASK_YAML.format(
            name="needs_package",
            path="json",
            kwargs=f'dataset_kwargs:\n  data_files:\n    test: "{data}"\nprocess_docs: !function utils.process_docs\n',
        )
    )
    with pytest.raises(PrefetchError) as e:
        fetch_lmeval_tasks(["needs_package"], tmp_path / "x.json", include_path=str(tasks), include_defaults=False)
    msg = str(e.value)
    assert "\n" not in msg and "lm-eval task 'needs_package'" in msg and not (tmp_path / "x.json").exists()
    assert "'unie_standin_package_not_installed', which is not installed" in msg and "pip install -e '.[paper]'" in msg
    assert "HF_HOME" not in msg  # not a cache problem
    with pytest.raises(
        PrefetchError, match=r"does not load offline: .*'unie_standin_package_not_installed'.*\[paper\]"
    ):
        check_offline(Plan(lmeval_tasks=("needs_package",)), files={}, include_path=str(tasks), include_defaults=False)


MATH500_COLUMNS = ("problem", "solution", "answer", "subject", "level", "unique_id")  # HuggingFaceH4/MATH-500


def _math500_standin(tmp_path) -> Path:
    """lm-eval's own minerva_math500 (its prompt, its Python helpers: lm-eval's `math` extra), its data a local
    JSON file with MATH-500's columns instead of the hub dataset."""
    import lm_eval

    minerva = Path(lm_eval.__file__).parent / "tasks" / "minerva_math" / "minerva_math_algebra.yaml"
    rows = [
        {
            "problem": f"What is ${i}+1$?",
            "solution": f"It is $\\boxed{{{i + 1}}}$.",
            "answer": str(i + 1),
            "subject": "Algebra",
            "level": 1,
            "unique_id": f"test/algebra/{i}.json",
        }
        for i in range(4)
    ]
    data = tmp_path / "math500.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = tmp_path / "math_tasks"
    tasks.mkdir()
    (tasks / "minerva_math500.yaml").write_text(
        f"include: {minerva}\ntask: minerva_math500\ndataset_path: json\ndataset_name: null\n"
        f'dataset_kwargs:\n  data_files:\n    test: "{data}"\ntraining_split: null\ntest_split: test\n'
    )
    return tasks


def test_math500_loads_through_prefetch_with_the_paper_extra(tmp_path, monkeypatch):
    """MATH500 as lm-eval defines it loads through prefetch (fetched, then opened offline in a fresh process) with
    the paper extra installed; with its math_verify import failing, prefetch refuses it naming math_verify."""
    pytest.importorskip("math_verify", reason="the paper extra: pip install -e '.[paper]'")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tasks = _math500_standin(tmp_path)
    rec = fetch_lmeval_tasks(
        ["minerva_math500"],
        tmp_path / "lmeval.json",
        include_path=str(tasks),
        include_defaults=False,
        log=lambda m: None,
    )
    assert rec == {"minerva_math500": {"dataset": "json", "name": None, "docs": 4}}
    (checked,) = check_offline(
        Plan(lmeval_tasks=("minerva_math500",)), files={}, include_path=str(tasks), include_defaults=False
    )
    assert "4 documents from HF_HOME" in checked["ok"]
    shadow = tmp_path / "shadow"  # a math_verify that fails to import, first on the path of the fresh processes
    shadow.mkdir()
    (shadow / "math_verify.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'math_verify'\", name='math_verify')\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")]))
    with pytest.raises(
        PrefetchError,
        match=r"minerva_math500' imports the Python package 'math_verify', which is "
        r"not installed here: install the paper extra",
    ):
        fetch_lmeval_tasks(["minerva_math500"], tmp_path / "y.json", include_path=str(tasks), include_defaults=False)


# ---------------------------------------------------------------------- the whole target on stand-ins, offline
def _snapshot(hub: Path, kind: str, repo: str) -> Path:
    """The snapshot folder of ``repo`` in a Hugging Face hub cache (``refs/main`` -> the commit), created."""
    root = hub / f"{kind}s--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text("0" * 40)
    snap = root / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True, exist_ok=True)
    return snap


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory) -> Path:
    """A byte-level BPE and a one-layer GPT-2 saved with save_pretrained (a stand-in for every hub model)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        ["the quick brown fox jumps over the lazy dog"] * 4,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tok = GPT2TokenizerFast(
        tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>"
    )
    out = tmp_path_factory.mktemp("tiny_gpt2")
    tok.save_pretrained(out)
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    GPT2LMHeadModel(
        GPT2Config(
            n_layer=1, n_head=2, n_embd=16, vocab_size=len(tok), n_positions=64, bos_token_id=eot, eos_token_id=eot
        )
    ).save_pretrained(out)
    return out


def _standin_profile(tmp_path: Path, tiny_gpt2: Path) -> Path:
    """config/paper.yaml with every dataset a local Parquet file and no built-in lm-eval task; the hub models,
    released folders, the tokenizer and the task files as stand-ins in a Hugging Face cache under tmp_path/hf."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from unie.models.standins import write_standin

    cfg = yaml.safe_load(PAPER.read_text())
    raw = tmp_path / "raw.parquet"
    pq.write_table(pa.table({"text": ["the quick brown fox", "jumps over the lazy dog"] * 3}), raw)
    for splits in cfg["data"]["hf"].values():
        for split in list(splits):
            splits[split] = {"path": str(raw), "format": "parquet", "split": split}
    cfg["dllm"]["sweeps"]["task"] = "mmlu_gen"  # a local task: lm-eval's built-in ones are tested above
    cfg["dllm"]["tasks"]["names"] = [n for n in cfg["dllm"]["tasks"]["names"] if n in cfg["dllm"]["tasks"]["local"]]
    hub = tmp_path / "hf" / "hub"
    remote = {
        cfg["hf_models"][c["model"]]: c["style"]
        for c in cfg["dllm"]["checkpoints"].values()
        if c.get("trust_remote_code")
    }  # LLaDA and Dream ship their modeling code
    for repo in {*cfg["hf_models"].values(), "gpt2"} - set(remote):
        shutil.copytree(tiny_gpt2, _snapshot(hub, "model", repo), dirs_exist_ok=True)
    from standins import write_remote_dllm
    from unie.data.tokenizer import word_tokenizer

    for repo, style in remote.items():
        write_remote_dllm(_snapshot(hub, "model", repo), style, word_tokenizer(["the", "quick", "brown", "fox"]))
    info = {"vocab_size": 51, "mask_id": 50, "bos_id": 49, "eos_id": 49}
    for name, spec in cfg["models"].items():
        if spec.get("source", {}).get("hf_id"):
            write_standin(_snapshot(hub, "model", spec["source"]["hf_id"]), spec["source"]["kind"], "hf", info)
    for spec in cfg["dllm"]["tasks"]["local"].values():
        for f in spec["files"]:
            target = _snapshot(hub, "dataset", spec["repo"]) / f
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text('{"stand-in": true}\n')
    profile = tmp_path / "paper_standin.yaml"
    profile.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return profile


@pytest.mark.slow
def test_prefetch_target_on_standins_with_the_hub_unreachable(tmp_path, tiny_gpt2):
    from unie.config.rundir import run_directory

    profile = _standin_profile(tmp_path, tiny_gpt2)
    run = run_directory([profile])  # the run's own files (the datasets' copies, the report) are in its directory
    work = tmp_path / "work"
    (work / "resources" / "released").mkdir(parents=True)
    (work / "resources" / "released" / "ar.ckpt").write_bytes(b"placed by hand")
    from unie.data.corpus import write_text_parquet

    for domain, split in plan(resolve_config([profile])).datasets:
        if (domain, split) != ("owt", "train"):  # fetched before (a job each, ~5 s); owt/train is fetched here
            write_text_parquet(
                ["a document fetched before"], work / run / "resources" / "raw" / domain / f"{split}.parquet"
            )
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(work),
        "--cores",
        "2",
        "prefetch",
        "--configfile",
        str(profile),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith("place by hand:")]
    assert lines == [
        "place by hand: resources/released/ar.ckpt <- models.ar: ar.ckpt from MDLM's Google Drive "
        "(README 'Baselines') [present]",
        "place by hand: resources/released/sedd.ckpt <- models.sedd: louaaron/sedd-small (or MDLM's "
        "Google-Drive sedd.ckpt) [MISSING]",
        f"place by hand: resources/released/duo.ckpt <- models.duo: {_duo_identifier()} [MISSING]",
    ]
    report = (work / run / "resources" / "prefetch" / "report.md").read_text()
    assert report.count("| datasets |") == 10 and report.count("| models |") == 8 and report.count("| released |") == 2
    assert report.count("| task_files |") == 6 and f"| tokenizer | `{run}/resources/tokenizer` |" in report
    # each hub model opened offline: its config, its tokenizer, its weight files; LLaDA's and Dream's modeling code
    # imported under this transformers, which is in the range it is known to run under
    assert len(re.findall(r"\| models \| `resources/hf/\w+` \| config, \d+-token tokenizer, weights \|", report)) == 6
    for name, cls in (
        ("llada_8b_instruct", "modeling_llada.LLaDAModelLM"),
        ("dream_7b_instruct", "modeling_dream.DreamModel"),
    ):
        assert re.search(
            rf"\| models \| `resources/hf/{name}` \| config, \d+-token tokenizer, weights, remote code "
            rf"\({re.escape(cls)}\) imports under transformers 4\.",
            report,
        ), report
    assert not (work / run / "results").exists()  # nothing but downloads
    # a fetched file that does not load offline stops the target, naming it
    shutil.rmtree(work / "resources" / "hf" / "qwen25_05b")
    (work / "resources" / "hf" / "qwen25_05b").mkdir()
    (work / "resources" / "hf" / "qwen25_05b" / "config.json").write_text("{}")
    r = subprocess.run(cmd + ["-f"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode != 0
    line = next(x for x in r.stderr.splitlines() if x.startswith("unie: error:"))
    assert "does not load offline" in line and "resources/hf/qwen25_05b" in line and "no weights" in line


def _duo_identifier() -> str:
    from unie.models.released import SOURCES

    return SOURCES["duo"].identifier
