"""Selection rules shared by Algorithms 2 and 3 (argmin, resample, proxy_rerank), Algorithm 3's window counters, the
paired effect of a decoder row against its backbone, and the selection-rule table."""

from __future__ import annotations

import math

import pytest
import torch

from unie.core.options import ConfigError
from unie.dllm.backbone import DecodeOptions
from unie.dllm.bridge import ProxyBridge
from unie.dllm.energy_decoding import DLLMEnergyOptions, energy_decode
from unie.energy.energies import SELECTIONS, select, selection_energy
from unie.energy.sampler import EnergyOptions
from unie.eval.metrics import paired_effect, window_shares

from test_dllm import ExactAR, ExactDLLM, _pi_prefixes


def test_resample_with_one_generator_per_row_is_batch_invariant_and_follows_softmax():
    """B=2, K=3: row b's draw with generator[b] is the same alone and in the batch; over many draws the
    frequencies match softmax(-E/τ) (χ² within a loose bound)."""
    E = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.5, 0.5]], dtype=torch.float64)
    gens = lambda: [torch.Generator().manual_seed(11), torch.Generator().manual_seed(12)]  # noqa: E731
    g = gens()
    both = [select(E, "resample", 1.0, g) for _ in range(50)]
    g0, g1 = gens()
    alone = [torch.cat([select(E[:1], "resample", 1.0, [g0]), select(E[1:], "resample", 1.0, [g1])]) for _ in range(50)]
    assert all(torch.equal(a, b) for a, b in zip(both, alone))
    n, tau = 20000, 2.0
    counts = torch.zeros(2, 3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(n // 200):
        j = select(E[:, None].expand(2, 200, 3).reshape(400, 3), "resample", tau, gen).view(2, 200)
        counts += torch.nn.functional.one_hot(j, 3).sum(1)
    p = torch.softmax(-E / tau, -1).float()
    chi2 = (((counts - n * p) ** 2) / (n * p)).sum().item()
    assert chi2 < 30, (counts, n * p)  # 4 degrees of freedom: p < 1e-5 at 30
    assert torch.equal(select(E, "argmin"), torch.tensor([0, 1])) and torch.equal(
        select(E, "proxy_rerank"), torch.tensor([0, 1])
    )
    with pytest.raises(ValueError, match="unknown selection"):
        select(E, "argmax")


def test_proxy_rerank_needs_a_proxy_in_algorithm_2():
    assert "proxy_rerank" in SELECTIONS
    with pytest.raises(ConfigError, match="proxy_rerank"):
        EnergyOptions(energy="ebm", selection="proxy_rerank")
    assert EnergyOptions(energy="uni", selection="proxy_rerank").selection == "proxy_rerank"
    with pytest.raises(ValueError, match="unknown selection"):
        DLLMEnergyOptions(selection="best")


@pytest.mark.parametrize("selection", ["proxy_rerank", "resample", "argmin"])
def test_algorithm3_selection_rules_against_pi(owt_hmm, tok, selection, monkeypatch):
    """B=2, K=3, two blocks, w=1 with the toy world's exact DLLM and AR.  ``proxy_rerank`` picks, every window
    iteration, the candidate whose revealed tokens have the highest exact teacher-forced log-probability
    ``Σ_D log pi(x0_i | x0_<i)`` (forward algorithm: ``log pi(x0_<=i) - log pi(x0_<i)``), whatever the energy;
    every rule commits the chosen candidate's reveal; the window counters add up."""
    import unie.dllm.energy_decoding as alg3

    hmm = owt_hmm
    dllm, proxy_ = ExactDLLM(hmm, tok), ExactAR(hmm, tok)
    x = torch.cat(
        [torch.full((2, 1), tok.bos_id), _pi_prefixes(hmm, 2, 6, seed=5), torch.full((2, 8), tok.mask_id)], dim=1
    )
    calls = []

    def spy(sel, name, xt, x0, xs, logp, scorer, ctx, mask_id, **kw):
        E = selection_energy(sel, name, xt, x0, xs, logp, scorer, ctx, mask_id, **kw)
        calls.append((sel, xt, x0, xs, E))
        return E

    monkeypatch.setattr(alg3, "selection_energy", spy)
    opts = DLLMEnergyOptions(energy="uni", K=3, w=1.0, selection=selection, temperature=1.0)  # candidates that differ
    out, stats = energy_decode(
        dllm,
        ProxyBridge(proxy_, tok),
        x,
        DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2),
        opts,
        torch.Generator().manual_seed(0),
    )
    assert stats["window_iterations"] == 4 and len(calls) == 4 and stats["window_rows"] == 8
    assert 0 <= stats["steered_rows"] <= stats["disagree_rows"] <= stats["window_rows"]
    assert stats["disagree_rows"] >= 1  # the exact model's candidates do differ here

    def log_pi_prefix(y, upto):  # log pi of y[1:upto] (position 0 is <bos>), (N,)
        body = y[:, 1:].clamp(max=hmm.V - 1)
        vis = torch.zeros_like(body, dtype=torch.bool)
        vis[:, : upto - 1] = True
        return hmm.log_marginal(body, vis).double()

    checked = 0
    for sel, xt, x0, xs, E in calls:
        assert sel == selection
        if selection != "proxy_rerank":
            continue
        D = (xt == tok.mask_id)[:, None] & (xs != tok.mask_id)  # (B, K, T)
        exact = torch.zeros(2, 3, dtype=torch.float64)
        for b in range(2):
            for k in range(3):
                for i in D[b, k].nonzero().flatten().tolist():
                    y = x0[b, k][None]
                    exact[b, k] += (log_pi_prefix(y, i + 1) - log_pi_prefix(y, i)).item()
        assert torch.allclose(-E.double(), exact, atol=1e-3), (E, exact)
        distinct = (exact.max(-1).values - exact.min(-1).values) > 1e-2
        assert torch.equal(E.argmin(-1)[distinct], exact.argmax(-1)[distinct])
        checked += int(distinct.sum())
    assert selection != "proxy_rerank" or checked >= 2
    assert not (out == tok.mask_id).any()


def test_window_counters_are_zero_with_one_candidate(owt_hmm, tok):
    hmm = owt_hmm
    x = torch.cat(
        [torch.full((2, 1), tok.bos_id), _pi_prefixes(hmm, 2, 6, seed=3), torch.full((2, 8), tok.mask_id)], dim=1
    )
    _, stats = energy_decode(
        ExactDLLM(hmm, tok),
        ProxyBridge(ExactAR(hmm, tok), tok),
        x,
        DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2),
        DLLMEnergyOptions(K=1, w=0.5),
        torch.Generator().manual_seed(0),
    )
    assert stats["window_iterations"] == 2 and stats["window_rows"] == 4
    assert stats["disagree_rows"] == 0 and stats["steered_rows"] == 0
    shares = window_shares(stats)
    assert {k: shares[k] for k in ("window_rows", "disagree", "steered", "disagree_rows", "steered_rows")} == {
        "window_rows": 4,
        "disagree": 0.0,
        "steered": 0.0,
        "disagree_rows": 0,
        "steered_rows": 0,
    }
    assert shares["window_reveals"] == 2 * 2 * 2  # 2 rows x 2 window iterations x m = 2
    assert shares["padding"] == stats["window_padding"] / 8 and 0 < shares["answer"] <= 1
    assert window_shares({"nfe": 3}) is None


