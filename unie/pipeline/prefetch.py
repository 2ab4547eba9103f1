"""Rule ``prefetch`` (``snakemake --profile slurm prefetch``): everything a profile's ``all`` downloads, fetched on
the submit host before any job is submitted, then checked offline, and the files no program can fetch listed.

What ``all`` reads from the network (:func:`plan`, from the config alone):

* the tokenizer, when the config names a hub tokenizer (rule ``tokenizer`` -> ``resources/tokenizer``);
* every dataset of ``data.hf`` (rule ``download`` -> ``resources/raw/{domain}/{split}.parquet``; a hub dataset
  passes through ``HF_HOME``'s datasets cache);
* the Hugging Face models the rules read: the Gen PPL evaluators, the Table 3 rows' and sweeps' models and proxies
  (rule ``download_hf_model`` -> ``resources/hf/{name}``);
* the released checkpoints published on the hub (``source.hf_id``; rule ``download_released`` ->
  ``resources/released/{model}``);
* the release files of the local lm-eval tasks (rule ``download_task_file`` -> ``resources/paper_tasks/...``);
* the datasets of lm-eval's built-in tasks that Table 3 and the sweeps name (``minerva_math500``, ``gsm8k``): these
  are loaded by lm-eval inside the ``dllm_eval`` jobs, on compute nodes that are often offline, so rule
  ``prefetch_lmeval`` loads each task once here, which leaves its dataset in ``HF_HOME``'s datasets cache
  (``resources/prefetch/lmeval_tasks.json`` records what was loaded).  Loading a task also imports its Python
  helpers (``minerva_math500``: lm-eval's ``math`` extra): a package that is not installed stops it in one line
  naming the package and the ``paper`` extra.  ``all`` runs this rule too (the ``dllm_eval`` and ``dllm_sweep`` jobs
  read its record), so a missing package or dataset stops the run on the submit host before any of them starts.

The first five are the workflow's own download rules (local rules: they run on the submit host), so ``prefetch`` is
exactly what ``all`` would fetch, in the same files.  Then :func:`check_offline` opens every one of them in a fresh
process with ``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` (the tokenizer, each
Parquet file, each model folder's config, tokenizer and weight files, and for a model with remote code its
transformers range and its modeling classes imported, each task file, each lm-eval task built from ``HF_HOME``
alone), and :func:`by_hand_lines` names each checkpoint that is published only on Google Drive
(``source.path``) and where it goes.  The report is ``resources/prefetch/report.md``.

The tokenizer, the datasets' Parquet copies, the record and the report are the run's own (in its directory,
``runs/<name>/resources/...``); the model snapshots, released checkpoints and task files are shared by every run
(the top level's ``resources/``: :mod:`unie.config.rundir`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import InputError
from ..data.hub import OFFLINE_ENV

REPORT = "resources/prefetch/report.md"  # in the run's directory
LMEVAL_RECORD = "resources/prefetch/lmeval_tasks.json"  # in the run's directory


class PrefetchError(InputError, RuntimeError):
    """Something ``all`` needs could not be fetched or does not load offline (one line naming each)."""


@dataclass(frozen=True)
class Plan:
    """What a profile's ``all`` downloads (module doc).  ``by_hand``: ``{name, kind, path, identifier}`` of each
    released checkpoint placed by hand."""

    tokenizer: str | None = None
    datasets: tuple = ()  # (domain, split)
    models: dict = field(default_factory=dict)  # hf_models name -> repo id
    released: dict = field(default_factory=dict)  # model -> hf_id
    task_files: tuple = ()  # (task, file)
    lmeval_tasks: tuple = ()
    by_hand: tuple = ()

    def files(self, run_dir: str = ".") -> dict[str, list[str]]:
        """The workflow's files that hold them, by kind (the inputs of rule ``prefetch``): the tokenizer, the
        datasets' Parquet copies and the lm-eval record in the run's directory ``run_dir``, the model snapshots,
        released checkpoints and task files in the shared ``resources/`` (:mod:`unie.config.rundir`)."""
        run = lambda p: os.path.normpath(os.path.join(run_dir, p))  # noqa: E731
        return {
            "tokenizer": [run("resources/tokenizer")] if self.tokenizer else [],
            "datasets": [run(f"resources/raw/{d}/{s}.parquet") for d, s in self.datasets],
            "models": [f"resources/hf/{n}" for n in self.models],
            "released": [f"resources/released/{n}" for n in self.released],
            "task_files": [f"resources/paper_tasks/{t}/{f}" for t, f in self.task_files],
            "lmeval_tasks": [run(LMEVAL_RECORD)] if self.lmeval_tasks else [],
        }


def _is_hub_name(path: str) -> bool:
    return not (path.startswith(("/", "./", "../", "~")) or Path(path).expanduser().exists())


def hf_models_read(config: dict) -> list[str]:
    """The names of ``config['hf_models']`` that ``all`` reads: Hugging Face Gen PPL evaluators, the Table 3 rows'
    and sweep curves' models and proxies (a name of ``dllm.models`` is trained, not downloaded)."""
    hf = config.get("hf_models", {})
    names = [ev["model"] for ev in config.get("genppl", {}).get("evaluators", {}).values() if ev.get("kind") == "hf"]
    dllm = config.get("dllm") or {}
    specs = list(dllm.get("rows", {}).values())
    specs += [c for s in dllm.get("sweeps", {}).get("sets", {}).values() for c in s.values()]
    names += [spec[role] for spec in specs for role in ("model", "proxy") if spec.get(role)]
    trained = set(dllm.get("models", {}))
    return [n for n in dict.fromkeys(names) if n in hf and n not in trained]


