"""The sampling job spec (:class:`unie.pipeline.sample.SampleJob`) through sampling, scoring and timing, on a tiny
untrained checkpoint (seconds)."""

from __future__ import annotations

import json

import pytest

from conftest import make_net
from unie.data.tokens import load_tokens
from unie.models.checkpoint import save_model
from unie.pipeline.sample import SampleJob, read_sample_meta, run_sampler, sample_and_score, sampling_seed
from unie.pipeline.timing_runs import time_run

SPEC = {
    "sampler": "energy",
    "models": {"dlm": "mdlm", "proxy": "ar"},
    "options": {"energy": "ind", "K": 2, "w": 1.0, "ar_context": "teacher_forced"},
}


@pytest.fixture(scope="module")
def job(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("job")
    tok.save(root / "tok")
    save_model(make_net(tok.vocab_size, max_len=8), root / "mdlm", "mdlm", tok.info())
    save_model(make_net(tok.vocab_size, max_len=8, causal=True, seed=1), root / "ar", "ar", tok.info())
    inputs = {
        "tokenizer": str(root / "tok"),
        "dlm": [str(root / "mdlm" / "model.safetensors")],
        "proxy": [str(root / "ar" / "model.safetensors")],
    }
    return SampleJob.from_spec("edlm_ar", SPEC, inputs, seq_len=8, n_samples=5, batch_size=2, domain="owt", seed=3)


def test_from_spec_names_every_field(job):
    assert (job.run, job.sampler, job.models, job.options) == ("edlm_ar", "energy", SPEC["models"], SPEC["options"])
    assert (job.seq_len, job.n_samples, job.batch_size, job.domain, job.seed, job.device) == (8, 5, 2, "owt", 3, "cpu")
    assert job.seed_at(4) == sampling_seed(3, "edlm_ar", 4)
    assert job.sampler_options().K == 2
    with pytest.raises(TypeError):  # no default domain: the exact proxy is never built for a silent one
        SampleJob.from_spec("r", SPEC, {}, seq_len=8, n_samples=1, batch_size=1)


def test_one_job_per_run_equals_one_per_step_and_carries_the_identity(job, tmp_path):
    steps = [2, 4]
    samples = [tmp_path / f"steps{s}.parquet" for s in steps]
    genppl = [tmp_path / f"steps{s}.json" for s in steps]
    results = sample_and_score(
        job,
        steps,
        samples,
        genppl,
        evaluators={"exact": {"kind": "exact"}},
        eos_rule="all",
        evaluator_paths={},
        log=lambda *a: None,
    )
    alone = tmp_path / "alone.parquet"
    run_sampler(job, 4, alone, log=lambda *a: None)
    assert (load_tokens(alone) == load_tokens(samples[1])).all()
    meta = read_sample_meta(samples[0])
    assert list(meta)[:7] == ["run", "sampler", "steps", "seconds", "models", "options", "n_samples"]
    assert (meta["run"], meta["sampler"], meta["steps"], meta["models"], meta["n_samples"]) == (
        "edlm_ar",
        "energy",
        2,
        SPEC["models"],
        5,
    )
    assert json.loads(genppl[1].read_text())["sampling"]["steps"] == 4 and results[1]["n_samples"] == 5


def test_time_run_record(job):
    r = time_run(job, [2], warmup=0, repeats=1, threads=1, log=lambda *a: None)
    assert list(r)[:10] == [
        "run",
        "sampler",
        "models",
        "options",
        "seq_len",
        "threads",
        "device",
        "device_name",
        "torch",
        "points",
    ]  # then the timing checks: checks, flags, trusted
    assert list(r)[10:] == ["checks", "flags", "trusted"] and isinstance(r["points"][0]["trusted"], bool)
    assert (r["run"], r["models"], r["seq_len"], r["options"]["K"]) == ("edlm_ar", SPEC["models"], 8, 2)
    assert r["points"][0]["batch_size"] == 2 and r["points"][0]["steps"] == 2


def test_a_state_at_the_mask_id_is_recorded_for_decoding(job, tok, tmp_path):
    """A model whose process has a state at a blocked id (a released Duo's [PAD], our mask id) lets it through the
    finished-sample check, and the samples' metadata says how that id is written as text ("[PAD]", as upstream
    decodes it); without such a model the metadata has no such entry."""
    from unie.pipeline.sample import PAD_TEXT, load_models

    models = load_models(job, tok)
    plain = run_sampler(job, 2, tmp_path / "plain.parquet", log=lambda *a: None, models=models)
    assert "text_states" not in plain and "text_states" not in read_sample_meta(tmp_path / "plain.parquet")

    class PadOwner:  # what DuoDenoiser(pad_id=...) exposes
        extra_states = (tok.mask_id,)

    meta = run_sampler(job, 2, tmp_path / "pad.parquet", log=lambda *a: None, models={**models, "pad": PadOwner()})
    assert (
        meta["text_states"] == {str(tok.mask_id): PAD_TEXT} == read_sample_meta(tmp_path / "pad.parquet")["text_states"]
    )
