"""Released checkpoints: tiny stand-ins saved in the upstream formats load through our loader and give the
upstream logits / parameterisations / NELBO (``docs/released-checkpoints.md``)."""

from __future__ import annotations

import dataclasses
import math
import os
import pickle

import pytest
import torch

from unie.core.gumbel import gumbel_argmax

from standins_released import (
    BOS,
    MASK,
    TOKENIZER,
    V,
    random_state,
    reference_logits,
    save_hf,
    save_lightning,
    save_sedd_hub,
    upstream_block_diff_mask,
)
from unie.methods.mdlm import nelbo, q_xt
from unie.methods.released_methods import load_released
from unie.models.released import ReleasedCheckpointError, load_released_net

ATOL = 2e-5


def tokens(B=3, L=16, seed=0, masked=0.4):
    g = torch.Generator().manual_seed(seed)
    x0 = torch.randint(0, V - 1, (B, L), generator=g)
    xt = torch.where(torch.rand(B, L, generator=g) < masked, torch.full_like(x0, MASK), x0)
    return x0, xt


# ---------------------------------------------------------------------- network: logits key for key
@pytest.mark.parametrize("kind", ["mdlm", "bd3lm", "duo"])
def test_hf_folder_logits_match_upstream(tmp_path, kind):
    state, cfg = random_state(kind, seed=1)
    folder = save_hf(tmp_path / kind, kind, state, cfg)
    net, meta = load_released_net(kind, folder, trust_remote_code=True)
    assert meta["format"] == "hf" and net.cfg == cfg
    _, xt = tokens()
    xt = xt.clamp(max=cfg.vocab_size - 1)
    sigma = torch.tensor([0.1, 0.7, 2.0])
    ref = reference_logits(state, cfg, xt, sigma)
    torch.testing.assert_close(net(xt, sigma=sigma), ref, atol=ATOL, rtol=0)
    if not cfg.time_conditioning:  # sigma is zeroed as upstream does, whatever the caller passes
        torch.testing.assert_close(net(xt), ref, atol=ATOL, rtol=0)
    if kind == "bd3lm":
        assert meta["sampling_eps_min"] == pytest.approx(0.3) and net.cfg.block_size == 4


def test_sedd_hub_folder_and_lightning_ckpt(tmp_path):
    state, cfg = random_state("sedd", seed=2)
    hub = save_sedd_hub(tmp_path / "sedd-small", state, cfg)
    net, meta = load_released_net("sedd", hub)  # no auto_map: no grant needed
    _, xt = tokens()
    sigma = torch.tensor([0.05, 0.6, 3.0])
    torch.testing.assert_close(net(xt, sigma=sigma), reference_logits(state, cfg, xt, sigma), atol=ATOL, rtol=0)
    raw, _ = random_state("sedd", seed=3)
    ck = save_lightning(tmp_path / "sedd.ckpt", raw, ema=state)
    net2, meta2 = load_released_net("sedd", ck, n_heads=4)
    assert meta2["ema"] and net2.cfg.time_conditioning
    torch.testing.assert_close(net2(xt, sigma=sigma), reference_logits(state, cfg, xt, sigma), atol=ATOL, rtol=0)


def test_ar_ckpt_uses_ema_and_is_causal(tmp_path):
    ema, cfg = random_state("ar", seed=4)
    raw, _ = random_state("ar", seed=5)
    ck = save_lightning(tmp_path / "ar.ckpt", raw, ema=ema)
    net, meta = load_released_net("ar", ck, n_heads=4)
    assert net.cfg == dataclasses.replace(cfg, cond_dim=net.cfg.cond_dim) and meta["ema"]  # no adaLN: unused
    x, _ = tokens(masked=0.0)
    torch.testing.assert_close(net(x), reference_logits(ema, cfg, x), atol=ATOL, rtol=0)
    raw_net, _ = load_released_net("ar", ck, n_heads=4, use_ema=False)
    torch.testing.assert_close(raw_net(x), reference_logits(raw, cfg, x), atol=ATOL, rtol=0)
    # causal: a later token never changes an earlier position's logits
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % (V - 1)
    torch.testing.assert_close(net(y)[:, :-1], net(x)[:, :-1], atol=1e-6, rtol=0)


def test_mdlm_lightning_ckpt(tmp_path):
    ema, cfg = random_state("mdlm", seed=6)
    raw, _ = random_state("mdlm", seed=7)
    net, _ = load_released_net("mdlm", save_lightning(tmp_path / "mdlm.ckpt", raw, ema=ema), n_heads=4)
    _, xt = tokens()
    torch.testing.assert_close(net(xt), reference_logits(ema, cfg, xt), atol=ATOL, rtol=0)


