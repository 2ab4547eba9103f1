"""Every released format, written by a transcription of upstream's own saving code (tests/upstream_formats.py:
Lightning's checkpoint dict with ``hyper_parameters``, ``ema`` and a pickled tokenizer; the hub folders by
transformers' and huggingface_hub's own ``save_pretrained``), after a few training steps, loads with
unie.methods.released_methods and gives upstream's numbers: the networks' logits (EMA weights), Duo at upstream's
vocabulary (GPT-2 + [PAD]: its NELBO and its sampler's posterior), the AR's alignment on BOS-led chunks, BD3-LM's
``ignore_bos`` and evaluation interval, and SEDD's analytic step with its raw mask column."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F

from standins_released import BOS, MASK, TOKENIZER, V, upstream_block_diff_mask
from unie.methods.released_methods import load_released
from unie.models.released import ReleasedCheckpointError
from upstream_formats import (
    Backbone,
    bd3_eval_nelbo,
    duo_nll_per_token,
    duo_posterior,
    edlm_ar_energy,
    lightning_checkpoint,
    mdlm_ar_nll,
    mdlm_ar_sampler,
    save_hf_folder,
    save_sedd_hub,
    sedd_analytic_probs,
    train_steps,
)

ATOL = 2e-5


@pytest.fixture(scope="module")
def tokenizer():
    """The tokenizer object upstream pickles into hyper_parameters (a transformers fast tokenizer)."""
    from unie.data.tokenizer import word_tokenizer

    return word_tokenizer([f"w{i}" for i in range(10)]).hf


def trained(seed, ar=False, time_conditioning=False):
    """A backbone after 3 AdamW steps, its EMA, and a copy holding the EMA weights (what upstream evaluates)."""
    net = Backbone(V, ar=ar, time_conditioning=time_conditioning, seed=seed)
    opt, ema = train_steps(net, seed=seed, sigma=0.5 if time_conditioning else None)
    ema_net = copy.deepcopy(net)
    ema.copy_to(ema_net.parameters())
    return net, opt, ema, ema_net


def chunks(B=3, L=16, seed=0, bos=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V - 1, (B, L), generator=g)
    if bos:
        x[:, 0] = BOS
    return x


def masked(x0, rate=0.4, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.where(torch.rand(x0.shape, generator=g) < rate, torch.full_like(x0, MASK), x0)


# ---------------------------------------------------------------------- Lightning checkpoints
def test_mdlm_lightning_checkpoint_as_upstream_writes_it(tmp_path, tokenizer):
    net, opt, ema, ema_net = trained(1)
    ckpt = lightning_checkpoint(tmp_path / "mdlm.ckpt", net, ema, opt, tokenizer)
    assert {
        "epoch",
        "global_step",
        "pytorch-lightning_version",
        "state_dict",
        "loops",
        "callbacks",
        "optimizer_states",
        "lr_schedulers",
        "hparams_name",
        "hyper_parameters",
        "ema",
        "sampler",
    } == set(ckpt)
    assert ckpt["ema"]["num_updates"] == 3 and len(ckpt["optimizer_states"][0]["state"]) == len(
        ckpt["ema"]["shadow_params"]
    )
    den = load_released("mdlm", tmp_path / "mdlm.ckpt", tokenizer_info=TOKENIZER, n_heads=4)
    xt = masked(chunks())
    torch.testing.assert_close(den.net(xt), ema_net(xt), atol=ATOL, rtol=0)
    assert (net(xt) - ema_net(xt)).abs().max() > 1e-2  # the raw weights would give other logits
    raw = load_released("mdlm", tmp_path / "mdlm.ckpt", tokenizer_info=TOKENIZER, n_heads=4, use_ema=False)
    torch.testing.assert_close(raw.net(xt), net(xt), atol=ATOL, rtol=0)


def test_sedd_lightning_checkpoint(tmp_path, tokenizer):
    """MDLM's sedd.ckpt: the Lightning checkpoint of a time-conditioned DIT."""
    net, opt, ema, ema_net = trained(2, time_conditioning=True)
    lightning_checkpoint(tmp_path / "sedd.ckpt", net, ema, opt, tokenizer)
    score = load_released("sedd", tmp_path / "sedd.ckpt", tokenizer_info=TOKENIZER, n_heads=4)
    xt, sigma = masked(chunks()), torch.tensor([0.1, 0.9, 2.5])
    torch.testing.assert_close(score.net(xt, sigma=sigma), ema_net(xt, sigma), atol=ATOL, rtol=0)


