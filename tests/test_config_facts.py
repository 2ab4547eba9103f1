"""Each config fact once: what a model is lives in the grid (config/experiments.yaml), a profile holds its sizes and
sources, the toy world's own settings are one base of the two toy profiles (config/toy-world.yaml), gpu-smoke is an
overlay of smoke (`base:`), and the schema's enums are the code's constants.

``python tests/test_config_facts.py`` prints the repetition counts (settings written identically in all four
profiles and in two or more; gpu-smoke's settings also written in smoke; the repeated toy architecture)."""

from __future__ import annotations

import collections
import json
import re
import typing
from pathlib import Path

import pytest
import yaml

from unie.config.profile import load_profile, profile_chain, resolve_config
from unie.core.options import ConfigError

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config"
PROFILES = ("config", "smoke", "gpu-smoke", "paper")
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


# ---------------------------------------------------------------------------------------- repetition counts
def settings(path: Path) -> set[tuple[str, str]]:
    """A profile file's settings as written (not its base's): ``(dotted key, value as JSON)`` per leaf; a list, a
    scalar or an empty mapping is one leaf; ``base:`` and ``drop:`` are not settings."""
    doc = {k: v for k, v in (yaml.safe_load(path.read_text()) or {}).items() if k not in ("base", "drop")}

    def leaves(node, keys=()):
        if isinstance(node, dict) and node:
            for k, v in node.items():
                yield from leaves(v, (*keys, str(k)))
        else:
            yield ".".join(keys), json.dumps(node, sort_keys=True, default=str)

    return set(leaves(doc))


def repetition() -> dict[str, int]:
    files = {p: settings(CONFIG / f"{p}.yaml") for p in PROFILES}
    count = collections.Counter(s for written in files.values() for s in written)
    arch = re.compile(r"\{d_model: \d+, n_layers: \d+, n_heads: \d+\}")
    return {
        "identical in all four": sum(n == len(PROFILES) for n in count.values()),
        "identical in two or more": sum(n >= 2 for n in count.values()),
        "gpu-smoke settings": len(files["gpu-smoke"]),
        "gpu-smoke settings also in smoke": len(files["gpu-smoke"] & files["smoke"]),
        "arch written most often in one profile": max(
            max(collections.Counter(arch.findall((CONFIG / f"{p}.yaml").read_text())).values(), default=0)
            for p in PROFILES
        ),
    }


def test_no_setting_is_written_in_all_four_profiles():
    counts = repetition()
    assert counts["identical in all four"] == 0, counts
    # 163 before the grid held the models' definitions and gpu-smoke its base, 68 before the toy world's settings had
    # their own base (config/toy-world.yaml) and gpu-smoke kept smoke's trained models; what stays is sizes that two
    # profiles happen to share (a learning rate, a batch size) and where they run (device, threads)
    assert counts["identical in two or more"] < 40, counts
    assert counts["gpu-smoke settings also in smoke"] == 0, counts
    assert counts["arch written most often in one profile"] == 1, counts  # YAML anchors: &arch, then *arch


def test_no_file_repeats_a_setting_of_its_base():
    """A profile written over a base (config.yaml and smoke.yaml over toy-world.yaml, gpu-smoke.yaml over smoke.yaml
    and so over toy-world.yaml) writes none of the base's settings again with the same value."""
    for p in PROFILES:
        chain = [f for f, _ in profile_chain(CONFIG / f"{p}.yaml")]
        own = settings(chain[-1])
        for base in chain[:-1]:
            assert not own & settings(base), (p, base.name, sorted(own & settings(base)))
    assert [f.name for f, _ in profile_chain(CONFIG / "gpu-smoke.yaml")] == [
        "toy-world.yaml",
        "smoke.yaml",
        "gpu-smoke.yaml",
    ]
    assert [f.name for f, _ in profile_chain(CONFIG / "config.yaml")] == ["toy-world.yaml", "config.yaml"]
    assert len(profile_chain(CONFIG / "paper.yaml")) == 1  # real data: none of the toy world's settings


