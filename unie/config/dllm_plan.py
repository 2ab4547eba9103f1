"""The DLLM half's job plan (``workflow/rules/dllm.smk``): the files each of its rules reads and the parameters it
passes, from the resolved config and the run's directory alone (no file is read).

Every path is in the run's directory (``{run_dir}/results/...``, as ``run_path`` in workflow/rules/common.smk
writes it) except the shared downloads: a Hugging Face checkpoint (``resources/hf/{name}``, the paper profile's
rows) and a local paper task's release files (``resources/paper_tasks/{task}/{file}``).

Jobs (config ``dllm.eval_job``, :class:`unie.config.settings.WorkflowSettings`):

* ``row`` (the default; the paper profile: hours per row on a GPU): one job per Table 3 row (rule ``dllm_eval``).
* ``model`` (the toy profiles, where a row is seconds and starting Python, torch and lm-eval costs ~4 s): one job
  per backbone model for all its rows in one process (rules ``dllm_eval_{model}``, :attr:`DllmPlan.eval_groups`),
  the backbone row before the rows compared with it.

A row's files are the same either way.  A sweep is two jobs in both: its lm-eval runs, every point in one process on
the configured threads beside other jobs (rule ``dllm_sweep_eval``: ``lmeval.json``), then their throughput (rule
``dllm_sweep``: ``points.json``): each scored pass's own, or, with ``dllm.timing.source: timed``, timed again by a job
that holds every core (:attr:`DllmPlan.sweeps_timed`).  Each job gets only the ``dllm`` keys it reads
(``*_KEYS``; a sweep's job only its own set of ``dllm.sweeps.sets``), so that a change to another row's, another
sweep's or a model's settings reruns nothing of it.
"""

from __future__ import annotations

import os

from ..dllm.rows import MAP_ORACLE as ORACLE
from ..dllm.rows import eval_groups, map_tree_grid, room_rows, selection_rows
from .settings import WorkflowSettings


# the `dllm` keys each kind of job reads
DATA_KEYS = ("pretrain_texts", "bpe_vocab_size", "decoding", "sft_length")  # and the tasks (less `average`)
EVAL_KEYS = ("tasks", "decoding", "energy", "batch_size", "include_default_tasks", "limit", "seed")
SWEEP_KEYS = ("decoding", "energy", "batch_size", "include_default_tasks", "limit", "seed", "sweeps")  # + tasks
TIMING_KEYS = (*SWEEP_KEYS, "timing")  # rule dllm_sweep's: a change to dllm.timing reruns no lm-eval
ROOM_KEYS = ("tasks", "decoding", "energy", "batch_size", "seed", "room")
MAP_KEYS = ("decoding", "energy", "batch_size", "seed", "map", "models")


