"""EDLM-NCE as EDLM trains it (a separate energy network E_phi(x0, xt), p_theta frozen), its sampler and
likelihood, and the selection guard of Uni-EDLM-NCE (a checkpoint may not make p_theta's dev NELBO worse)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from unie.core.options import ConfigError, ModelConfig, TrainConfig
from unie.core.schedule import make_schedule
from unie.core.train import train
from unie.data.corpus import tokenize_corpus, write_text_parquet
from unie.data.tokens import load_tokens
from unie.data.toy_world import generate_corpus
from unie.energy.energies import energy
from unie.energy.corrected_nelbo import energy_corrected_nelbo
from unie.energy.nce import NCE, EBMScorer, NCEOptions
from unie.energy.sampler import propose, sample_energy
from unie.methods.mdlm import MDLMDenoiser, nelbo, transition
from unie.models.checkpoint import load_model
from unie.models.energy_net import EnergyNet
from unie.models.transformer import Transformer
from unie.pipeline.model_files import load_wrapped, train_from_spec

torch.set_num_threads(1)


def cfg(tok, L=12):
    return ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2, max_len=L)


def test_energy_net_reads_both_inputs_and_starts_at_zero(tok):
    torch.manual_seed(0)
    den = Transformer(cfg(tok)).eval()
    net = EnergyNet(cfg(tok))
    net.load_backbone(den)
    assert torch.equal(net.backbone.embed.weight, den.embed.weight)  # a copy of the denoiser's backbone
    xt = torch.randint(0, tok.eos_id + 1, (5, 12))
    x0 = torch.randint(0, tok.eos_id + 1, (5, 12))
    assert torch.equal(net(xt, x0), torch.zeros(5))  # E = 0 before training: NCE loss 2 log 2
    with torch.no_grad():
        net.out[2].weight.normal_()
        net.merge.weight[:, 16:].normal_()
    e = net(xt, x0)
    assert e.shape == (5,) and not torch.allclose(e, net(xt, x0.flip(0)))  # it reads x0 ...
    assert not torch.allclose(e, net(xt.flip(0), x0))  # ... and xt


def test_ebm_scorer_keeps_rows_and_candidates_apart(tok):
    """(B, K) energies: each (row, candidate) pair is scored alone (B=2, K=3)."""
    torch.manual_seed(1)
    net = EnergyNet(cfg(tok))
    with torch.no_grad():
        net.out[2].weight.normal_()
        net.merge.weight[:, 16:].normal_()
    scorer = EBMScorer(net.eval())
    xt = torch.randint(0, tok.eos_id + 1, (2, 12))
    x0 = torch.randint(0, tok.eos_id + 1, (2, 3, 12))
    E = scorer.energy(xt, x0)
    assert E.shape == (2, 3)
    for b in range(2):
        for k in range(3):
            assert E[b, k] == pytest.approx(net(xt[b : b + 1], x0[b, k : k + 1]).item(), abs=1e-5)


def test_nce_options_for_the_energy_network():
    NCEOptions(train="energy_net", energy="ebm", ar_context=None, dlm="mdlm")
    with pytest.raises(ConfigError, match="energy: ebm"):
        NCEOptions(train="energy_net", energy="ind", dlm="mdlm")
    with pytest.raises(ConfigError, match="option dlm"):
        NCEOptions(train="energy_net", energy="ebm", ar_context=None)
    with pytest.raises(ConfigError, match="proxy energy"):
        NCEOptions(train="dlm", energy="ebm", proxy="ar")
    assert NCE.kind(NCEOptions(train="energy_net", energy="ebm", ar_context=None, dlm="m")) == "ebm"


class PreferToken:
    """A stand-in energy network: energy = -(number of positions equal to ``token``)."""

    def __init__(self, token):
        self.token = token

    def energy(self, xt, x0):
        return -(x0 == self.token).sum(-1).float()


def test_sampler_with_ebm_energy_picks_the_lowest_energy_candidate(tok, models_uniform):
    """Algorithm 2 with energy ``ebm`` and K=3: every chosen candidate has the lowest energy of its row."""
    den = models_uniform
    g = torch.Generator().manual_seed(0)
    xt = torch.full((2, 12), tok.mask_id)
    logp = den.logp_x0(xt)
    x0 = propose(logp, xt, 3, tok.mask_id, g)
    xs = transition(xt, x0, 0.0, torch.full((2,), 0.5, dtype=torch.float64), tok.mask_id, g)
    E = energy("ebm", xt, x0, xs, logp, PreferToken(5), None, tok.mask_id)
    assert torch.equal(E, -(x0 == 5).sum(-1).float())
    a, _ = sample_energy(den, PreferToken(5), 64, 12, 2, torch.Generator().manual_seed(1), energy="ebm", K=3, w=1.0)
    b, _ = sample_energy(den, PreferToken(5), 64, 12, 2, torch.Generator().manual_seed(1), energy="ebm", K=1, w=1.0)
    assert (a == 5).sum() > (b == 5).sum()  # the energy steers the sampler towards its preferred token
    with pytest.raises(ConfigError, match="no ar_context"):
        sample_energy(den, PreferToken(5), 2, 12, 2, g, energy="ebm", ar_context="teacher_forced")


@pytest.fixture(scope="module")
def models_uniform(tok):
    class Uniform:
        mask_id = tok.mask_id

        def logp_x0(self, xt):
            logp = torch.full((*xt.shape, tok.vocab_size), -math.log(tok.eos_id + 1))
            logp[..., tok.eos_id + 1 :] = -math.inf
            onehot = torch.full_like(logp, -math.inf).scatter_(-1, xt.clamp(max=tok.eos_id)[..., None], 0.0)
            return torch.where((xt == tok.mask_id)[..., None], logp, onehot)

    return Uniform()


def test_ebm_likelihood_with_zero_energy_is_the_mdlm_nelbo(tok, net_factory, random_words):
    """EDLM's plug-in with E_phi = 0 is MDLM's NELBO (same draws), and it moves with the energy."""
    den = MDLMDenoiser(net_factory(d_model=16), tok.mask_id, [tok.bos_id])
    x0 = random_words(6, 12, seed=3)
    sched = make_schedule("loglinear")

    class Const:
        def __init__(self, c):
            self.c = c

        def energy(self, xt, x0):
            return torch.full(x0.shape[:2], self.c)

    a = energy_corrected_nelbo(den, Const(0.0), "ebm", None, x0, sched, tok.mask_id, torch.Generator().manual_seed(4))
    from unie.core.schedule import antithetic_t

    g = torch.Generator().manual_seed(4)
    b = nelbo(den, x0, antithetic_t(6, g, 1e-3), sched, tok.mask_id, g)
    assert torch.allclose(a.double(), b.double(), atol=1e-4)
    c = energy_corrected_nelbo(den, Const(3.0), "ebm", None, x0, sched, tok.mask_id, torch.Generator().manual_seed(4))
    assert torch.allclose(a, c, atol=1e-4)  # a constant energy cancels against its own plug-in normaliser


def test_selection_guard_never_picks_a_checkpoint_that_worsens_the_guard(net_factory, random_words, tmp_path):
    """The loop selects the lowest dev loss among checkpoints whose guard is not above the initial one."""
    net = net_factory(d_model=16)
    data = random_words(64, 12)
    script = iter(
        [
            {"loss": 1.0, "guard": 2.0},  # step 0 (initial)
            {"loss": 0.1, "guard": 2.5},  # lower loss, but p_theta got worse: inadmissible
            {"loss": 0.8, "guard": 1.9},  # admissible and better than the initial
            {"loss": 0.5, "guard": 2.01},
        ]
    )  # inadmissible again
    states = []

    def eval_fn(ema):
        states.append({k: v.clone() for k, v in ema.state_dict().items()})
        return dict(next(script))

    def loss(net, x0, g):
        return net(x0).float().pow(2).mean()

    ema, history = train(
        net,
        loss,
        data,
        TrainConfig(steps=3, batch_size=4, lr=1e-3, warmup=0, ckpt_every=1),
        tmp_path,
        "guard",
        log=lambda s: None,
        progress=False,
        eval_fn=eval_fn,
    )
    dev = [h for h in history if "dev" in h]
    assert [d["dev"]["admissible"] for d in dev] == [True, False, True, False]
    for k, v in ema.state_dict().items():  # the step-2 checkpoint (loss 0.8) was selected
        assert torch.equal(v, states[2][k]), k


def test_edlm_nce_trains_an_energy_network_with_p_theta_frozen(tmp_path, tok):
    """train: energy_net writes an EnergyNet checkpoint, leaves the MDLM untouched, lowers the NCE loss below
    its initial 2 log 2 on dev, and its scorer drives the sampler and the likelihood."""
    L = 12
    paths = {}
    for split, n in (("train", 600), ("valid", 64)):
        raw = tmp_path / f"{split}.raw.parquet"
        write_text_parquet(generate_corpus("owt", split, n, L), raw)
        paths[split] = tmp_path / f"{split}.parquet"
        tokenize_corpus(raw, tok, paths[split], L, insert_eos=False, chunk_specials=False)
    tokdir = tmp_path / "tok"
    tok.save(tokdir)
    arch = {"d_model": 16, "n_layers": 1, "n_heads": 2}
    quiet = dict(log=lambda s: None)
    train_from_spec(
        "mdlm",
        {"method": "mdlm", "arch": arch, "train": {"steps": 30, "batch_size": 16, "lr": 3e-3, "warmup": 2}},
        paths["train"],
        tokdir,
        tmp_path / "m",
        tmp_path / "ck_m",
        L,
        **quiet,
    )
    before = load_model(tmp_path / "m")[0].state_dict()
    spec = {
        "method": "nce",
        "options": {"train": "energy_net", "energy": "ebm", "ar_context": None, "dlm": "m"},
        "arch": arch,
        "train": {"steps": 40, "batch_size": 32, "lr": 3e-3, "warmup": 2, "ckpt_every": 20, "ema": 0.9},
    }
    train_from_spec(
        "ebm",
        spec,
        paths["train"],
        tokdir,
        tmp_path / "e",
        tmp_path / "ck_e",
        L,
        init_dir=tmp_path / "m",
        partner_dirs={"dlm": tmp_path / "m"},
        dev_path=paths["valid"],
        **quiet,
    )
    for k, v in load_model(tmp_path / "m")[0].state_dict().items():
        assert torch.equal(v, before[k]), k
    net, meta = load_model(tmp_path / "e")
    assert isinstance(net, EnergyNet) and meta["backbone"] == "energy_net"
    dev = meta["extra"]["dev"]
    assert dev["initial"]["dev"]["loss"] == pytest.approx(2 * math.log(2), abs=1e-6)
    assert dev["selected"]["dev"]["loss"] < dev["initial"]["dev"]["loss"]
    assert "guard" not in dev["selected"]["dev"]  # p_theta is frozen: nothing to guard
    from unie.data.tokenizer import load_tokenizer

    tk = load_tokenizer(tokdir)
    scorer, den = load_wrapped(tmp_path / "e", tk), load_wrapped(tmp_path / "m", tk)
    assert isinstance(scorer, EBMScorer)
    x, stats = sample_energy(den, scorer, 8, L, 4, torch.Generator().manual_seed(0), energy="ebm", K=2, w=1.0)
    assert x.shape == (8, L) and stats["energy_calls"] > 0 and not (x == tk.mask_id).any()
    x0 = load_tokens(paths["valid"], 8).long()
    nll = energy_corrected_nelbo(
        den, scorer, "ebm", None, x0, make_schedule("loglinear"), tk.mask_id, torch.Generator().manual_seed(0)
    )
    assert nll.shape == (8,) and torch.isfinite(nll).all()
    assert json.loads((tmp_path / "e" / "history.json").read_text())[0]["step"] == 0