def test_the_toy_world_base_is_not_a_profile():
    """config/toy-world.yaml names no profile (no run directory is named after it) and holds no sizes; both toy
    profiles resolve to its values."""
    from unie.config.rundir import profile_files_by_name

    assert "toy-world.yaml" not in {f.name for f in profile_files_by_name().values()}
    base = yaml.safe_load((CONFIG / "toy-world.yaml").read_text())
    assert "profile" not in base and "models" not in base
    for p in ("config", "smoke", "gpu-smoke"):
        resolved = resolve_config([CONFIG / f"{p}.yaml"])
        assert resolved["data"]["source"] == "toy" and resolved["tokenizer"] == {"kind": "word"}, p
        assert resolved["figures"]["fig3_tradeoff"]["evaluator"] == "exact", p


# ---------------------------------------------------------------------------------------- model definitions
def test_a_profile_names_the_models_it_builds_in_its_order():
    toy, paper, gpu = (resolve_config([CONFIG / f"{p}.yaml"]) for p in ("config", "paper", "gpu-smoke"))
    grid = yaml.safe_load((CONFIG / "experiments.yaml").read_text())
    assert list(toy["models"]) == list(yaml.safe_load((CONFIG / "config.yaml").read_text())["models"])
    assert list(gpu["models"])[:5] == ["mdlm", "ar", "sedd", "duo", "bd3lm"]  # its own order, not smoke's
    assert "ar_long" in grid["models"] and "ar_long" not in paper["models"]  # a definition no profile names: not built
    assert paper["dllm"]["models"] == {}
    # the definition's keys first, the profile's added (its sizes or source; options added to the definition's)
    assert toy["models"]["edlm_nce"] == {**grid["models"]["edlm_nce"], **toy["models"]["edlm_nce"]}
    assert paper["models"]["ar_masked"]["options"] == {"mask_inputs": True, "chunk_bos": True}
    assert toy["dllm"]["models"]["dream"]["init_from"] == "ar_large"  # a parent that differs: the profile's


@pytest.mark.parametrize(
    "models, key",
    [
        ({"models": {"mdlm": {"method": "mdlm"}}}, "models.mdlm.method"),
        ({"models": {"ar_masked": {"options": {"mask_inputs": False}}}}, "models.ar_masked.options.mask_inputs"),
        ({"dllm": {"models": {"llada": {"tokenizer": "word"}}}}, "dllm.models.llada.tokenizer"),
    ],
)
def test_a_profile_changing_a_model_definition_is_refused(tmp_path, models, key):
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(models))
    with pytest.raises(ConfigError, match=f"p.yaml: config key '{re.escape(key)}' is set by the model's definition"):
        resolve_config([CONFIG / "smoke.yaml", f])


# ---------------------------------------------------------------------------------------- base profiles
def test_gpu_smoke_is_smoke_with_its_own_settings():
    smoke, gpu = load_profile(CONFIG / "smoke.yaml"), load_profile(CONFIG / "gpu-smoke.yaml")
    assert (gpu["profile"], gpu["device"], gpu["precision"]) == ("gpu-smoke", "cuda", "bf16")
    for key in ("data", "tokenizer", "ppl", "genppl", "figures", "bench"):
        assert gpu[key] == smoke[key], key
    assert "eval_job" not in gpu["dllm"] and "proxy_masked" not in gpu["dllm"]["models"]  # drop:
    assert "arch" not in gpu["models"]["mdlm"]  # its models are its own
    rows = gpu["exclude"]["dllm"]["rows"]  # its exclude adds to smoke's
    assert set(rows) == set(smoke["exclude"]["dllm"]["rows"]) | {"dream_uni_masked", "llada_rerank"}
    assert gpu["exclude"]["dllm"]["map"] is True


def _write(tmp_path, **files):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_a_base_profile_is_merged_under_the_file(tmp_path):
    d = _write(
        tmp_path,
        **{
            "a.yaml": "profile: a\nsampling: {n_samples: 8, batch_size: 8}\nexclude: {dllm: {rows: [llada_apd]}}\n",
            "b.yaml": "base: a.yaml\nprofile: b\nsampling: {n_samples: 4}\nexclude: {dllm: {rows: [dream_apd]}}\n",
            "c.yaml": "base: b.yaml\ndrop: {sampling: [batch_size]}\nseed: 3\n",
        },
    )
    c = load_profile(d / "c.yaml")
    assert c["profile"] == "b" and c["seed"] == 3 and c["sampling"] == {"n_samples": 4}
    assert c["exclude"] == {"dllm": {"rows": ["llada_apd", "dream_apd"]}}