def test_the_released_ar_scores_a_chunk_as_upstream(tmp_path, tokenizer):
    """Table 1's AR row: upstream's AR reads x0[:, :-1] of a chunk that begins with its BOS and scores x0[:, 1:]
    (L - 1 tokens); with chunk_bos ours scores the same tokens with the same context.  Prepending another BOS
    (the default, for sequences without their own) scores other numbers."""
    from unie.methods.ar import AR

    net, opt, ema, ema_net = trained(3, ar=True)
    lightning_checkpoint(tmp_path / "ar.ckpt", net, ema, opt, tokenizer)
    ar = load_released("ar", tmp_path / "ar.ckpt", tokenizer_info=TOKENIZER, n_heads=4)
    x0 = chunks(L=16)
    up, count = mdlm_ar_nll(ema_net(x0[:, :-1]), x0, MASK)
    aligned = AR(TOKENIZER, {"chunk_bos": True})
    torch.testing.assert_close(aligned.nll(ar.net, x0), up, atol=1e-4, rtol=1e-6)
    assert aligned.scored_tokens(16) == count[0] == 15
    default = AR(TOKENIZER)
    assert default.scored_tokens(16) == 16 and (default.nll(ar.net, x0) - up).abs().min() > 0.1
    with pytest.raises(ValueError, match="chunk_bos: every sequence must begin with its BOS"):
        aligned.nll(ar.net, chunks(bos=False))


@pytest.fixture(scope="module")
def released_ar(tmp_path_factory, tokenizer):
    """The released AR as upstream saved it (after a few steps), loaded with ``chunk_bos``; its EMA network."""
    tmp = tmp_path_factory.mktemp("released_ar")
    net, opt, ema, ema_net = trained(3, ar=True)
    lightning_checkpoint(tmp / "ar.ckpt", net, ema, opt, tokenizer)
    ar = load_released("ar", tmp / "ar.ckpt", tokenizer_info=TOKENIZER, n_heads=4, options={"chunk_bos": True})
    return ar, ema_net


def test_the_released_ar_as_a_proxy_scores_as_edlm(released_ar):
    """Table 1's EDLM-CoAR and Table 2's `proxy: ar` runs: the released AR's per-position conditionals, read by the
    energies, are EDLM's (the AR reads x0[:, :-1] of a BOS-led chunk; position 0 carries no AR term), so Ind-E with
    the carry-over context equals EDLM's AR energy and the teacher-forced sum equals it without carry-over."""
    from unie.energy.energies import ARTerms, ind_energy

    ar, ema_net = released_ar
    assert ar.chunk_bos and ar.predicted(16) == 15
    x0 = chunks(B=4, L=16, seed=3)
    xt = masked(x0, rate=0.5, seed=4)
    xt[0, 0] = MASK  # position 0 masked in one row: upstream scores no AR term there either
    g = torch.Generator().manual_seed(5)
    logp = torch.randn(4, 16, V, generator=g).log_softmax(-1)
    logp[..., MASK] = -math.inf
    logp = logp.log_softmax(-1)
    keep = xt != MASK  # SUBS: an unmasked position carries its token
    logp[keep] = torch.where(F.one_hot(xt[keep], V).bool(), 0.0, -math.inf)
    cand = x0[:, None]
    up_output = ema_net(x0[:, :-1])
    for carry_over, ctx in ((True, "teacher_forced_carry_over"), (False, "teacher_forced")):
        up = edlm_ar_energy(up_output, xt, x0, logp, MASK, carry_over=carry_over)
        terms = ARTerms(ar, ctx, xt, cand, cand, MASK)
        ours = ind_energy(xt, cand, cand, logp, terms, MASK)[:, 0]  # teacher_forced: A(xt) = 0 (energies.py)
        torch.testing.assert_close(ours.double(), up.double(), atol=2e-4, rtol=1e-6)
    # the default convention (a BOS prepended, position 0 predicted) reads other numbers
    from unie.methods.ar import ARModel

    plain = ARModel(ar.net, BOS, MASK)
    other = ind_energy(xt, cand, cand, logp, ARTerms(plain, "teacher_forced_carry_over", xt, cand, cand, MASK), MASK)
    assert (other[:, 0].double() - edlm_ar_energy(up_output, xt, x0, logp, MASK)).abs().max() > 0.1


