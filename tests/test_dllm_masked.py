"""Inv-E where it is not degenerate: Algorithm 3 with a proxy that reads the masked state (``ar_context: masked``),
for a DLLM that shares the proxy's tokenizer (the Dream-like model), and the mask-aware proxy's training."""

from __future__ import annotations

import json

import pytest
import torch

from unie.core.options import ConfigError
from unie.data.dllm_format import ar_sft_rows, dllm_prompt_rows, split_rows
from unie.dllm.backbone import DecodeOptions
from unie.dllm.bridge import BridgeError, ProxyBridge
from unie.dllm.energy_decoding import DLLMEnergyOptions, energy_decode
from unie.energy.energies import energy, logp_dlm_xs, position_sets
from unie.methods.ar import AR
from test_dllm import PROMPTS, TEXTS, backbone, bpe, net_for, proxy, word  # noqa: F401  (fixtures)

DECODE = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2)  # N = 4 iterations over two blocks
TWO = [PROMPTS[0], "the pie answer :"]  # prompts of two lengths: two left paddings


def window_calls(monkeypatch, tok, name, ar_context, seed=0):
    """Algorithm 3 on the Dream-like tiny backbone with the word proxy (B = 2 prompts of different lengths, K = 3,
    every iteration in the window): the arguments and energies of every energy call."""
    import unie.dllm.energy_decoding as alg3

    calls, real = [], alg3.selection_energy

    def spy(selection, *args, **kw):  # selection_energy(selection, name, xt, x0, xs, logp, scorer, ctx, mask_id)
        E = real(selection, *args, **kw)
        calls.append((args, E))
        return E

    monkeypatch.setattr(alg3, "selection_energy", spy)
    x = dllm_prompt_rows(tok, TWO, 12, DECODE.gen_length)
    opts = DLLMEnergyOptions(energy=name, K=3, w=1.0, ar_context=ar_context, temperature=1.0)
    out, stats = energy_decode(
        backbone(tok, shift=True), ProxyBridge(proxy(tok), tok), x, DECODE, opts, torch.Generator().manual_seed(seed)
    )
    assert len(calls) == 4 and not (out == tok.mask_id).any()
    return calls, stats


def brute_logp(ar, tok, ctx: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, end: int) -> float:
    """``Σ_{i in positions, i < end} log p_AR(tokens_i | [<bos>] + ctx after <bos>, before i)``, one forward of the
    proxy per position on that prefix alone; positions after the first ``<eos>`` of ``tokens`` are not scored (the
    text ends there)."""
    ctx, tokens = ctx.tolist(), tokens.tolist()
    b = ctx.index(tok.bos_id)
    total = 0.0
    for i in range(b + 1, end):
        if positions[i] and tok.eos_id not in tokens[b + 1 : i]:
            logits = ar.logits(torch.tensor([[tok.bos_id] + ctx[b + 1 : i]]))[0, -1].double().log_softmax(-1)
            total += float(logits[tokens[i]])
    return total


@pytest.mark.parametrize("name", ["ind", "inv", "uni"])
def test_masked_energies_equal_their_definition_from_the_proxys_own_logits(word, name, monkeypatch):
    """Every energy Algorithm 3 computes with ``ar_context: masked`` (B = 2, K = 3, every window iteration, two
    blocks) equals its definition (docs/decisions.md) recomputed position by position from the proxy's logits on
    each prefix alone: ``log p_AR(x0|xt) = Σ_{M_t} log p_AR(x0_i | xt_<i)``, ``log p_AR(xs|xt) = Σ_D ...``,
    ``log p_AR(x0|xs) = Σ_{M_s} log p_AR(x0_i | xs_<i)``, over the current block (the proxy's scores stop at its
    end), exactly (no per-row constant is dropped)."""
    calls, _ = window_calls(monkeypatch, word, name, "masked")
    ar = proxy(word)
    with_M_s = 0
    for (_, xt, x0, xs, logp, scorer, ctx, mask_id), E in calls:
        assert ctx == "masked"
        end = scorer.score_until
        M_t, M_s, D = position_sets(xt, xs, mask_id)
        assert not M_t[..., end:].any()  # later positions are filled, not masked: only the block is scored
        with_M_s += int(M_s.any(-1).sum())
        want = torch.zeros(E.shape, dtype=torch.float64)
        for b in range(E.shape[0]):
            for k in range(E.shape[1]):
                lq_x0 = float(logp[b, M_t[b, k], x0[b, k][M_t[b, k]]].double().sum())
                lq_xs = float(logp[b, D[b, k], xs[b, k][D[b, k]]].double().sum())
                x0_xt = brute_logp(ar, word, xt[b], x0[b, k], M_t[b, k], end)
                xs_xt = brute_logp(ar, word, xt[b], x0[b, k], D[b, k], end)
                x0_xs = brute_logp(ar, word, xs[b, k], x0[b, k], M_s[b, k], end)
                want[b, k] = {
                    "ind": lq_x0 - x0_xt,
                    "inv": (lq_xs - xs_xt) + (x0_xt - x0_xs),
                    "uni": (lq_xs - xs_xt) + (lq_x0 - x0_xs),
                }[name]
        assert torch.allclose(E.double(), want, atol=1e-4), (name, E, want)
    assert with_M_s >= 2  # the invariance term log p_AR(x0|xs) had positions to score


