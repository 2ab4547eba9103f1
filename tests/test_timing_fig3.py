"""Figure 3's config expansion and the timing protocol (one batch, warm-up excluded, median of repeats)."""

from __future__ import annotations

import copy

import pytest

from unie.core.options import ConfigError
from unie.eval.timing import time_generation
from unie.config.checks import check_config, expand_config
from unie.config.expand import fig3_runs
from unie.config.profile import resolve_config


def test_time_generation_excludes_warmup_and_takes_the_median(monkeypatch):
    calls = []

    def entry(models, n, L, steps, g, options, batch_size, device):
        calls.append((n, L, steps, int(g.initial_seed())))
        import torch

        return torch.zeros(n, L, dtype=torch.long), {"nfe": steps}

    clock = iter([0.0, 5.0, 10.0, 11.0, 20.0, 23.0])  # repeats of 5 s, 1 s, 3 s
    monkeypatch.setattr("unie.eval.timing.time.perf_counter", lambda: next(clock))
    out = time_generation(entry, {}, None, 8, 4, batch_size=3, warmup=2, repeats=3, seed=10)
    assert len(calls) == 5 and all(c[:3] == (3, 8, 4) for c in calls)
    assert [c[3] for c in calls] == [10, 11, 12, 13, 14]  # every generation its own seed, warm-ups untimed
    assert out["seconds_all"] == [5.0, 1.0, 3.0] and out["seconds"] == 3.0 and out["nfe"] == 4
    with pytest.raises(ValueError, match="repeats"):
        time_generation(entry, {}, None, 8, 4, batch_size=3, repeats=0)


def _config():

    return resolve_config()


def test_fig3_runs_reuse_table2_and_generate_the_rest():
    cfg = _config()
    runs = fig3_runs(cfg)
    assert runs["w"][1.0] == "uni_edlm_ar"  # K = 2, w = 1, masked proxy: Table 2's run and its 256 samples
    assert runs["k"][2] == runs["w"][0.2] == runs["tradeoff"]["Uni-EDLM-AR"] == "fig3_uni_k2_w20"
    # EDLM-AR with EDLM's own selection rule (resample); the name says the rule when it is not argmin
    assert runs["tradeoff"]["EDLM-AR"] == "fig3_ind_k2_w20_resample" and runs["tradeoff"]["AR"] == "ar"
    expand_config(cfg)
    gen = cfg["sampling"]["runs"]["fig3_ind_k2_w20_resample"]
    assert gen["options"] == {
        "energy": "ind",
        "K": 2,
        "w": 0.2,
        "ar_context": "teacher_forced",
        "selection": "resample",
    }
    assert cfg["sampling"]["runs"]["fig3_uni_k2_w20"]["options"] == {
        "energy": "uni",
        "K": 2,
        "w": 0.2,
        "ar_context": "masked",
    }  # argmin: as it was
    assert gen["models"] == {"dlm": "mdlm", "proxy": "ar"} and gen["n_samples"] == 128
    assert cfg["sampling"]["runs"]["fig3_uni_k1_w20"]["options"]["K"] == 1
    assert "n_samples" not in cfg["sampling"]["runs"]["uni_edlm_ar"]


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda f: f.update(K=5), "figures.fig3_tradeoff"),
        (lambda f: f["baselines"].update(AR="nope"), "figures.fig3_tradeoff.baselines.AR"),
        (lambda f: f["edlm"].update(energy="nope"), "figures.fig3_tradeoff.edlm.energy"),
        (lambda f: f.update(evaluator="nope"), "figures.fig3_tradeoff.evaluator"),
    ],
)
def test_fig3_bad_config_names_the_key(mutate, key):
    cfg = copy.deepcopy(_config())
    mutate(cfg["figures"]["fig3_tradeoff"])
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        expand_config(cfg)
        check_config(cfg)


def test_flagged_timings_are_marked_in_the_figures():
    import matplotlib

    matplotlib.use("Agg")
    from unie.report.figures import FLAGGED_NOTE, _timing_frame, fig4_tradeoff

    old = {"run": "ar", "threads": 1, "device_name": "cpu", "points": [{"steps": 4, "seconds": 1.0, "batch_size": 2}]}
    new = {**old, "run": "mdlm", "points": [{"steps": 4, "seconds": 1.0, "batch_size": 2, "trusted": False}]}
    assert _timing_frame([old, new]).trusted.tolist() == [True, False]  # a record without checks counts as trusted
    pt = {"curve": "llada", "label": "LLaDA-like", "key": "m", "accuracy": 30.0, "stderr": 3.0, "nfe": 8}
    sweep = {
        "task": "toy_math",
        "batch_size": 64,
        "points": [
            {**pt, "point": "a", "value": 1, "tokens_per_s": 100.0, "trusted": True, "flags": [], "timing": {}},
            {
                **pt,
                "point": "b",
                "value": 2,
                "tokens_per_s": 200.0,
                "trusted": False,
                "flags": ["spread"],
                "timing": {},
            },
        ],
    }
    figure, df = fig4_tradeoff(sweep)
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert FLAGGED_NOTE in texts and df.trusted.tolist() == [True, False]
    assert list(df.columns)[-1] == "trusted" and "timing" not in df.columns  # new columns at the end only
    hollow = [ln for ln in figure.axes[0].get_lines() if ln.get_markerfacecolor() == "white"]
    assert len(hollow) == 1 and list(hollow[0].get_xdata()) == [200.0]
    sweep["points"][1]["trusted"] = True
    figure, _ = fig4_tradeoff(sweep)
    assert FLAGGED_NOTE not in [t.get_text() for t in figure.axes[0].texts]