def test_the_released_ar_samples_as_upstream(released_ar, monkeypatch, tmp_path, tokenizer):
    """Table 2's AR row: upstream's _ar_sampler writes BOS and draws L - 1 tokens, each from the AR's output for the
    prefix; ours, fed the same Gumbel noise, writes the same sequences (no second BOS in front); so does DCD with
    alpha 0, whose AR is the same released model."""
    import unie.methods.ar as ar_module
    import unie.methods.dcd as dcd_module

    ar, ema_net = released_ar
    B, L = 3, 12
    noise = -torch.log(-torch.log(torch.rand(B, L - 1, V, generator=torch.Generator().manual_seed(6)).double()))
    calls = []

    def replay(logp, generator=None):  # Gumbel-max with the noise upstream draws, one position at a time
        i = len(calls) % (L - 1)
        calls.append(i)
        return (logp.double() + noise[:, i].to(logp.device)).argmax(-1)

    def upstream_forward(x):  # AR.forward: the backbone's logits, the mask column at -1000
        out = ema_net(x).double()
        out[:, :, MASK] = -1000.0
        return out

    up = mdlm_ar_sampler(upstream_forward, B, L, BOS, noise)
    monkeypatch.setattr(ar_module, "gumbel_argmax", replay)
    ours = ar.sample(B, L, torch.Generator().manual_seed(0), batch_size=B)
    assert len(calls) == L - 1 and (ours[:, 0] == BOS).all()
    assert torch.equal(ours, up)
    x, stats = ar_module.ar_sampler({"ar": ar}, B, L, L, None, ar_module.ARSamplerOptions(), B, "cpu")
    assert stats["nfe"] == L - 1 and torch.equal(x, up)
    calls.clear()
    monkeypatch.setattr(dcd_module, "gumbel_argmax", replay)
    net, opt, ema, _ = trained(9)
    lightning_checkpoint(tmp_path / "mdlm.ckpt", net, ema, opt, tokenizer)
    dlm = load_released("mdlm", tmp_path / "mdlm.ckpt", tokenizer_info=TOKENIZER, n_heads=4)
    y, dstats = dcd_module.sample_dcd(dlm, ar, B, L, 4, None, {"alpha": 0.0}, batch_size=B)
    assert dstats["ar_steps"] == L - 1 and torch.equal(y, up)


def test_the_paper_profile_scores_the_ar_row_aligned(tmp_path):
    """config/paper.yaml's released AR is read with chunk_bos; the config check refuses it without chunk-leading
    BOS (data.chunk_specials)."""
    from unie.core.options import ConfigError
    from unie.config.checks import check_config
    from unie.config.profile import resolve_config

    cfg = resolve_config(["config/paper.yaml"])
    assert cfg["models"]["ar"]["options"] == {"chunk_bos": True} and cfg["data"]["chunk_specials"] is True
    # the masked-context proxy fine-tuned from it reads chunks the same way; without chunk_bos it is refused
    assert cfg["models"]["ar_masked"]["options"] == {"mask_inputs": True, "chunk_bos": True}
    plain = copy.deepcopy(cfg)
    plain["models"]["ar_masked"]["options"] = {"mask_inputs": True}
    with pytest.raises(ConfigError, match="models.ar_masked.options.chunk_bos': initialised from 'ar'"):
        check_config(plain)
    cfg["data"]["chunk_specials"] = False
    with pytest.raises(ConfigError, match="models.ar.options.chunk_bos"):
        check_config(cfg)


# ---------------------------------------------------------------------- hub folders
def test_mdlm_hf_folder_as_save_pretrained_writes_it(tmp_path):
    net, _, ema, ema_net = trained(4)
    save_hf_folder(tmp_path / "mdlm-owt", "mdlm", net, ema)
    conf = json.loads((tmp_path / "mdlm-owt" / "config.json").read_text())
    assert conf["auto_map"] and conf["return_dict"] is False and conf["hidden_dim"] == 32 and conf["vocab_size"] == V
    assert (tmp_path / "mdlm-owt" / "model.safetensors").is_file()
    with pytest.raises(ReleasedCheckpointError, match="trust_remote_code"):
        load_released("mdlm", tmp_path / "mdlm-owt", tokenizer_info=TOKENIZER)
    den = load_released("mdlm", tmp_path / "mdlm-owt", tokenizer_info=TOKENIZER, trust_remote_code=True)
    xt = masked(chunks())
    torch.testing.assert_close(den.net(xt), ema_net(xt), atol=ATOL, rtol=0)