def lmeval_tasks_read(config: dict) -> list[str]:
    """lm-eval's built-in tasks that Table 3 and the sweeps run (``dllm.tasks.source: builtin``; the local tasks and
    the toy ones are written by the workflow)."""
    dllm = config.get("dllm") or {}
    tasks = dllm.get("tasks", {})
    if tasks.get("source", "toy") != "builtin":
        return []
    names = list(tasks.get("names", []))
    if dllm.get("sweeps", {}).get("task"):
        names.append(dllm["sweeps"]["task"])
    local = set(tasks.get("local", {}))
    return [t for t in dict.fromkeys(names) if t not in local]


def plan(config: dict) -> Plan:
    """What ``all`` downloads under ``config`` (a resolved config; module doc)."""
    from ..config.expand import released_models
    from ..models.released_sources import SOURCES

    tok = config.get("tokenizer", {})
    data = config.get("data", {})
    sources = released_models(config)
    return Plan(
        tokenizer=tok["path"] if tok.get("kind") == "hf" and _is_hub_name(str(tok.get("path", ""))) else None,
        datasets=tuple((d, s) for d, splits in (data.get("hf") or {}).items() for s in splits)
        if data.get("source") == "hf"
        else (),
        models={n: config["hf_models"][n] for n in hf_models_read(config)},
        released={n: s["hf_id"] for n, s in sources.items() if s.get("hf_id")},
        task_files=tuple(
            (t, f)
            for t, spec in ((config.get("dllm") or {}).get("tasks", {}).get("local") or {}).items()
            for f in spec["files"]
        ),
        lmeval_tasks=tuple(lmeval_tasks_read(config)),
        by_hand=tuple(
            {"name": n, "kind": s["kind"], "path": str(s["path"]), "identifier": SOURCES[s["kind"]].identifier}
            for n, s in sources.items()
            if s.get("path")
        ),
    )


def by_hand_lines(p: Plan, root=".") -> list[str]:
    """One line per checkpoint that must be placed by hand (published on Google Drive only): where it goes, what it
    is, and whether it is there."""
    out = []
    for item in p.by_hand:
        there = "present" if (Path(root) / item["path"]).exists() else "MISSING"
        out.append(f"place by hand: {item['path']} <- models.{item['name']}: {item['identifier']} [{there}]")
    return out


# ---------------------------------------------------------------------- lm-eval's built-in tasks
# what installs the Python packages lm-eval's tasks import (pyproject.toml: lm-eval's `math` extra, for
# minerva_math500's math_verify, antlr4-python3-runtime==4.11 and sympy)
TASK_PACKAGES_HINT = "install the paper extra: pip install -e '.[paper]'"