@pytest.mark.parametrize(
    "files, message",
    [
        ({"p.yaml": "base: nope.yaml\n"}, "p.yaml: config key 'base': no profile file"),
        ({"p.yaml": "base: q.yaml\n", "q.yaml": "base: p.yaml\n"}, "the profiles are each other's base"),
        ({"p.yaml": "base: p.yaml\n"}, "the profiles are each other's base"),
        ({"p.yaml": "drop: {seed: true}\n"}, "p.yaml: config key 'drop': drops settings of a base profile"),
        ({"p.yaml": "base: [q.yaml]\n"}, "config key 'base': expected a profile file name"),
        ({"p.yaml": "base: q.yaml\ndrop: [threads]\n", "q.yaml": "seed: 1\n"}, "drop: 'threads' is not in the base"),
    ],
)
def test_a_bad_base_is_one_line(tmp_path, files, message):
    d = _write(tmp_path, **files)
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve_config([d / "p.yaml"])


def test_a_based_profile_names_its_models_in_its_order(tmp_path):
    """The models a based file writes come first, in its order (``{}``: the base's model as it is), then the base's
    others; a base not beside the file is one of config/'s."""
    d = _write(
        tmp_path,
        **{
            "a.yaml": "models: {m1: {train: {steps: 1}}, m2: {train: {steps: 2}}, m3: {train: {steps: 3}}}\n",
            "b.yaml": "base: a.yaml\nmodels: {m3: {}, m1: {train: {steps: 9}}}\n",
        },
    )
    assert load_profile(d / "b.yaml")["models"] == {
        "m3": {"train": {"steps": 3}},
        "m1": {"train": {"steps": 9}},
        "m2": {"train": {"steps": 2}},
    }
    (d / "mine.yaml").write_text("base: smoke.yaml\nseed: 3\n")  # beside no smoke.yaml: config/smoke.yaml
    assert load_profile(d / "mine.yaml") == {**load_profile(CONFIG / "smoke.yaml"), "seed": 3}


def test_a_key_from_the_base_is_reported_in_the_base_file(tmp_path):
    from unie.config.validate import workflow_config

    d = _write(tmp_path, **{"a.yaml": (CONFIG / "smoke.yaml").read_text().replace("n_mc: 2", "n_mc: 0")})
    (d / "b.yaml").write_text("base: a.yaml\nprofile: gpu-smoke\n")
    with pytest.raises(ConfigError, match=r"a\.yaml: config key 'ppl\.n_mc'"):
        workflow_config([d / "b.yaml"])


# ---------------------------------------------------------------------------------------- the schema's enums
def _enums(node, path=()):
    """``{dotted config path: enum}`` of the schema (``*`` for any key, ``[]`` for a list's items)."""
    out = {}
    if isinstance(node, dict):
        if "enum" in node:
            out[".".join(path)] = node["enum"]
        for key, value in node.items():
            if key == "properties":
                for name, sub in value.items():
                    out.update(_enums(sub, (*path, name)))
            elif key == "additionalProperties":
                out.update(_enums(value, (*path, "*")))
            elif key == "items":
                out.update(_enums(value, (*path, "[]")))
            elif key == "$defs":
                for name, sub in value.items():
                    out.update(_enums(sub, ("$defs", name)))
            elif key in ("oneOf", "anyOf", "allOf"):
                for sub in value:
                    out.update(_enums(sub, path))
    return out


def _literal(cls, field: str) -> tuple:
    return typing.get_args(typing.get_type_hints(cls)[field])