def test_paired_effect_by_hand():
    """Two tasks: per-task mean difference, sample-sd paired s.e., changed share; the average's s.e. is
    sqrt(se_1² + se_2²) / 2."""
    row = {"a": {1: (1.0, "x"), 2: (0.0, "y"), 3: (1.0, "z"), 4: (1.0, "w")}, "b": {1: (0.0, "p"), 2: (0.0, "q")}}
    base = {
        "a": {1: (0.0, "u"), 2: (0.0, "y"), 3: (1.0, "z"), 4: (0.0, "v"), 5: (1.0, "extra")},
        "b": {1: (1.0, "r"), 2: (0.0, "q")},
    }
    e = paired_effect(row, base, ["a", "b"])
    da, db = [1, 0, 0, 1], [-1, 0]
    se = lambda d: math.sqrt(sum((v - sum(d) / len(d)) ** 2 for v in d) / (len(d) - 1) / len(d))  # noqa: E731
    assert e["tasks"]["a"]["n"] == 4 and e["tasks"]["a"]["delta"] == pytest.approx(50.0)
    assert e["tasks"]["a"]["se"] == pytest.approx(100 * se(da)) and e["tasks"]["a"]["changed"] == 0.5
    assert e["tasks"]["b"]["delta"] == pytest.approx(-50.0) and e["tasks"]["b"]["changed"] == 0.5
    assert e["avg"]["delta"] == pytest.approx(0.0)
    assert e["avg"]["se"] == pytest.approx(100 * math.sqrt(se(da) ** 2 + se(db) ** 2) / 2)
    assert e["avg"]["changed"] == pytest.approx(3 / 6) and e["avg"]["items"] == 6
    assert e["avg"]["detectable"] == pytest.approx(2 * e["avg"]["se"])
    assert paired_effect({}, base, ["a"]) == {"tasks": {}, "avg": None}