@pytest.mark.parametrize("legacy", [False, True])
def test_sedd_hub_folder_as_the_mixin_writes_it(tmp_path, legacy):
    net, _, _, _ = trained(5, time_conditioning=True)
    config = {
        "tokens": V - 1,
        "graph": {"type": "absorb", "file": "data", "report_all": False},
        "noise": {"type": "loglinear", "sigma_min": 1e-4, "sigma_max": 20},
        "model": {
            "name": "small",
            "type": "ddit",
            "hidden_size": 32,
            "cond_dim": 16,
            "length": 1024,
            "n_blocks": 2,
            "n_heads": 4,
            "scale_by_sigma": True,
            "dropout": 0.1,
        },
    }
    save_sedd_hub(tmp_path / "sedd-small", net, config, legacy=legacy)
    assert (tmp_path / "sedd-small" / ("pytorch_model.bin" if legacy else "model.safetensors")).is_file()
    assert json.loads((tmp_path / "sedd-small" / "config.json").read_text())["tokens"] == V - 1
    score = load_released("sedd", tmp_path / "sedd-small", tokenizer_info=TOKENIZER)
    xt, sigma = masked(chunks()), torch.tensor([0.05, 0.6, 3.0])
    torch.testing.assert_close(score.net(xt, sigma=sigma), net(xt, sigma), atol=ATOL, rtol=0)


def test_bd3lm_hf_folder_as_push_to_hf_writes_it(tmp_path, tokenizer):
    """push_to_hf.py: the Lightning state (backbone.* and the clipped-interval buffers) loaded, the EMA copied in,
    then save_pretrained."""
    from unie.methods.bd3lm import noisy_stream_logits

    net, _, ema, ema_net = trained(6)
    save_hf_folder(tmp_path / "bd3lm-owt-block_size4", "bd3lm", net, ema, block_size=4, eps=(0.35, 0.8))
    den = load_released("bd3lm", tmp_path / "bd3lm-owt-block_size4", tokenizer_info=TOKENIZER, trust_remote_code=True)
    assert den.block_size == 4 and den.released["sampling_eps_min"] == pytest.approx(0.35)
    x0 = chunks(L=16)
    xt = masked(x0)
    up = ema_net(torch.cat([xt, x0], 1), mask=upstream_block_diff_mask(16, 4), positions=torch.arange(16).repeat(2))
    torch.testing.assert_close(noisy_stream_logits(den.net, xt, x0, 4), up[:, :16], atol=ATOL, rtol=0)


# ---------------------------------------------------------------------- Duo at upstream's vocabulary
def test_duo_at_upstreams_vocabulary(tmp_path, tokenizer):
    """Upstream's Duo is len(tokenizer) wide, GPT-2 + [PAD] (here 50 tokens + [PAD] = 51, [PAD] where our tokenizer
    has its mask): the Lightning checkpoint and the HF folder load, the denoiser's states are all 51 ids, its
    log-probabilities, NELBO integrand and sampler posterior are upstream's at V = 51, and noise draws [PAD]."""
    from unie.methods.duo import duo_posterior as ours_posterior
    from unie.methods.duo import udlm_nelbo_per_token, uniform_tokens

    net, opt, ema, ema_net = trained(7, time_conditioning=True)
    lightning_checkpoint(tmp_path / "duo.ckpt", net, ema, opt, tokenizer, hparams_extra={"vocab_size": None})
    den = load_released("duo", tmp_path / "duo.ckpt", tokenizer_info=TOKENIZER, n_heads=4)
    assert den.V == V and den.sub_to_tok.tolist() == list(range(V)) and den.pad_id == MASK
    save_hf_folder(tmp_path / "duo-hf", "duo", net, ema, time_conditioning=True)
    hf = load_released("duo", tmp_path / "duo-hf", tokenizer_info=TOKENIZER, trust_remote_code=True)
    assert hf.V == V
    g = torch.Generator().manual_seed(0)
    xt = torch.randint(0, V, (3, 16), generator=g)  # states, [PAD] included
    xt[0, :4] = MASK
    t = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    alpha = 1 - (1 - 1e-3) * t  # Duo's log-linear schedule
    sigma = -torch.log(alpha)
    up_logp = ema_net(xt, sigma.float()).log_softmax(-1)  # DUO_BASE._process_model_output: over all 51
    for d in (den, hf):
        torch.testing.assert_close(d.logp_x0(xt, t), up_logp, atol=ATOL, rtol=0)
    x0 = torch.randint(0, V - 1, (3, 16), generator=g)
    ours = udlm_nelbo_per_token(up_logp.double(), xt, x0, alpha, torch.full_like(t, -(1 - 1e-3)))
    up = duo_nll_per_token(
        up_logp.double(), xt, x0, alpha[:, None], torch.full((3, 1), -(1 - 1e-3), dtype=torch.float64), V
    )
    torch.testing.assert_close(ours, up, atol=1e-8, rtol=1e-8)
    x_theta = up_logp.double().exp()
    torch.testing.assert_close(
        ours_posterior(x_theta, xt, 0.4, 0.7), duo_posterior(x_theta, xt, 0.7, 0.4, V), atol=1e-12, rtol=1e-10
    )
    draws = den.sub_to_tok[uniform_tokens((20000,), den.V, torch.Generator().manual_seed(1))]
    assert (draws == MASK).sum() > 0.5 * 20000 / V  # upstream's noise draws [PAD] as often as any token
    narrow = Backbone(V - 1, time_conditioning=True, seed=8)  # a 50-wide Duo: no release is
    opt2, ema2 = train_steps(narrow, sigma=0.5)
    lightning_checkpoint(tmp_path / "narrow.ckpt", narrow, ema2, opt2, tokenizer)
    with pytest.raises(ReleasedCheckpointError, match=r"\[PAD\]"):
        load_released("duo", tmp_path / "narrow.ckpt", tokenizer_info=TOKENIZER, n_heads=4)