def _code_constants() -> dict[str, tuple[str, object]]:
    """Schema enum -> (``equal`` or ``subset``, the code's constant it repeats)."""
    from unie.config.settings import ClusterSettings, EvaluatorSettings, LmEvalSettings, WorkflowSettings
    from unie.core.precision import PRECISIONS
    from unie.core.registry import ENERGIES
    from unie.dllm.decoder import KINDS
    from unie.energy.energies import AR_CONTEXTS
    from unie.eval.local_tasks import LOCAL_KINDS
    from unie.models.hf import STYLES
    from unie.models.released import SOURCES
    from unie.models.standins import FORMATS
    from unie.pipeline.dllm_runs import SWEEP_SOURCES

    import unie.energy.energies  # noqa: F401 - registers the energies

    out = {
        "precision": ("equal", PRECISIONS),
        "bench.paper_scale.precisions.[]": ("equal", PRECISIONS),
        "dllm.rows.*.kind": ("equal", KINDS),
        "dllm.sweeps.sets.*.*.kind": ("equal", KINDS),
        "dllm.rows.*.style": ("equal", STYLES),
        "dllm.sweeps.sets.*.*.style": ("equal", STYLES),
        "figures.fig2_ablation.contexts.[]": ("equal", AR_CONTEXTS),
        "figures.fig3_tradeoff.ar_context": ("subset", AR_CONTEXTS),
        "figures.fig3_tradeoff.edlm.ar_context": ("subset", AR_CONTEXTS),
        "figures.case_studies.ar_context": ("subset", AR_CONTEXTS),
        "bench.ar_context": ("subset", AR_CONTEXTS),
        "likelihood.*.ar_context": ("subset", (*AR_CONTEXTS, None)),
        "likelihood.*.energy": ("subset", tuple(ENERGIES)),
        "models.*.source.kind": ("equal", tuple(SOURCES)),
        "models.*.source.standin": ("equal", tuple({f for fmts in FORMATS.values() for f in fmts})),
        "dllm.tasks.local.*.kind": ("equal", tuple(LOCAL_KINDS)),
        "dllm.eval_job": ("equal", _literal(WorkflowSettings, "dllm_eval_job")),
        "sampling.job": ("equal", _literal(WorkflowSettings, "sampling_job")),
        "genppl.evaluators.*.kind": ("equal", _literal(EvaluatorSettings, "kind")),
        "genppl.evaluators.*.dtype": ("equal", _literal(EvaluatorSettings, "dtype")),
        "dllm.tasks.source": ("equal", _literal(LmEvalSettings, "task_source")),
        "cluster.gpu_request": ("equal", _literal(ClusterSettings, "gpu_request")),
        "dllm.timing.source": ("equal", SWEEP_SOURCES),
    }
    return out


# enums the code keeps no constant of (the schema is their one home), each with where the code reads it
SCHEMA_ONLY = {
    "$defs.hf_dataset.format": "unie.data.hub reads each format by name",
    "profile": "the profile names (config/*.yaml); unie.config.rundir names run directories after them",
    "data.source": "toy or hf: the data rules branch on it",
    "tokenizer.kind": "word or hf: unie.data tokenizers",
    "dllm.models.*.tokenizer": "word or bpe: the DLLM half's two tokenizers",
    "dllm.models.*.data": "pretrain, sft or mix: unie.pipeline's DLLM data",
    "ppl.split": "a split of the data",
    "genppl.eos_rule": "all or first: unie.eval.genppl",
}


def test_schema_enums_are_the_code_constants():
    """Where the schema lists a code constant's values, they are that constant's (``equal``) or some of them
    (``subset``: a setting that takes only some, e.g. the AR contexts one figure draws); every other enum is
    listed in SCHEMA_ONLY with where the code reads it, so a new enum is not left unchecked."""
    enums = _enums(yaml.safe_load(SCHEMA.read_text()))
    constants = _code_constants()
    for path, values in enums.items():
        if path in constants:
            how, constant = constants[path]
            if how == "equal":
                assert sorted(map(str, values)) == sorted(map(str, constant)), (path, values, constant)
            else:
                assert set(values) <= set(constant), (path, values, constant)
        else:
            assert path in SCHEMA_ONLY, f"schema enum {path} {values}: name its code constant or add it to SCHEMA_ONLY"
    assert set(constants) <= set(enums), set(constants) - set(enums)


if __name__ == "__main__":
    for name, n in repetition().items():
        print(f"{name}: {n}")