def test_masked_inv_e_is_not_the_teacher_forced_collapse(word, monkeypatch):
    """With a chain-rule proxy read by teacher forcing, Inv-E is exactly ``log p_theta(xs|xt)`` (its AR terms cancel);
    read on the masked state, the same proxy's Inv-E moves the candidates of a row apart by more than a constant:
    ``Inv-E - log p_theta(xs|xt) = Σ_{M_s} [log p_AR(x0_i | xt_<i) - log p_AR(x0_i | xs_<i)]``, what revealing ``D``
    changes in the proxy's prediction of the still-masked positions, not zero."""
    calls, _ = window_calls(monkeypatch, word, "inv", "teacher_forced")
    spread = []
    for (_, xt, x0, xs, logp, scorer, _, mask_id), _ in calls:
        dlm = logp_dlm_xs(logp, xt, xs, mask_id).double()
        tf = energy("inv", xt, x0, xs, logp, scorer, "teacher_forced", mask_id).double()
        assert torch.allclose(tf, dlm, atol=1e-6)  # the collapse, bit for bit up to float rounding
        masked = energy("inv", xt, x0, xs, logp, scorer, "masked", mask_id)
        term = (masked - dlm).double()  # the invariance term, (B, K)
        spread.append(term.max(-1).values - term.min(-1).values)
    assert max(float(s.max()) for s in spread) > 1e-2


def test_masked_reading_needs_the_dllms_tokenizer(word, bpe):
    """The LLaDA-like model's BPE cannot be read by the word-level proxy without the text bridge: Algorithm 3 refuses
    ``ar_context: masked`` before any forward, naming the option and both tokenizers; a reading the bridge has no
    meaning for (``exact``) is refused by the options."""

    class NoForward:
        mask_id, eos_id, tokenizer = bpe.mask_id, bpe.eos_id, bpe

        def logits(self, x):
            raise AssertionError("no forward before the refusal")

    x = dllm_prompt_rows(bpe, PROMPTS, 30, DECODE.gen_length)
    bridge = ProxyBridge(proxy(word), bpe)
    with pytest.raises(BridgeError, match=r"ar_context 'masked' needs a proxy that shares the DLLM's tokenizer.*bpe"):
        energy_decode(NoForward(), bridge, x, DECODE, DLLMEnergyOptions(ar_context="masked"))
    with pytest.raises(BridgeError, match="teacher-forced"):
        bridge.token_logp(x, torch.stack([x, x], dim=1))
    assert ProxyBridge(proxy(word), word).shares_tokenizer and not bridge.shares_tokenizer
    with pytest.raises(ValueError, match="ar_context 'exact' cannot be read from a DLLM's candidates"):
        DLLMEnergyOptions(ar_context="exact")


def test_mask_aware_proxy_masks_only_the_answer_of_sft_rows(word):
    """``mask_inputs`` on the DLLM half's SFT rows: the context masks answer positions only (the prompt is never
    masked when a DLLM decodes), half the batch (the even rows) stays clean, the targets stay clean."""
    x = ar_sft_rows(word, PROMPTS * 4, ["1 2", "[ 1 3 ]"] * 4, 20)
    tokens, answer = split_rows(x)
    method = AR(word.info(), {"mask_inputs": True})
    ctx = method.masked_context(tokens, torch.Generator().manual_seed(0), answer)
    masked = ctx == word.mask_id
    assert masked[1::2].any() and not masked[0::2].any()
    assert not (masked & ~answer).any() and torch.equal(ctx[~masked], tokens[~masked])
    net = net_for(word, causal=True, T=20)
    with torch.no_grad():
        plain = AR(word.info()).loss(net, x, torch.Generator().manual_seed(0))
        aware = method.loss(net, x, torch.Generator().manual_seed(0))
    assert aware.item() != plain.item()