# ---------------------------------------------------------------------- parameterisations (sampler-facing objects)
def test_mdlm_subs_matches_upstream(tmp_path):
    state, cfg = random_state("mdlm", seed=8)
    den = load_released(
        "mdlm", save_hf(tmp_path / "m", "mdlm", state, cfg), tokenizer_info=TOKENIZER, trust_remote_code=True
    )
    assert den.method_name == "mdlm" and den.mask_id == MASK
    _, xt = tokens()
    # upstream _subs_parameterization with its -1e6 "infinity"
    logits = reference_logits(state, cfg, xt)
    logits[:, :, MASK] += -1e6
    up = logits - torch.logsumexp(logits, -1, keepdim=True)
    un = xt != MASK
    up[un] = -1e6
    up[un, xt[un]] = 0
    ours = den.logp_x0(xt)
    torch.testing.assert_close(ours.exp(), up.exp(), atol=1e-6, rtol=0)
    finite = up > -1e5
    assert torch.equal(torch.isfinite(ours), finite)
    torch.testing.assert_close(ours[finite], up[finite], atol=ATOL, rtol=0)


def test_sedd_score_matches_upstream(tmp_path):
    state, cfg = random_state("sedd", seed=9)
    score = load_released("sedd", save_sedd_hub(tmp_path / "s", state, cfg), tokenizer_info=TOKENIZER)
    _, xt = tokens()
    sigma = torch.tensor([0.2, 0.9, 2.5])
    # upstream SEDD.forward with scale_by_sigma: o - log(e^sigma - 1) - log(V - 1), then xt's entry := 0
    o = reference_logits(state, cfg, xt, sigma)
    esigm1_log = torch.where(sigma < 0.5, torch.expm1(sigma), sigma.exp() - 1).log()[:, None, None]
    up = torch.scatter(o - esigm1_log - math.log(o.shape[-1] - 1), -1, xt[..., None], 0.0)
    ours = score.log_score(xt, sigma)
    real = torch.arange(V) != MASK  # the mask column: upstream leaves it raw on unmasked positions (unused)
    torch.testing.assert_close(ours[..., real], up[..., real], atol=1e-4, rtol=1e-5)
    m = xt == MASK
    torch.testing.assert_close(ours[m], up[m], atol=1e-4, rtol=1e-5)  # masked rows: identical, mask column 0


def test_duo_denoiser_matches_upstream(tmp_path):
    state, cfg = random_state("duo", seed=10)
    den = load_released(
        "duo", save_hf(tmp_path / "d", "duo", state, cfg), tokenizer_info=TOKENIZER, trust_remote_code=True
    )
    x, _ = tokens(masked=0.0)
    t = torch.tensor([0.1, 0.5, 0.95], dtype=torch.float64)
    sigma = -torch.log1p(-(1 - 1e-3) * t)  # Duo's log-linear: sigma = -log alpha_t
    up = reference_logits(state, cfg, x, sigma.float()).log_softmax(-1)  # DUO_BASE._process_model_output
    torch.testing.assert_close(den.logp_x0(x, t), up, atol=ATOL, rtol=0)


def test_a_duo_standin_keeps_no_pad_in_its_samples_as_a_trained_duo(tmp_path):
    """``[PAD]`` (the mask id) is a state of a released Duo's process, drawn by its noise, but never in the data: a
    trained Duo gives it ~0 at the last step.  The stand-in's output bias says so (``DUO_PAD_BIAS``), so a gpu-smoke
    run's Duo samples hold no ``[PAD]``, which the toy world's word-level evaluators could not read (a CPU run of
    that profile failed on ``'bone[PAD]bakes'``).  Random weights without it keep about one token in ``V``."""
    from unie.methods.duo import DuoSamplerOptions, sample_duo
    from unie.models.standins import DUO_PAD_BIAS

    def pads(state):
        den = load_released(
            "duo",
            save_hf(tmp_path / str(len(list(tmp_path.iterdir()))), "duo", state, cfg),
            tokenizer_info=TOKENIZER,
            trust_remote_code=True,
        )
        x, _ = sample_duo(den, 64, 32, 4, torch.Generator().manual_seed(0), DuoSamplerOptions(), batch_size=64)
        assert x.shape == (64, 32)
        return int((x == MASK).sum())

    state, cfg = random_state("duo", seed=14)
    assert state["output_layer.linear.bias"][MASK] == DUO_PAD_BIAS
    assert pads(state) == 0
    state["output_layer.linear.bias"][MASK] = 0.0  # as every other output: [PAD] kept like any state
    assert pads(state) > 64 * 32 / V / 4


