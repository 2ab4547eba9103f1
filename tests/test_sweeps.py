"""The DLLM sweeps (Figure 4, the appendix k/w tables): their points and the config checks, before any job."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from unie.core.config import ConfigError
from unie.pipeline.checks import check_dllm
from unie.dllm.rows import row_model_args, sweep_points
from unie.pipeline.profile import resolve_config

SMOKE = resolve_config([Path(__file__).parents[1] / "config" / "smoke.yaml"])


def test_points_vary_one_option_of_their_curve():
    d = SMOKE["dllm"]
    pts = sweep_points(d, "app_w")
    assert [p["name"] for p in pts] == ["uni__w_0.2", "uni__w_1.0"]
    for p, w in zip(pts, (0.2, 1.0)):
        args = row_model_args(p["name"], p["row"], d, {"model": "m/model.safetensors", "proxy": "p/model.safetensors"},
                              "cpu")
        # the shared energy options, then the curve's own, then the varied value
        assert args["w"] == w and args["K"] == d["energy"]["K"] and args["energy"] == "uni"
        assert args["pretrained"] == "m" and args["proxy"] == "p" and args["name"] == p["name"]
    fig4 = sweep_points(d, "fig4")
    fast = [p for p in fig4 if p["curve"] == "fast_dllm"]
    args = row_model_args(fast[0]["name"], fast[0]["row"], d, {"model": "m/model.safetensors"}, "cpu")
    assert args["sampler"] == "fast_dllm" and "K" not in args and "proxy" not in args  # no energy options leak


@pytest.mark.parametrize("mutate, expected", [
    (lambda s: s.__setitem__("task", "toy_maths"), r"dllm.sweeps.task'.*toy_maths"),
    (lambda s: s["sets"]["app_k"]["uni"].__setitem__("vary", {"K": [2], "w": [0.1]}), r"app_k.uni.vary'.*exactly one"),
    (lambda s: s["sets"]["fig4"]["fast_dllm"].__setitem__("vary", {"K": [2]}),
     r"fig4.fast_dllm \(K=2\).options'.*unknown option.*'K'.*fast_dllm"),
    (lambda s: s["sets"]["fig4"]["llada"].__setitem__("vary", {"tokens_per_step": [3]}),
     r"fig4.llada \(tokens_per_step=3\).options'.*multiple"),
    (lambda s: s["sets"]["app_w"]["uni"].__setitem__("vary", {"w": [1.5]}), r"app_w.uni \(w=1.5\).options'"),
    (lambda s: s["sets"]["app_k"]["uni"].pop("proxy"), r"app_k.uni \(K=2\).proxy'.*needs a proxy"),
])
def test_bad_sweep_names_the_key(mutate, expected):
    cfg = copy.deepcopy(SMOKE)
    check_dllm(cfg)
    mutate(cfg["dllm"]["sweeps"])
    with pytest.raises(ConfigError, match=expected):
        check_dllm(cfg)