def test_selection_table_and_table3_note():
    from unie.report.tables import effect_note, selection_table

    res = lambda v: {
        "results": {
            "t1": {"acc,none": v, "acc_stderr,none": 0.05},  # noqa: E731
            "t2": {"acc,none": v / 2, "acc_stderr,none": 0.05},
        }
    }
    rows = {
        "bb": {"label": "Backbone"},
        "bb_uni": {"label": "+Uni-Energy", "delta_to": "bb", "options": {"energy": "uni"}},
        "bb_rerank": {
            "label": "+proxy rerank",
            "delta_to": "bb",
            "selection_table": True,
            "options": {"energy": "uni", "selection": "proxy_rerank"},
        },
    }
    eff = lambda sel, d: {
        "energy": "uni",
        "selection": sel,  # noqa: E731
        "avg": {"delta": d, "se": 1.5, "detectable": 3.0, "changed": 0.25, "items": 400},
        "window": {"disagree": 0.4, "steered": 0.2},
        "tasks": {},
    }
    effects = {"bb_uni": eff("argmin", -2.0), "bb_rerank": eff("proxy_rerank", 1.0)}
    tex, df = selection_table(
        rows,
        {"bb": res(0.4), "bb_uni": res(0.36), "bb_rerank": res(0.42)},
        effects,
        {"t1": "acc,none", "t2": "acc,none"},
        ["t1", "t2"],
    )
    assert list(df.row) == ["bb", "bb_uni", "bb_rerank"]
    assert df.avg.tolist() == pytest.approx([30.0, 27.0, 31.5])
    assert df.avg_se.tolist()[0] == pytest.approx(math.sqrt(2 * 25) / 2)
    assert "proxy rerank" in tex and r"-2.0{\scriptsize $\pm$1.5}" in tex and "argmin (paper)" in tex
    note = effect_note(rows, effects)
    assert note == (
        "Algorithm 3 rows on Backbone: 40\\% of window iterations disagree; +Uni-Energy 25\\% of completions "
        "changed, average -2.0 $\\pm$ 1.5, +proxy rerank 25\\% of completions changed, average +1.0 $\\pm$ 1.5."
    )
    effects["bb_uni"] = {
        **effects["bb_uni"],
        "options": {"temperature": 0.1},
        "window": {"disagree": 0.4, "steered": 0.2, "padding": 0.05, "answer": 0.37},
    }
    note = effect_note(rows, effects)  # what the rows share is said once, per backbone
    assert (
        "on Backbone (candidates at $\\tau$ = 0.1): the window decides 37\\% of an average answer (5\\% of its "
        "reveals padding), 40\\% of window iterations disagree"
    ) in note and note.count("window iterations") == 1