# ---------------------------------------------------------------------- end to end: trained checkpoints, lm-eval
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The toy tasks (2 test items each), the DLLM half's data, and three tiny checkpoints trained 2 steps each: a
    Dream-like model (word tokenizer), a mask-aware proxy (word) and a LLaDA-like model (BPE)."""
    from unie.pipeline.dllm_runs import prepare_dllm_data, train_dllm_model
    from unie.pipeline.task_files import write_lmeval_tasks

    root = tmp_path_factory.mktemp("masked")
    tasks = write_lmeval_tasks(root / "tasks", 4, 2, 0)
    data = root / "tasks" / "data"
    prepare_dllm_data(
        {t: data / f"{t}_train.jsonl" for t in tasks if (data / f"{t}_train.jsonl").exists()},
        {t: data / f"{t}_test.jsonl" for t in tasks},
        TEXTS,
        root / "dllm",
        gen_length=16,
        bpe_vocab_size=300,
        n_pretrain_texts=len(TEXTS),
        log=lambda m: None,
    )
    arch, train = (
        {"d_model": 16, "n_layers": 1, "n_heads": 2},
        {"steps": 2, "batch_size": 4, "lr": 1e-3, "ckpt_every": 2},
    )
    specs = {
        "dream": {"method": "dream", "tokenizer": "word"},
        "proxy_masked": {"method": "ar", "tokenizer": "word", "options": {"mask_inputs": True}},
        "llada": {"method": "llada", "tokenizer": "bpe"},
    }
    for name, spec in specs.items():
        train_dllm_model(
            name,
            {**spec, "data": "sft", "arch": arch, "train": train},
            root / "dllm",
            root / "models" / name,
            root / "ckpt" / name,
            log=lambda m: None,
        )
    return root


def test_masked_rows_decode_end_to_end_through_lm_eval(trained, monkeypatch, hf_offline):
    """A Dream-like row with the mask-aware proxy and ``ar_context: masked`` (the grid's ``dream_uni_masked``) runs
    through the pipeline's entry to lm-eval (``row_model_args`` -> ``unie.dllm.lmeval.evaluate`` -> ``DLLMDecoder``):
    the proxy reads the masked states (``ProxyBridge.masked_logp`` is called), the results record the reading, and
    the LLaDA-like model with the same row options is refused when its decoder is built, naming the option."""
    from unie.dllm.decoder import build_decoder
    from unie.dllm.lmeval import evaluate
    from unie.dllm.rows import row_model_args

    reads = []
    real = ProxyBridge.masked_logp
    monkeypatch.setattr(
        ProxyBridge, "masked_logp", lambda self, *a, **k: reads.append(a[0].shape) or real(self, *a, **k)
    )
    row = {
        "model": "dream",
        "proxy": "proxy_masked",
        "options": {"confidence": "entropy", "energy": "uni", "ar_context": "masked"},
    }
    dllm = {
        "decoding": {"gen_length": 16, "block_length": 4, "tokens_per_step": 2},
        "energy": {"K": 3, "w": 0.2, "ar_context": "teacher_forced", "temperature": 0.1},
    }
    models = trained / "models"
    inputs = {"model": models / "dream" / "model.safetensors", "proxy": models / "proxy_masked" / "model.safetensors"}
    args = row_model_args("dream_uni_masked", row, dllm, inputs, "cpu")
    assert args["ar_context"] == "masked"
    out = trained / "rows" / "dream_uni_masked"
    results = evaluate(
        args, ["toy_math", "toy_mbpp"], trained / "tasks", out, batch_size=4, limit=2, log=lambda m: None
    )
    res = json.loads(results.read_text())
    assert res["config"]["unie_decoder"]["options"]["ar_context"] == "masked"
    assert set(res["results"]) >= {"toy_math", "toy_mbpp"}
    assert json.loads((out / "throughput.json").read_text())["window_rows"] > 0
    assert reads  # the proxy read the DLLM's masked states, not text
    llada = row_model_args(
        "llada_uni_masked",
        {**row, "model": "llada"},
        dllm,
        {**inputs, "model": models / "llada" / "model.safetensors"},
        "cpu",
    )
    with pytest.raises(ConfigError, match=r"ar_context 'masked' needs a proxy that shares the DLLM's tokenizer"):
        build_decoder(llada)