class DllmPlan:
    """The DLLM half of one run: ``config`` the resolved config, ``run_dir`` the run's directory (``runs/<name>``),
    ``lmeval_record`` the record of lm-eval's built-in tasks in it (``unie.pipeline.prefetch.LMEVAL_RECORD``) when the
    rows read any (``dllm.tasks.source: builtin``; the paper profile: minerva_math500, gsm8k), else None: rule
    prefetch_lmeval (workflow/rules/prefetch.smk) loads each once on the submit host, its Python helpers and its
    dataset, and every lm-eval job reads its record, so a package that is not installed, or a dataset that is not in
    HF_HOME, stops the run there, before any GPU job starts."""

    def __init__(self, config: dict, run_dir: str, lmeval_record: str | None = None):
        self.run_dir = run_dir
        self.dllm = d = config.get("dllm", {})
        self.models = list(d.get("models", {}))  # trained here (rule dllm_train)
        self.rows = d.get("rows", {})
        # Table 3's rows; the appendix's full table (table_app_dllm_full) has the appendix-only ones too; the
        # selection-rule table (table_app_selection) has the selection_table rows with their backbones and Table 3's
        # energy rows
        self.full_rows = {n: r for n, r in self.rows.items() if not r.get("selection_table")}
        self.table3_rows = {n: r for n, r in self.full_rows.items() if not r.get("appendix_only")}
        self.selection_rows = selection_rows(d)
        tasks = d.get("tasks", {})
        self.toy_tasks = tasks.get("source", "toy") == "toy"
        # what the task files and the training data depend on (not which columns Table 3 averages)
        self.task_data = {k: v for k, v in tasks.items() if k != "average"}
        # paper profile: LiveCodeBench v2 (lm-eval lacks it), MBPP (offline)
        self.local_tasks = tasks.get("local", {})
        self.lmeval_read = {"lmeval_tasks": self.path(lmeval_record)} if lmeval_record else {}
        by_model = WorkflowSettings.from_config(config).dllm_eval_job == "model"
        self.eval_groups = eval_groups(self.rows) if by_model else {}  # every row in exactly one group
        self.row_jobs = [] if self.eval_groups else list(self.rows)  # rule dllm_eval's rows
        self.sweeps = list(d.get("sweeps", {}).get("sets", {}))
        self.room = room_rows(self.rows) if d.get("room") else {}  # backbone -> its Algorithm 3 rows
        self.map = d.get("map") or {}
        self.map_jobs = [*self.map.get("backbones", {}), "proxies"] if self.map else []
        self.map_backbones = list(self.map.get("backbones", {})) if self.map else []
        self.map_tree_names = list(map_tree_grid(d)) if self.map else []  # each backbone's trees, one job each

    def path(self, path: str) -> str:
        """``path`` in the run's directory (``run_path`` of workflow/rules/common.smk)."""
        return f"{self.run_dir}/{path}"

    # --- tasks and training ---------------------------------------------------------------------------------------

    def task_yamls(self) -> list[str]:
        """The toy tasks' lm-eval YAMLs (rule dllm_tasks)."""
        return [self.path(f"resources/dllm/tasks/{t}.yaml") for t in self.dllm.get("tasks", {}).get("names", [])]

    def local_task_yamls(self) -> list[str]:
        return [self.path(f"resources/dllm/local_tasks/{t}.yaml") for t in self.local_tasks]

    def local_task_files(self, task: str) -> list[str]:
        """A local paper task's release files (shared downloads, rule download_task_file)."""
        return [f"resources/paper_tasks/{task}/{f}" for f in self.local_tasks[task]["files"]]

    def local_task_params(self) -> dict:
        return {t: {**spec, "files": self.local_task_files(t)} for t, spec in self.local_tasks.items()}

    def data_params(self) -> dict:
        """Only what the training data depend on (a model's training settings must not rebuild the data)."""
        return {"tasks": self.task_data, **{k: self.dllm.get(k) for k in DATA_KEYS}}

    def model_path(self, name: str) -> str:
        """A row's model or proxy: trained here (a name of ``dllm.models``), else a Hugging Face checkpoint."""
        if name in self.models:
            return self.path(f"results/dllm/models/{name}/model.safetensors")
        return f"resources/hf/{name}"

    def init_inputs(self, dmodel: str) -> dict:
        """What a DLLM-half model starts from (``init_from``): another of them, a DLM-half model, or nothing."""
        init = self.dllm["models"][dmodel].get("init_from")
        if not init:
            return {}
        if init in self.models:
            return {"init": self.model_path(init)}
        return {
            "init": self.path(f"results/models/{init}/model.safetensors"),
            "init_tokenizer": self.path("resources/tokenizer"),
        }

    # --- Table 3's rows --------------------------------------------------------------------------------------------

    def _task_inputs(self) -> dict:
        out = {"tasks": self.task_yamls()} if self.toy_tasks else dict(self.lmeval_read)
        if self.local_tasks:
            out["local_tasks"] = self.local_task_yamls()
        return out

    def row_file(self, row: str, kind: str = "results") -> str:
        """A row's ``results``, ``throughput`` or ``effect`` record (rule dllm_eval)."""
        return self.path(f"results/dllm/rows/{row}/{kind}.json")

    def row_outputs(self, rows, kind: str) -> list[str]:
        return [self.row_file(r, kind) for r in rows]

    def row_inputs(self, name: str) -> dict:
        """The files a Table 3 row reads: the tasks, its model (and proxy), its backbone row's results
        (``delta_to``: effect.json compares the row with its backbone on the same items)."""
        row = self.rows[name]
        out = self._task_inputs()
        for role in ("model", "proxy"):
            if row.get(role):
                out[role] = self.model_path(row[role])
        if row.get("delta_to"):
            out["base"] = self.row_file(row["delta_to"])
        return out

    def group_inputs(self, rows) -> dict:
        """The files of one job for ``rows`` (rules dllm_eval_{model}): the rows' files, less the results of the rows
        it writes itself."""
        return {
            f"{name}_{k}": v
            for name in rows
            for k, v in self.row_inputs(name).items()
            if not (k == "base" and self.rows[name]["delta_to"] in rows)
        }

    def eval_params(self, rows) -> dict:
        """A job's rows (name -> spec), each with the files it reads, and the shared settings they read."""
        return {
            "rows": {n: self.rows[n] for n in rows},
            "inputs": {n: self.row_inputs(n) for n in rows},
            "dllm": {k: self.dllm.get(k) for k in EVAL_KEYS},
        }

    # --- sweeps (Figure 4, the appendix's k and w tables) ----------------------------------------------------------

    def sweep_file(self, sweep: str) -> str:
        """A sweep's ``points.json`` (rule dllm_sweep), which the tables and Figure 4 read."""
        return self.path(f"results/dllm/sweeps/{sweep}/points.json")

    def sweep_inputs(self, sweep: str) -> dict:
        out = self._task_inputs()
        for curve, spec in self.dllm["sweeps"]["sets"][sweep].items():
            for role in ("model", "proxy"):
                if spec.get(role):
                    out[f"{curve}_{role}"] = self.model_path(spec[role])
        return out

    def sweep_params(self, sweep: str, timed: bool = False) -> dict:
        """The settings a sweep's job reads: its lm-eval runs' (rule dllm_sweep_eval) or, ``timed``, its timing's (rule
        dllm_sweep: ``dllm.timing`` too); of ``dllm.sweeps.sets`` only its own set."""
        d = {"tasks": self.task_data, **{k: self.dllm.get(k) for k in (TIMING_KEYS if timed else SWEEP_KEYS)}}
        d["sweeps"] = {**d["sweeps"], "sets": {sweep: d["sweeps"]["sets"][sweep]}}
        return d

    @property
    def sweeps_timed(self) -> bool:
        """Whether rule dllm_sweep times the points again holding every core (``dllm.timing.source: timed``) or takes
        the scored lm-eval pass's own tokens/s, on one core (the default, ``unie.pipeline.dllm_runs.SweepTiming``,
        whose ``source`` defaults to ``lm_eval``; a test checks the two agree)."""
        return (self.dllm.get("timing") or {}).get("source") == "timed"

    def sweep_caption(self, sweep: str) -> str:
        """The caption of an appendix k/w table: what is fixed and what varies."""
        parts = []
        for curve, spec in self.dllm["sweeps"]["sets"][sweep].items():
            ((key, values),) = spec["vary"].items()
            fixed = {**self.dllm.get("energy", {}), **spec.get("options", {})}
            fixed = ", ".join(f"{k}={v}" for k, v in fixed.items() if k != key)
            parts.append(f"{spec.get('label', curve)} on {spec['model']} ({fixed}), {key} varied")
        return (
            f"{self.dllm['sweeps']['task']}: " + "; ".join(parts) + f". Accuracy $\\pm$ its s.e. (lm-eval), "
            f"throughput in generated tokens/s (batch {self.dllm['batch_size']}, warm-up and loading excluded)."
        )

    # --- the room of Algorithm 3's rows (dllm.room) ----------------------------------------------------------------

    def room_file(self, backbone: str) -> str:
        return self.path(f"results/dllm/room/{backbone}.json")

    def room_inputs(self, backbone: str) -> dict:
        names = [backbone, *self.room[backbone]]
        out = {f"{n}_{k}": v for n in names for k, v in self.row_inputs(n).items() if k != "base"}
        out.update({f"{n}_results": self.row_file(n) for n in names})
        return out

    def room_params(self, backbone: str) -> dict:
        rows = self.room[backbone]
        return {
            "backbone": backbone,
            "rows": {n: self.rows[n] for n in rows},
            "inputs": {n: self.row_inputs(n) for n in rows},
            "dllm": {k: self.dllm.get(k) for k in ROOM_KEYS},
        }

    def room_files(self, rows) -> list[str]:
        """The room records of the backbones of ``rows`` (a table's rows)."""
        return [self.room_file(b) for b in self.room if b in rows or any(r in rows for r in self.room[b])]

    def table_inputs(self, rows: dict) -> dict:
        """A Table 3-like table of ``rows``: their results; a decoder row's paired s.e. is in its effect.json, its room
        (ceiling, floor) in its backbone's room record."""
        return {
            "results": self.row_outputs(rows, "results"),
            "effects": self.row_outputs([r for r in rows if rows[r].get("delta_to")], "effect"),
            "rooms": self.room_files(rows),
        }

    # --- the proxy-strength map (dllm.map) -------------------------------------------------------------------------

    def map_file(self, job: str) -> str:
        """The map job's record the table and figure read (a backbone's: its lm-eval points with its trees)."""
        return self.path(f"results/dllm/map/{job}/points.json")

    def map_points_file(self, job: str) -> str:
        """What rule ``dllm_map_{job}`` writes: its lm-eval points (a backbone's ``lmeval.json``, read by its trees;
        the proxies' ``points.json``)."""
        return self.map_file(job) if job == "proxies" else self.path(f"results/dllm/map/{job}/lmeval.json")

    def map_tree_file(self, backbone: str, tree: str) -> str:
        return self.path(f"results/dllm/map/{backbone}/trees/{tree}.json")

    def map_tree_files(self, backbone: str) -> list[str]:
        return [self.map_tree_file(backbone, t) for t in self.map_tree_names]

    def map_model_path(self, name: str) -> str:
        if name == ORACLE:
            return self.path("resources/dllm/oracle/oracle.json")
        return self.path(f"results/dllm/models/{name}/model.safetensors")

    def map_models(self, job: str) -> list[str]:
        """The models of one map job: the backbone and every proxy of the map, or (``proxies``) the ARs alone."""
        proxies = [p["model"] for p in self.map["proxies"].values()]
        if job == "proxies":
            return list(dict.fromkeys(m for m in proxies if m != ORACLE))
        return list(dict.fromkeys([self.map["backbones"][job]["model"], *proxies]))

    def map_task_yamls(self) -> list[str]:
        """The map's lm-eval tasks: its own (rule dllm_map_tasks: ``dllm.map.items`` test items per task, Table 3's
        first) or, without ``items``, Table 3's (rule dllm_tasks)."""
        if self.map.get("items"):
            return [self.path(f"resources/dllm/map_tasks/{t}.yaml") for t in self.map["tasks"]]
        return self.task_yamls()

    def map_task_params(self) -> dict:
        """What rule dllm_map_tasks writes: the map's tasks, ``items`` test documents each, Table 3's seed."""
        return {"names": list(self.map["tasks"]), "n_test": self.map["items"], "seed": self.task_data["seed"]}

    def map_inputs(self, job: str) -> dict:
        return {"tasks": self.map_task_yamls(), **{f"model_{m}": self.map_model_path(m) for m in self.map_models(job)}}

    def map_params(self, job: str) -> dict:
        return {
            "job": job,
            "models": {m: os.path.dirname(self.map_model_path(m)) for m in self.map_models(job)},
            "dllm": {k: self.dllm.get(k) for k in MAP_KEYS},
        }
