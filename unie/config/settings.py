"""Workflow-level settings, parsed once from the resolved configuration into frozen dataclasses.

Each optional setting has its default here and nowhere else: consumers read fields (``LmEvalSettings
.from_config(config).allow_code_execution``) instead of ``config[...].get(key, default)``.  ``from_config`` goes
through :func:`unie.core.options.from_dict`, so an unknown key or a wrong type names its config key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..core.options import from_dict


@dataclass(frozen=True)
class EvaluatorSettings:
    """One Gen PPL evaluator (config ``genppl.evaluators.<name>``, a Table 2 column)."""

    kind: Literal["exact", "model", "hf"]
    label: str
    model: str | None = None  # kind model: a key of `models`; kind hf: a key of `hf_models`
    max_length: int = 1024  # hf: samples are re-encoded and truncated to this many evaluator tokens (MDLM: 1024)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # hf: the evaluator's weights (MDLM/EDLM: float32)
    batch_size: int = 8  # hf: texts per forward pass

    @classmethod
    def from_config(cls, config: dict, name: str) -> "EvaluatorSettings":
        return from_dict(cls, config["genppl"]["evaluators"][name], f"config key 'genppl.evaluators.{name}'")


@dataclass(frozen=True)
class LmEvalSettings:
    """How lm-eval runs the DLLM half's rows and sweeps (config ``dllm``: its workflow-level scalars)."""

    batch_size: int
    seed: int = 0
    include_default_tasks: bool = False  # index lm-eval's built-in tasks (paper) or only the local ones (toy)
    limit: int | None = None  # documents per task (None: all)
    task_source: Literal["toy", "builtin"] = "toy"  # dllm.tasks.source
    allow_code_execution: bool = False  # dllm.tasks.allow_code_execution: lm-eval's --confirm_run_unsafe_code

    @classmethod
    def from_config(cls, config: dict) -> "LmEvalSettings":
        return cls.from_dllm(config["dllm"])

    @classmethod
    def from_dllm(cls, d: dict) -> "LmEvalSettings":
        """From the ``dllm`` section alone (what the DLLM rules receive as a parameter)."""
        tasks = d.get("tasks", {})
        picked = {k: d[k] for k in ("batch_size", "seed", "include_default_tasks", "limit") if k in d}
        picked.update(
            {f"task_{k}" if k == "source" else k: tasks[k] for k in ("source", "allow_code_execution") if k in tasks}
        )
        return from_dict(cls, picked, "config key 'dllm'")


@dataclass(frozen=True)
class WorkflowSettings:
    """Workflow-level switches read by the rules."""

    # sampling.job: one job per (run, step count), per run, or per table/figure for all its runs
    sampling_job: Literal["step", "run", "table"] = "step"
    dllm_eval_job: Literal["row", "model"] = "row"  # dllm.eval_job: one lm-eval job per Table 3 row or per model
    insert_eos: bool = True  # data.insert_eos: an EOS after every document (MDLM wrapping)
    chunk_specials: bool = True  # data.chunk_specials: chunks [BOS] + ... + [EOS]
    precision: Literal["fp32", "tf32", "bf16"] = "fp32"  # precision: the network passes on an accelerator
    device: str = "cpu"  # device

    @classmethod
    def from_config(cls, config: dict) -> "WorkflowSettings":
        picked = {
            "sampling_job": config["sampling"].get("job"),
            "dllm_eval_job": config.get("dllm", {}).get("eval_job"),
        }
        picked.update({k: config["data"].get(k) for k in ("insert_eos", "chunk_specials")})
        picked.update({k: config.get(k) for k in ("precision", "device")})
        return from_dict(cls, {k: v for k, v in picked.items() if v is not None}, "config")

    @property
    def job_precision(self) -> str:
        """The precision every job that runs a network runs in (docs/precision.md): ``precision`` on an accelerator,
        ``fp32`` on a CPU whatever the key says (:func:`unie.core.precision.for_device`).  The one place the workflow
        reads it: ``workflow/rules/common.smk`` passes it to each such rule (``PRECISION``), its script reads that
        (:func:`unie.pipeline.rule.job_precision`)."""
        from ..core.precision import for_device

        return for_device(self.precision, self.device)


# the rules that read the network (the downloads): local rules on the submit host, or jobs on the site's download
# partition (slurm_partitions.download); every other cluster job reads only what they fetched
DOWNLOAD_RULES = (
    "download",
    "tokenizer",
    "download_hf_model",
    "download_released",
    "download_task_file",
    "prefetch_lmeval",
)


@dataclass(frozen=True)
class ClusterSettings:
    """What a Slurm site sets beyond its partitions (config ``cluster``; docs/paper-profile.md)."""

    # how a job asks for its GPUs, one form only: `gpus` -> sbatch --gpus=[model:]N (the executor plugin's `gpu`
    # resource); `gres` -> --gres=gpu:[model:]N (its `gres` resource; the job step still gets srun --gpus=N)
    gpu_request: Literal["gpus", "gres"] = "gpus"
    gpu_model: str | None = None  # a GPU type the site names (a100, h100): --gpus=a100:N or --gres=gpu:a100:N
    hf_home: str | None = None  # HF_HOME of the submit host and every job (None: the environment's)
    offline: bool = True  # jobs other than the downloads run with the Hugging Face libraries offline

    @classmethod
    def from_config(cls, config: dict) -> "ClusterSettings":
        return from_dict(cls, config.get("cluster") or {}, "config key 'cluster'")

    def gpu_resources(self, n: int) -> dict:
        """A job's GPU request for ``n`` GPUs as the executor plugin's resources, in this site's one form (never
        both ``--gres`` and ``--gpus``): ``{"gpu": n}`` (+ ``gpu_model``), or ``{"gres": "gpu:[model:]n", "gpus":
        n}`` (``gpus``, plural, is read by the job step only: ``srun --gpus=n`` inside the allocation)."""
        if self.gpu_request == "gres":
            if n <= 0:
                return {}
            return {"gres": f"gpu:{self.gpu_model + ':' if self.gpu_model else ''}{n}", "gpus": n}
        return {"gpu": n, **({"gpu_model": self.gpu_model} if self.gpu_model and n > 0 else {})}

    def job_environment(self, rules, remote: bool) -> dict:
        """The variables this site sets for a process that runs ``rules`` (their names): ``HF_HOME`` when set;
        inside a cluster job (``remote``) that is not a download, the offline variables too
        (:data:`unie.data.hub.OFFLINE_ENV`)."""
        from ..data.hub import OFFLINE_ENV

        env = {"HF_HOME": self.hf_home} if self.hf_home else {}
        if remote and self.offline and rules and not set(rules) & set(DOWNLOAD_RULES):
            env.update(OFFLINE_ENV)
        return env


def job_gpus(resources) -> int:
    """The GPUs a job asked for, in either request form (:meth:`ClusterSettings.gpu_resources`)."""
    return int(resources.get("gpu") or resources.get("gpus") or 0)


__all__ = ["ClusterSettings", "DOWNLOAD_RULES", "EvaluatorSettings", "LmEvalSettings", "WorkflowSettings", "job_gpus"]


def runtime_at(minutes: int, attempt: int, cap: int | None) -> int:
    """The Slurm runtime (minutes) of a job's ``attempt``: ``minutes`` x ``attempt`` (a job resubmitted after its
    time limit asks for more; a training job resumes from its checkpoint), never above ``cap`` (``max_runtime``:
    the partition's time limit, above which a job would stay pending forever)."""
    value = int(minutes) * max(1, int(attempt))
    return value if cap is None else min(value, int(cap))