# ---------------------------------------------------------------------- BD3-LM and SEDD as their authors compute them
def test_bd3lm_ignore_bos_and_evaluation_interval_are_upstreams():
    """The paper profile's BD3-LM (schedule linear, ignore_bos): masking probability t, weight 1/t, t in
    [1e-3, 1] (upstream's validation bounds), position 0 never masked and not counted; the sampler starts with BOS."""
    from unie.methods.bd3lm import BD3LM, block_nelbo, block_times, sample_bd3
    from unie.methods.mdlm import q_xt, subs_logp

    method = BD3LM(TOKENIZER, {"block_size": 4, "schedule": "linear", "ignore_bos": True})
    x0 = chunks(B=4, L=16)
    logits = torch.randn(4, 16, V, generator=torch.Generator().manual_seed(2))
    logp_fn = lambda xt: subs_logp(logits, xt, MASK, method.blocked)  # noqa: E731
    t = block_times(4, 4, torch.Generator().manual_seed(3), method.t_eps)
    assert float(t.min()) >= 1e-3 and float(t.max()) <= 1.0
    tt = t.double().repeat_interleave(4, dim=1)
    torch.testing.assert_close(method.schedule.mask_prob(tt), tt)  # p = t (compute_loss_scaling_and_move_chance)
    ours = block_nelbo(logp_fn, x0, t, method.schedule, MASK, torch.Generator().manual_seed(7), keep_first=True)
    xt = q_xt(x0, method.schedule.mask_prob(tt), MASK, torch.Generator().manual_seed(7))
    assert (xt[:, 0] == MASK).any()  # the draw would mask position 0: ignore_bos keeps it
    up, count = bd3_eval_nelbo(logp_fn(torch.where(torch.arange(16) == 0, x0, xt)), x0, xt, tt, ignore_bos=True)
    torch.testing.assert_close(ours, up, atol=1e-6, rtol=1e-6)
    assert method.scored_tokens(16) == count[0] == 15
    plain = block_nelbo(logp_fn, x0, t, method.schedule, MASK, torch.Generator().manual_seed(7))
    assert (plain - ours).abs().max() > 1e-3
    from unie.models.dit import DiT, DiTConfig

    torch.manual_seed(0)
    dit = DiT(DiTConfig(vocab_size=V, d_model=32, n_layers=1, n_heads=4, cond_dim=16, block_size=4)).eval()
    den = method.wrap(dit)
    x, _ = sample_bd3(den, 6, 16, 8, torch.Generator().manual_seed(4), schedule=method.schedule)
    assert (x[:, 0] == BOS).all()  # _semi_ar_sampler: x_accum[:, 0] = bos_token_id
    off = BD3LM(TOKENIZER, {"block_size": 4}).wrap(dit)
    y, _ = sample_bd3(off, 6, 16, 8, torch.Generator().manual_seed(4))
    assert not (y[:, 0] == BOS).all()