def test_bd3lm_two_stream_and_block_size(tmp_path):
    from unie.methods.bd3lm import noisy_stream_logits

    state, cfg = random_state("bd3lm", seed=11)
    den = load_released(
        "bd3lm", save_hf(tmp_path / "b", "bd3lm", state, cfg), tokenizer_info=TOKENIZER, trust_remote_code=True
    )
    assert den.block_size == 4 and den.method.block_size == 4
    x0, xt = tokens(L=16)
    pos = torch.arange(16).repeat(2)
    up = reference_logits(state, cfg, torch.cat([xt, x0], 1), mask=upstream_block_diff_mask(16, 4), positions=pos)
    torch.testing.assert_close(noisy_stream_logits(den.net, xt, x0, 4), up[:, :16], atol=ATOL, rtol=0)
    with pytest.raises(ReleasedCheckpointError, match="block_size"):
        load_released(
            "bd3lm", tmp_path / "b", tokenizer_info=TOKENIZER, trust_remote_code=True, options={"block_size": 8}
        )


def test_ar_model_matches_upstream(tmp_path):
    ema, cfg = random_state("ar", seed=12)
    ar = load_released("ar", save_lightning(tmp_path / "ar.ckpt", ema, ema=ema), tokenizer_info=TOKENIZER, n_heads=4)
    x, _ = tokens(masked=0.0)
    # upstream: AR.forward(x0[:, :-1]) with the mask logit at -1000 then log_softmax, x0[:, 0] = bos
    inp = torch.cat([torch.full_like(x[:, :1], BOS), x[:, :-1]], 1)
    logits = reference_logits(ema, cfg, inp)
    logits[:, :, MASK] = -1000.0
    up = logits.log_softmax(-1)
    ours = ar.logp_next(x)
    real = torch.arange(V) != MASK
    torch.testing.assert_close(ours[..., real], up[..., real], atol=ATOL, rtol=0)


def test_released_ar_samples_with_its_dict_cache(tmp_path):
    """A released AR is a DiT (no preallocated cache): the sampler falls back to the DiT's dict KV cache and draws
    exactly the tokens of a cache-free teacher-forced loop (a GPU run failed here: 'DiT' has no static_cache)."""
    ema, _ = random_state("ar", seed=13)
    ar = load_released("ar", save_lightning(tmp_path / "ar.ckpt", ema, ema=ema), tokenizer_info=TOKENIZER, n_heads=4)
    x = ar.sample(2, 6, generator=torch.Generator().manual_seed(0))
    assert x.shape == (2, 6) and ar.decode_path == "eager" and not (x == MASK).any()
    g = torch.Generator().manual_seed(0)  # the same draws, recomputing the whole prefix each step
    ref = torch.empty(2, 0, dtype=torch.long)
    for _ in range(6):
        inp = torch.cat([torch.full((2, 1), BOS), ref], 1)
        logp = ar.normalise(ar.net(inp)[:, -1])
        ref = torch.cat([ref, gumbel_argmax(logp, g)[:, None]], 1)
    assert torch.equal(x, ref)


# ---------------------------------------------------------------------- NELBO through our estimator, by hand
def test_mdlm_nelbo_by_hand(tmp_path):
    state, cfg = random_state("mdlm", seed=13)
    den = load_released(
        "mdlm", save_hf(tmp_path / "m", "mdlm", state, cfg), tokenizer_info=TOKENIZER, trust_remote_code=True
    )
    x0, _ = tokens(masked=0.0)
    t = torch.tensor([0.2, 0.55, 0.9], dtype=torch.float64)
    eps = 1e-3
    ours = nelbo(den, x0, t, den.method.schedule, MASK, torch.Generator().manual_seed(7))
    # the same mask draw (q_xt with the same seed), then the continuous-time NELBO written out:
    # alpha_t = 1 - (1 - eps) t, alpha'_t = -(1 - eps); weight -alpha'_t / (1 - alpha_t) (= 1/t)
    xt = q_xt(x0, 1 - (1 - (1 - eps) * t), MASK, torch.Generator().manual_seed(7))
    assert (xt == MASK).any() and (xt != MASK).any()
    alpha, dalpha = 1 - (1 - eps) * t, torch.full_like(t, -(1 - eps))
    logits = reference_logits(state, cfg, xt).double()
    logits[:, :, MASK] = -math.inf
    logp = logits.log_softmax(-1).gather(-1, x0[..., None]).squeeze(-1)
    by_hand = torch.stack([(-dalpha[b] / (1 - alpha[b])) * -(logp[b][xt[b] == MASK]).sum() for b in range(len(t))])
    torch.testing.assert_close(ours, by_hand, atol=1e-4, rtol=1e-6)
    torch.testing.assert_close(-dalpha / (1 - alpha), 1 / t)