def missing_package(e: BaseException) -> str | None:
    """The Python module whose absence made loading fail: the name of a ``ModuleNotFoundError`` anywhere in the
    exception's chain (lm-eval re-raises its tasks' import errors with its own words, the original as the cause);
    ``antlr4-python3-runtime`` for lm-eval's version check of it (minerva_math)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ModuleNotFoundError) and e.name:
            return e.name.split(".")[0]
        if isinstance(e, AssertionError) and "antlr4-python3-runtime" in str(e):
            return "antlr4-python3-runtime==4.11"
        e = e.__cause__ or e.__context__
    return None


def load_lmeval_tasks(tasks, include_path=None, include_defaults: bool = True) -> dict:
    """Build each of lm-eval's ``tasks`` (which imports its Python helpers and loads its dataset: downloads it into
    ``HF_HOME``, or reads it from there offline); ``{task: {"dataset", "name", "docs"}}`` per leaf task.  An error
    names the task; a Python package the task imports and that is not installed is named with how to install it.
    ``include_path``/``include_defaults``: where the task definitions are (lm-eval's ``TaskManager``)."""
    from lm_eval.tasks import TaskManager

    tm = TaskManager(
        include_path=None if include_path is None else str(include_path), include_defaults=include_defaults
    )
    out = {}
    for spec in tasks:
        try:
            loaded = tm.load(spec)
            for name, task in loaded["tasks"].items():
                out[name] = {
                    "dataset": task.get_config("dataset_path"),
                    "name": task.get_config("dataset_name"),
                    "docs": len(task.eval_docs),
                }
        except Exception as e:  # noqa: BLE001 - one line per task, the cause kept
            package = missing_package(e)
            if package is not None:
                raise PrefetchError(
                    f"lm-eval task {spec!r} imports the Python package {package!r}, which is not "
                    f"installed here: {TASK_PACKAGES_HINT}"
                ) from None
            raise PrefetchError(
                f"lm-eval task {spec!r}: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
            ) from None
    return out


def _subprocess(command: str, args: dict, offline: bool, timeout: float = 3600) -> dict:
    """``python -m unie.pipeline.prefetch COMMAND ARGS.json OUT.json`` in a fresh process (offline: with
    :data:`OFFLINE_ENV`, which the Hugging Face libraries read when they are imported); its JSON answer."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="unie-prefetch-") as tmp:
        a, o = Path(tmp, "args.json"), Path(tmp, "out.json")
        a.write_text(json.dumps(args))
        env = {**os.environ, **(OFFLINE_ENV if offline else {})}
        r = subprocess.run(
            [sys.executable, "-m", "unie.pipeline.prefetch", command, str(a), str(o)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if not o.exists():
            raise PrefetchError(
                f"python -m unie.pipeline.prefetch {command} failed (status {r.returncode}): "
                f"{' '.join((r.stderr or r.stdout).split()[-60:])}"
            )
        return json.loads(o.read_text())


def fetch_lmeval_tasks(tasks, out_path, include_path=None, log=print, include_defaults: bool = True) -> dict:
    """Rule ``prefetch_lmeval``: load every task once (:func:`load_lmeval_tasks`, in a fresh process): from the hub
    when it answers, else from ``HF_HOME`` alone (offline at once, instead of a minute of retries per dataset);
    writes ``{task: {dataset, name, docs}}`` to ``out_path``.  A task that cannot be loaded is a
    :class:`PrefetchError` naming it (and, the hub unreachable, ``HF_HOME`` and how to fill it)."""
    from ..core.integrity import write_json
    from ..data.hub import hub_problem

    problem = hub_problem() if tasks else None
    res = _subprocess(
        "lmeval",
        {"tasks": list(tasks), "include_path": include_path, "include_defaults": include_defaults},
        offline=problem is not None,
    )
    if res["errors"]:
        hint = ""
        if problem is not None and not all(TASK_PACKAGES_HINT in e for e in res["errors"]):  # HF_HOME as it saw it
            hint = (
                f"; the Hugging Face Hub {problem} and the dataset is not in the cache (HF_HOME={res['hf_home']}):"
                f" run `snakemake prefetch` where the hub answers, with the same HF_HOME"
            )
        raise PrefetchError("; ".join(res["errors"]) + hint)
    for task, rec in res["tasks"].items():
        log(f"lm-eval task {task}: {rec['dataset']}{'/' + rec['name'] if rec['name'] else ''}, {rec['docs']} documents")
    write_json(res["tasks"], out_path, indent=1)
    return res["tasks"]


# ---------------------------------------------------------------------- the offline check
def _check_item(kind: str, path: str) -> str:
    """What one fetched file holds, read with the Hugging Face libraries offline; an exception when it does not
    load."""
    p = Path(path)
    if kind == "tokenizer":
        from ..data.tokenizer import load_tokenizer

        tok = load_tokenizer(p)
        return f"{tok.vocab_size} tokens"
    if kind == "datasets":
        import pyarrow.parquet as pq

        rows = pq.read_metadata(p).num_rows
        if rows < 1:
            raise ValueError("no rows")
        return f"{rows} documents"
    if kind == "models":
        from transformers import AutoConfig, AutoTokenizer

        from ..models.hf import check_remote_code_transformers, check_weights, read_config

        check_weights(p)
        auto_map = read_config(p).get("auto_map") or {}
        remote = bool(auto_map)
        if remote:  # the modeling code runs inside from_pretrained, in a GPU job: its transformers range, here
            check_remote_code_transformers(p)
        AutoConfig.from_pretrained(str(p), local_files_only=True, trust_remote_code=remote)
        tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True, trust_remote_code=remote)
        if not remote:
            return f"config, {len(tok)}-token tokenizer, weights"
        import transformers
        from transformers.dynamic_module_utils import get_class_from_dynamic_module

        # the remote modeling code imported under this transformers (not instantiated: no weights read)
        classes = sorted({ref for k, ref in auto_map.items() if k.startswith("AutoModel") and isinstance(ref, str)})
        for ref in classes:
            get_class_from_dynamic_module(ref, str(p), local_files_only=True)
        return (
            f"config, {len(tok)}-token tokenizer, weights, remote code ({', '.join(classes)}) imports under "
            f"transformers {transformers.__version__}"
        )
    if kind == "released":
        from ..models.released import read_hf_config

        cfg = read_hf_config(p, trust_remote_code=True)
        if not any((p / f).is_file() for f in ("model.safetensors", "pytorch_model.bin")):
            raise FileNotFoundError(f"{p}: no model.safetensors or pytorch_model.bin")
        return f"config.json ({cfg.get('vocab_size', cfg.get('tokens'))} outputs), weights"
    if kind == "task_files":
        if not p.is_file() or p.stat().st_size == 0:
            raise FileNotFoundError(f"{p} is missing or empty")
        return f"{p.stat().st_size} bytes"
    raise ValueError(f"unknown kind {kind!r}")


def _run_checks(files: dict, lmeval_tasks, include_path, include_defaults: bool = True) -> dict:
    """In the offline process: every file of ``files`` (kind -> paths) and every lm-eval task."""
    results, errors = [], []
    for kind, paths in files.items():
        if kind == "lmeval_tasks":
            continue
        for path in paths:
            try:
                results.append({"kind": kind, "path": path, "ok": _check_item(kind, path)})
            except Exception as e:  # noqa: BLE001 - reported, one line each
                errors.append(f"{path}: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
    if lmeval_tasks:
        try:
            for task, rec in load_lmeval_tasks(lmeval_tasks, include_path, include_defaults).items():
                results.append(
                    {
                        "kind": "lmeval_tasks",
                        "path": task,
                        "ok": f"{rec['dataset']}{'/' + rec['name'] if rec['name'] else ''}: {rec['docs']} "
                        "documents from HF_HOME",
                    }
                )
        except PrefetchError as e:
            errors.append(str(e))
    return {"results": results, "errors": errors}


def check_offline(p: Plan, files: dict | None = None, include_path=None, include_defaults: bool = True) -> list[dict]:
    """Every file of ``p`` (or ``files``: kind -> paths, as :meth:`Plan.files`) and every lm-eval task of ``p``
    opened in a fresh process with :data:`OFFLINE_ENV` (module doc); returns one record per item; a
    :class:`PrefetchError` naming each one that does not load."""
    res = _subprocess(
        "check",
        {
            "files": p.files() if files is None else files,
            "lmeval_tasks": list(p.lmeval_tasks),
            "include_path": include_path,
            "include_defaults": include_defaults,
        },
        offline=True,
    )
    if res["errors"]:
        raise PrefetchError("does not load offline: " + "; ".join(res["errors"]))
    return [{**r, "hf_home": res["hf_home"]} for r in res["results"]]


def report(p: Plan, checked: list[dict], root=".", hf_home: str | None = None) -> str:
    """The Markdown report of rule ``prefetch`` (``hf_home``: the cache the offline check read)."""
    lines = [
        "# Prefetch",
        "",
        f"Everything `all` downloads, fetched and then opened offline ({', '.join(OFFLINE_ENV)}"
        f" set), HF_HOME={hf_home}.",
        "",
        "| kind | what | offline check |",
        "|---|---|---|",
    ]
    lines += [f"| {c['kind']} | `{c['path']}` | {c['ok']} |" for c in checked]
    lines += ["", "## Placed by hand (published on Google Drive only)", ""]
    lines += [f"* {line}" for line in by_hand_lines(p, root)] or ["* none"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    """``python -m unie.pipeline.prefetch {lmeval|check} ARGS.json OUT.json`` (:func:`_subprocess`)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] not in ("lmeval", "check"):
        raise SystemExit("usage: python -m unie.pipeline.prefetch {lmeval|check} ARGS.json OUT.json")
    args = json.loads(Path(argv[1]).read_text())
    if argv[0] == "lmeval":
        try:
            out = {
                "tasks": load_lmeval_tasks(args["tasks"], args.get("include_path"), args.get("include_defaults", True)),
                "errors": [],
            }
        except PrefetchError as e:
            out = {"tasks": {}, "errors": [str(e)]}
    else:
        out = _run_checks(
            args["files"], args["lmeval_tasks"], args.get("include_path"), args.get("include_defaults", True)
        )
    from huggingface_hub import constants

    out["hf_home"] = constants.HF_HOME
    Path(argv[2]).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