def test_table3_room_rows_and_the_columns_of_its_average():
    """Table 3 with a backbone's room record: the ceiling / floor and decided rows under its group, the CSV's room
    rows and each Algorithm 3 row's share of the ceiling; Avg. over dllm.tasks.average only, the other columns marked
    and explained (each row at chance there)."""
    from unie.report.tables import table3

    res = lambda a, c: {
        "results": {
            "t1": {"acc,none": a, "acc_stderr,none": 0.03},  # noqa: E731
            "mc": {"acc,none": c, "acc_stderr,none": 0.03},
        },
        "n-samples": {"t1": {"effective": 200}, "mc": {"effective": 200}},
    }
    rows = {
        "bb": {"label": "Backbone", "model": "bb"},
        "bb_uni": {"label": "+Uni-Energy", "delta_to": "bb", "model": "bb", "proxy": "p", "options": {"energy": "uni"}},
    }
    eff = {
        "t1": {"delta": 0.5, "se": 0.2, "n": 200, "changed": 0.1},
        "mc": {"delta": 0.0, "se": 0.0, "n": 200, "changed": 0.0},
    }
    room = {
        "ceiling": {
            "tasks": {"t1": {"delta": 3.0, "se": 0.8, "n": 200}, "mc": {"delta": 0.0, "se": 0.0, "n": 200}},
            "avg": {"delta": 3.0, "se": 0.8},
        },
        "floor": {
            "tasks": {"t1": {"delta": -2.0, "se": 0.7, "n": 200}, "mc": {"delta": 0.0, "se": 0.0, "n": 200}},
            "avg": {"delta": -2.0, "se": 0.7},
        },
        "decides": {"tasks": {"t1": 0.1, "mc": 0.0}, "avg": 0.1},
        "exhaustive": 1.0,
        "rows": {"bb_uni": {"share": {"share": 0.25, "se": 0.1}}},
    }
    tex, df = table3(
        rows,
        ["t1", "mc"],
        {"bb": res(0.40, 0.25), "bb_uni": res(0.405, 0.25)},
        {"t1": "acc,none", "mc": "acc,none"},
        {"t1": "T1", "mc": "MC"},
        {"bb_uni": {"tasks": eff, "avg": {"delta": 0.5, "se": 0.2, "changed": 0.1}}},
        {"bb": room},
        ["t1"],
    )
    assert r"\quad\emph{room: ceiling / floor} & +3.0 / -2.0 & +0.0 / +0.0 & +3.0 / -2.0" in tex
    assert r"\quad\emph{decided in the window} & 10\% & 0\% & 10\%" in tex
    assert "MC*" in tex and "*Not in Avg. (MC 25.0--25.0\\%): every row is within 2 s.e. of guessing" in tex
    # the best of each column in bold and in the CSV's best / best_average, but none in a column at chance
    assert "the columns at chance: no best there" in tex and r"\textbf{25.0" not in tex
    assert r"\textbf{40.5" in tex and not df[df.task == "mc"].best.any()
    assert df[df.best].row.tolist() == ["bb_uni"] and df[df.best].task.tolist() == ["t1"]
    assert df.groupby("row").best_average.all().to_dict() == {
        "bb": False,
        "bb__ceiling": False,
        "bb__floor": False,
        "bb_uni": True,
    }
    assert df[(df.row == "bb") & (df.task == "t1")].in_average.all() and not df[df.task == "mc"].in_average.any()
    ceil = df[df.row == "bb__ceiling"].set_index("task")
    assert ceil.loc["t1", "value"] == pytest.approx(43.0) and ceil.loc["t1", "delta_se"] == 0.8
    assert df[df.row == "bb_uni"].share.iloc[0] == 0.25
    assert "Backbone & 40.0" in tex and " 40.0 \\\\" in tex  # Avg. over t1 alone (the 25 % column left out)


def test_table3_caption_gives_the_proxy_as_a_multiple_of_each_backbone():
    from unie.report.tables import proxy_ratios

    rows = {
        "proxy": {"model": "p", "label": "AR proxy"},
        "big": {"model": "ar", "label": "AR (large)"},
        "a": {"model": "a", "label": "A-like"},
        "b": {"model": "b", "label": "B-like"},
        "a_uni": {"model": "a", "proxy": "p", "delta_to": "a"},
        "b_uni": {"model": "b", "proxy": "p", "delta_to": "b"},
        "a_dawn": {"model": "a", "delta_to": "a"},
    }
    text = proxy_ratios(rows, {"proxy": 20.0, "big": 30.0, "a": 25.0, "b": 40.0})
    assert text == (
        "The proxy of the decoder rows (AR proxy, average 20.0) is 0.80$\\times$ A-like's (25.0), "
        "0.50$\\times$ B-like's (40.0)."
    )
    assert proxy_ratios({k: v for k, v in rows.items() if k != "proxy"}, {"a": 1.0, "b": 1.0, "big": 1.0}) == ""


def test_selection_table_rows_are_checked():
    import copy
    from pathlib import Path

    from unie.config.checks import check_dllm
    from unie.config.profile import resolve_config

    cfg = resolve_config([Path(__file__).parents[1] / "config" / "config.yaml"])
    check_dllm(cfg)
    rows = cfg["dllm"]["rows"]
    assert {r["options"]["selection"] for r in rows.values() if r.get("selection_table")} == {
        "resample",
        "proxy_rerank",
    }
    for mutate, expected in [
        (lambda r: r["llada_rerank"].pop("delta_to"), "needs delta_to"),
        (lambda r: r["llada_rerank"]["options"].pop("energy"), "Algorithm 3 row|unknown option"),
        (lambda r: r["llada_rerank"]["options"].__setitem__("selection", "best"), "unknown selection"),
    ]:
        bad = copy.deepcopy(cfg)
        mutate(bad["dllm"]["rows"])
        with pytest.raises(ConfigError, match=expected):
            check_dllm(bad)