# ---------------------------------------------------------------------- errors: one clear line each
def one_line(excinfo) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


def test_missing_grant_missing_files_wrong_keys(tmp_path):
    state, cfg = random_state("mdlm", seed=14)
    folder = save_hf(tmp_path / "m", "mdlm", state, cfg)
    with pytest.raises(ReleasedCheckpointError) as e:
        load_released_net("mdlm", folder)
    assert "trust_remote_code" in one_line(e) and "config.json" in one_line(e)
    with pytest.raises(ReleasedCheckpointError) as e:
        load_released_net("mdlm", tmp_path / "nowhere")
    assert "missing" in one_line(e)
    with pytest.raises(ReleasedCheckpointError) as e:
        load_released_net("ar", tmp_path / "ar.ckpt")
    assert "missing" in one_line(e)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ReleasedCheckpointError) as e:
        load_released_net("mdlm", folder, trust_remote_code=True)
    assert "no weights" in one_line(e)
    broken = dict(state)
    broken.pop("blocks.1.attn_out.weight")
    broken["blocks.1.attn_proj.weight"] = torch.zeros(4)
    f2 = save_hf(tmp_path / "m2", "mdlm", broken, cfg)
    with pytest.raises(ReleasedCheckpointError) as e:
        load_released_net("mdlm", f2, trust_remote_code=True)
    msg = one_line(e)
    assert "key set differs" in msg and "blocks.1.attn_out.weight" in msg and "attn_proj" in msg
    with pytest.raises(ReleasedCheckpointError) as e:  # a diffusion checkpoint named as the AR
        load_released_net("ar", save_lightning(tmp_path / "m.ckpt", state, ema=state), n_heads=4)
    assert "sigma_map" in one_line(e)
    with pytest.raises(ReleasedCheckpointError) as e:  # no EMA where upstream evaluates with it
        load_released_net("mdlm", save_lightning(tmp_path / "noema.ckpt", state, ema=None), n_heads=4)
    assert "EMA" in one_line(e)
    with pytest.raises(ReleasedCheckpointError) as e:  # wrong tokenizer
        load_released("mdlm", folder.parent / "m2", trust_remote_code=True, tokenizer_info={"vocab_size": 99})
    one_line(e)


def test_ckpt_unpickling_runs_no_foreign_code(tmp_path):
    """The hyper-parameters' classes are never imported, and a global outside torch's weights-only list is an
    inert placeholder: a pickled ``os.system`` call does nothing."""
    ema, cfg = random_state("ar", seed=15)
    ck = save_lightning(tmp_path / "ar.ckpt", ema, ema=ema)
    obj = torch.load(ck, weights_only=False)
    flag = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {flag}",))

    obj["hyper_parameters"]["payload"] = Payload()
    torch.save(obj, ck)
    net, meta = load_released_net("ar", ck, n_heads=4)
    assert not flag.exists()
    x, _ = tokens(masked=0.0)
    torch.testing.assert_close(net(x), reference_logits(ema, cfg, x), atol=ATOL, rtol=0)
    (tmp_path / "junk.ckpt").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ReleasedCheckpointError) as e:
        load_released_net("ar", tmp_path / "junk.ckpt")
    one_line(e)


def test_dtype_argument(tmp_path):
    state, cfg = random_state("mdlm", seed=16)
    net, _ = load_released_net(
        "mdlm", save_hf(tmp_path / "m", "mdlm", state, cfg), trust_remote_code=True, dtype=torch.float64
    )
    assert net.vocab_embed.embedding.dtype == torch.float64
    _, xt = tokens()
    torch.testing.assert_close(net(xt), reference_logits(state, cfg, xt), atol=1e-4, rtol=0)


def test_pipeline_load_wrapped_reads_a_released_marker(tmp_path):
    import json
    from types import SimpleNamespace

    from unie.pipeline.model_files import load_wrapped

    state, cfg = random_state("mdlm", seed=17)
    folder = save_hf(tmp_path / "hf", "mdlm", state, cfg)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "released.json").write_text(
        json.dumps({"kind": "mdlm", "path": str(folder), "trust_remote_code": True})
    )
    den = load_wrapped(tmp_path / "model", SimpleNamespace(info=lambda: dict(TOKENIZER)))
    _, xt = tokens()
    assert den.method_name == "mdlm"
    torch.testing.assert_close(den.net(xt), reference_logits(state, cfg, xt), atol=ATOL, rtol=0)