def test_sedd_raw_mask_column_never_reaches_a_draw():
    """Upstream leaves the mask column of unmasked rows as the network gives it; MDLM's analytic SEDD step sums it
    into the staggered mask entry, which the transition of an unmasked token multiplies by 0.  Every position's
    distribution is the same with the column at -inf, and ours (mask column -inf, log space) agrees to 1e-7."""
    from unie.methods.sedd import _without_mask, sedd_log_score, tweedie_logits

    g = torch.Generator().manual_seed(5)
    out = torch.randn(3, 12, V, generator=g, dtype=torch.float64)
    xt = masked(chunks(L=12), rate=0.5)
    out[..., MASK] = torch.where(xt == MASK, out[..., MASK], torch.full_like(out[..., MASK], 8.0))  # large, raw
    sigma = torch.tensor([0.3, 1.0, 2.0], dtype=torch.float64)
    esigm1_log = torch.where(sigma < 0.5, torch.expm1(sigma), sigma.exp() - 1).log()[:, None, None]
    up_log = torch.scatter(out - esigm1_log - math.log(V - 1), -1, xt[..., None], 0.0)  # SEDD.forward
    for dsigma in (0.05, 0.4):
        up = sedd_analytic_probs(up_log, xt, torch.full((3,), dsigma), MASK)
        ours = sedd_log_score(out, xt, sigma, MASK)
        m = xt == MASK
        # the raw column changes nothing: upstream's own step with that column at -inf gives the same numbers, bit
        # for bit; ours agrees to 1e-7 (it works in log space: 1 - (e^dsigma - 1) sum s cancels in float64)
        neg = up_log.masked_fill((xt != MASK)[..., None] & (torch.arange(V) == MASK), -math.inf)
        assert torch.equal(sedd_analytic_probs(neg, xt, torch.full((3,), dsigma), MASK), up)
        torch.testing.assert_close(tweedie_logits(ours[m], dsigma, MASK).softmax(-1), up[m], atol=1e-7, rtol=0)
        assert torch.equal(up[~m], F.one_hot(xt[~m], V).double())  # an unmasked token stays, whatever the column
    # the final denoise (_denoiser_update: probs[..., mask] = 0): the same distribution over real tokens
    probs = sedd_analytic_probs(up_log, xt, sigma, MASK)
    probs[..., MASK] = 0
    m = xt == MASK
    torch.testing.assert_close(
        _without_mask(sedd_log_score(out, xt, sigma, MASK)[m], MASK).softmax(-1),
        probs[m] / probs[m].sum(-1, keepdim=True),
        atol=1e-7,
        rtol=0,
    )


def test_duo_at_gpt2_width_loads_with_the_paper_tokenizer(tmp_path, tokenizer):
    """At the real width: a 50,258-wide Duo checkpoint (GPT-2 + [PAD]) and the paper profile's tokenizer layout
    (GPT-2 + the mask at 50,257): every id a state, [PAD] = our mask id, the curriculum's range exactly upstream's."""
    from unie.methods.duo import REF_GAMMA_MAX, REF_GAMMA_MIN
    from unie.methods.released_methods import DUO_PAD_ID, GPT2_MASKED

    net = Backbone(50258, dim=16, n_blocks=1, n_heads=2, cond_dim=8, time_conditioning=True, seed=11)
    opt, ema = train_steps(net, steps=1, sigma=0.5)
    lightning_checkpoint(tmp_path / "duo.ckpt", net, ema, opt, tokenizer)
    den = load_released("duo", tmp_path / "duo.ckpt", n_heads=2)  # tokenizer_info: GPT-2 + mask by default
    assert den.V == 50258 == GPT2_MASKED["vocab_size"] and int(den.sub_to_tok[-1]) == DUO_PAD_ID == 50257
    assert (den.method.gamma_min, den.method.gamma_max) == (REF_GAMMA_MIN, REF_GAMMA_MAX)
    x = torch.tensor([[50256, 11, 50257, 2]])
    logp = den.logp_x0(x, torch.tensor([0.3], dtype=torch.float64))
    assert logp.shape == (1, 4, 50258) and torch.allclose(logp.exp().sum(-1), torch.ones(1, 4))
    # a tokenizer that keeps Duo's [PAD] and appends a mask after it (50,259 ids): refused, and the message says the
    # network has [PAD] (it does) and which tokenizer reads it
    with pytest.raises(ReleasedCheckpointError) as e:
        load_released(
            "duo",
            tmp_path / "duo.ckpt",
            n_heads=2,
            tokenizer_info={"vocab_size": 50259, "mask_id": 50258, "bos_id": 50256, "eos_id": 50256},
        )
    msg = str(e.value)
    assert "outputs are GPT-2 + [PAD]" in msg and "50,259" in msg and "lacks [PAD]" not in msg and "\n" not in msg
