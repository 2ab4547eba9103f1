"""The training loop (resumption, signatures, non-finite losses), checkpoints, and train_from_spec end to end."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from unie.methods.ar import ARModel
from unie.core.options import TrainConfig
from unie.data.corpus import tokenize_corpus, write_text_parquet
from unie.data.tokens import load_tokens
from unie.pipeline.model_files import load_wrapped, train_from_spec
from unie.methods.mdlm import MDLM, MDLMDenoiser
from unie.models.checkpoint import CheckpointError, load_model, save_model
from unie.data.toy_world import generate_corpus
from unie.core.train import NonFiniteLossError, lr_at, run_signature, train

CFG = TrainConfig(steps=8, batch_size=4, lr=1e-2, warmup=3, ckpt_every=3, log_every=2, ema=0.9, seed=0)


def _quiet(_msg):
    pass


def _run(net_factory, tok_info, data, ckpt_dir, signature="sig", stop_after=None, cfg=CFG, logs=None):
    net = net_factory(max_len=8)
    log = _quiet if logs is None else logs.append
    ema, history = train(
        net, MDLM(tok_info).loss, data, cfg, ckpt_dir, signature, log=log, stop_after=stop_after, progress=False
    )
    return net, ema, history


def _assert_same_weights(a: torch.nn.Module, b: torch.nn.Module):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def _without_time(history):
    """History records minus ``elapsed_s`` (wall-clock time is the one field that may legitimately differ)."""
    return [{k: v for k, v in rec.items() if k != "elapsed_s"} for rec in history]


@pytest.fixture
def data(random_words):
    return random_words(32, 8, seed=0)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, net_factory, tok_info, random_words):
    """An uninterrupted run (trained once): ``(net, ema, history, ckpt_dir)``."""
    ckpt = tmp_path_factory.mktemp("ref")
    return (*_run(net_factory, tok_info, random_words(32, 8, seed=0), ckpt), ckpt)


def test_training_changes_weights_and_logs(net_factory, reference):
    net, ema, history, ckpt = reference
    assert [r["step"] for r in history] == [2, 4, 6, 8]
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in history)
    assert history[0]["lr"] == lr_at(1, CFG) and history[-1]["lr"] == CFG.lr
    init = net_factory(max_len=8)
    assert any(not torch.equal(p, q) for p, q in zip(net.parameters(), init.parameters()))
    assert any(not torch.equal(p, q) for p, q in zip(ema.parameters(), net.parameters()))  # EMA lags
    assert not any(p.requires_grad for p in ema.parameters())
    state = torch.load(ckpt / "last.pt", weights_only=True)
    assert state["step"] == 8 and state["signature"] == "sig"
    _assert_same_weights(ema, _load_state(net_factory, state["ema"]))


def _load_state(net_factory, state):
    net = net_factory(max_len=8)
    net.load_state_dict(state)
    return net


@pytest.mark.parametrize("stop_after", [4, 5])
def test_resume_gives_identical_weights(net_factory, tok_info, data, tmp_path, reference, stop_after):
    ref_net, ref_ema, _, _ = reference
    _, _, partial = _run(net_factory, tok_info, data, tmp_path, stop_after=stop_after)
    assert all(r["step"] <= stop_after for r in partial)
    state = torch.load(tmp_path / "last.pt", weights_only=True)
    assert state["step"] == stop_after
    logs = []
    net, ema, _ = _run(net_factory, tok_info, data, tmp_path, logs=logs)
    assert any(f"at step {stop_after}" in m for m in logs), logs
    _assert_same_weights(net, ref_net)
    _assert_same_weights(ema, ref_ema)


@pytest.mark.parametrize("stop_after", [4, 5])
def test_resume_gives_identical_history(net_factory, tok_info, data, tmp_path, reference, stop_after):
    """The logged history (minus wall-clock time) must not depend on where the run was interrupted,
    including an interruption between two log steps (stop_after=5 with log_every=2)."""
    _, _, ref_history, _ = reference
    _run(net_factory, tok_info, data, tmp_path, stop_after=stop_after)
    _, _, history = _run(net_factory, tok_info, data, tmp_path)
    assert _without_time(history) == _without_time(ref_history)


def test_finished_run_is_not_trained_again(net_factory, tok_info, data, tmp_path):
    cfg = TrainConfig(steps=3, batch_size=4, warmup=1, ckpt_every=2, log_every=1)
    _, ema1, h1 = _run(net_factory, tok_info, data, tmp_path, cfg=cfg)
    calls = []

    def loss(net, x, g):
        calls.append(1)
        return MDLM(tok_info).loss(net, x, g)

    ema2, h2 = train(net_factory(max_len=8), loss, data, cfg, tmp_path, "sig", log=_quiet, progress=False)
    assert not calls and h1 == h2
    _assert_same_weights(ema1, ema2)


def test_mismatched_signature_restarts(net_factory, tok_info, data, tmp_path):
    cfg = TrainConfig(steps=4, batch_size=4, warmup=1, ckpt_every=2, log_every=1)
    _run(net_factory, tok_info, data, tmp_path / "a", signature="one", stop_after=2, cfg=cfg)
    logs = []
    net, ema, history = _run(net_factory, tok_info, data, tmp_path / "a", signature="two", cfg=cfg, logs=logs)
    assert any("not resuming" in m and "another run specification" in m for m in logs), logs
    assert [r["step"] for r in history] == [1, 2, 3, 4]
    fresh_net, fresh_ema, fresh_history = _run(net_factory, tok_info, data, tmp_path / "b", signature="two", cfg=cfg)
    _assert_same_weights(net, fresh_net)
    _assert_same_weights(ema, fresh_ema)
    assert _without_time(history) == _without_time(fresh_history)
    assert torch.load(tmp_path / "a" / "last.pt", weights_only=True)["signature"] == "two"


def test_run_signature():
    a = run_signature(CFG, {"model": 1})
    assert a == run_signature(CFG, {"model": 1})
    assert a != run_signature(CFG, {"model": 2})
    assert a != run_signature(TrainConfig(**{**CFG.__dict__, "lr": 1e-3}), {"model": 1})
    # every training option is part of the run: a checkpoint of a 30-step run must not be returned for 15 steps,
    # and the checkpoint/log cadence changes the dev selection and the history
    for key, value in (("steps", 99), ("ckpt_every", 7), ("log_every", 1), ("seed", 5), ("warmup", 1)):
        assert a != run_signature(TrainConfig(**{**CFG.__dict__, key: value}), {"model": 1}), key


def test_lr_warmup():
    cfg = TrainConfig(lr=1.0, warmup=4)
    assert [lr_at(s, cfg) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert lr_at(0, TrainConfig(lr=0.5, warmup=0)) == 0.5


def test_nan_loss_raises_before_writing(net_factory, data, tmp_path):
    def nan_loss(net, x, g):
        return net(x).sum() * float("nan")

    with pytest.raises(NonFiniteLossError, match="step 0"):
        train(net_factory(max_len=8), nan_loss, data, CFG, tmp_path, "sig", log=_quiet, progress=False)
    assert not (tmp_path / "last.pt").exists()


# ---------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip(net_factory, tok_info, tmp_path, monkeypatch):
    net = net_factory(causal=True, d_model=32, n_heads=4)
    save_model(net, tmp_path / "m", "ar", tok_info, extra={"note": 1})
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors"]
    assert load_file(str(tmp_path / "m" / "model.safetensors")).keys() == net.state_dict().keys()

    def no_pickle(*a, **kw):
        raise AssertionError("load_model must not unpickle (torch.load)")

    monkeypatch.setattr(torch, "load", no_pickle)
    loaded, meta = load_model(tmp_path / "m", tokenizer_info=tok_info, expect_method=("ar", "mdlm"))
    assert loaded.cfg == net.cfg and loaded.cfg.causal
    _assert_same_weights(loaded, net)
    assert not loaded.training
    assert meta["method"] == "ar" and meta["extra"] == {"note": 1} and meta["tokenizer"] == tok_info


def test_load_model_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="missing checkpoint"):
        load_model(tmp_path / "nowhere")


def test_load_model_missing_weights(net_factory, tok_info, tmp_path):
    save_model(net_factory(), tmp_path, "mdlm", tok_info)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing checkpoint weights"):
        load_model(tmp_path)


def test_load_model_wrong_method(net_factory, tok_info, tmp_path):
    save_model(net_factory(), tmp_path, "mdlm", tok_info)
    with pytest.raises(CheckpointError, match="'mdlm'"):
        load_model(tmp_path, expect_method="ar")


@pytest.mark.parametrize("key,value", [("vocab_size", 999), ("fingerprint", "0123456789abcdef"), ("mask_id", 0)])
def test_load_model_tokenizer_mismatch(net_factory, tok_info, tmp_path, key, value):
    save_model(net_factory(), tmp_path, "mdlm", tok_info)
    with pytest.raises(CheckpointError, match=key):
        load_model(tmp_path, tokenizer_info={**tok_info, key: value})


# ---------------------------------------------------------------------- train_from_spec
@pytest.fixture(scope="module")
def toy_files(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("toy")
    tok.save(root / "tokenizer")
    write_text_parquet(generate_corpus("owt", "train", 48, 8, seed=0), root / "raw.parquet")
    n = tokenize_corpus(root / "raw.parquet", tok, root / "train.parquet", 8, insert_eos=False, chunk_specials=False)
    assert n == 48
    return root


def _spec(method):
    return {
        "method": method,
        "arch": {"d_model": 16, "n_layers": 1, "n_heads": 2, "mlp_ratio": 2},
        "train": {"steps": 4, "batch_size": 8, "lr": 1e-3, "warmup": 1, "ckpt_every": 2, "log_every": 2},
    }


@pytest.mark.parametrize("method", ["mdlm", "ar"])
def test_train_from_spec_end_to_end(toy_files, tok, tmp_path, method):
    out = tmp_path / "out"
    ema, history = train_from_spec(
        method,
        _spec(method),
        toy_files / "train.parquet",
        toy_files / "tokenizer",
        out,
        tmp_path / "ckpt",
        seq_len=8,
        log=_quiet,
    )
    assert [r["step"] for r in history] == [2, 4]
    net, meta = load_model(out, tokenizer_info=tok.info(), expect_method=method)
    _assert_same_weights(net, ema)
    assert meta["model"]["causal"] == (method == "ar") and meta["model"]["vocab_size"] == tok.vocab_size
    assert meta["extra"]["train"] == _spec(method)["train"]
    assert json.loads((out / "history.json").read_text())[-1]["step"] == 4
    wrapped = load_wrapped(out, tok)
    x = load_tokens(toy_files / "train.parquet", limit=3).long()
    if method == "mdlm":
        assert isinstance(wrapped, MDLMDenoiser)
        xt = x.clone()
        xt[:, ::2] = tok.mask_id
        assert torch.isfinite(wrapped.logp_x0(xt).logsumexp(-1)).all()
    else:
        assert isinstance(wrapped, ARModel)
        assert torch.isfinite(wrapped.log_prob(x)).all()


def test_train_from_spec_interrupted_writes_only_when_done(toy_files, tmp_path):
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    args = (_spec("mdlm"), toy_files / "train.parquet", toy_files / "tokenizer")
    torch.manual_seed(0)  # the same initialisation for both runs (see the next test)
    train_from_spec("m", *args, out, ckpt, seq_len=8, log=_quiet, stop_after=2)
    assert not (out / "model.safetensors").exists() and not (out / "config.json").exists()
    assert torch.load(ckpt / "last.pt", weights_only=True)["step"] == 2
    logs = []
    train_from_spec("m", *args, out, ckpt, seq_len=8, log=logs.append)
    assert any("resumed" in m and "step 2" in m for m in logs), logs
    torch.manual_seed(0)
    ref, _ = train_from_spec("m", *args, tmp_path / "out2", tmp_path / "ckpt2", seq_len=8, log=_quiet)
    _assert_same_weights(load_model(out)[0], ref)


def test_train_options_are_one_frozen_record(net_factory, tok_info, data, toy_files, tmp_path):
    """train's and train_from_spec's options are frozen dataclasses (TrainOptions, TrainFromSpecOptions): given as
    an instance or as keywords, the same run; an unknown one is an error naming it, before any work."""
    import dataclasses

    from unie.core.options import ConfigError
    from unie.core.train import TrainOptions
    from unie.pipeline.model_files import TrainFromSpecOptions

    cfg = TrainConfig(steps=2, batch_size=4, warmup=0, ckpt_every=2, log_every=1)
    loss = MDLM(tok_info).loss
    torch.manual_seed(0)
    a, _ = train(net_factory(max_len=8), loss, data, cfg, tmp_path / "a", "s", log=_quiet, progress=False)
    torch.manual_seed(0)
    b, _ = train(net_factory(max_len=8), loss, data, cfg, tmp_path / "b", "s", TrainOptions(log=_quiet, progress=False))
    _assert_same_weights(a, b)
    with pytest.raises(dataclasses.FrozenInstanceError):
        TrainOptions().precision = "bf16"
    with pytest.raises(ConfigError, match=r"unknown key\(s\) 'stop_aftr' \(did you mean 'stop_after'\?\)"):
        train(net_factory(max_len=8), loss, data, cfg, tmp_path / "c", "s", stop_aftr=1)
    with pytest.raises(ValueError, match="unknown precision 'bf61'"):
        TrainOptions(precision="bf61")
    args = (_spec("mdlm"), toy_files / "train.parquet", toy_files / "tokenizer", tmp_path / "o", tmp_path / "k", 8)
    with pytest.raises(ConfigError, match=r"train_from_spec options: unknown key\(s\) 'devce'.*'device'"):
        train_from_spec("m", *args, devce="cpu")
    assert not (tmp_path / "k").exists()  # refused before any work
    with pytest.raises(ConfigError, match="either as an object or as keywords"):
        train_from_spec("m", *args, TrainFromSpecOptions(), log=_quiet)


def test_train_from_spec_is_a_function_of_its_inputs(toy_files, tmp_path):
    """The same spec and data give the same model, whatever the caller did with the global RNG before
    (TrainConfig.seed, not torch's global state, must decide the initial weights)."""
    args = (_spec("mdlm"), toy_files / "train.parquet", toy_files / "tokenizer")
    torch.manual_seed(1)
    a, _ = train_from_spec("m", *args, tmp_path / "a", tmp_path / "ca", seq_len=8, log=_quiet)
    torch.manual_seed(2)
    b, _ = train_from_spec("m", *args, tmp_path / "b", tmp_path / "cb", seq_len=8, log=_quiet)
    _assert_same_weights(a, b)


def test_train_from_spec_nan_loss_writes_no_model(toy_files, tmp_path, monkeypatch):
    monkeypatch.setattr(MDLM, "loss", lambda self, net, x0, g: net(x0).sum() * float("nan"))
    out = tmp_path / "out"
    with pytest.raises(NonFiniteLossError):
        train_from_spec(
            "m",
            _spec("mdlm"),
            toy_files / "train.parquet",
            toy_files / "tokenizer",
            out,
            tmp_path / "ckpt",
            seq_len=8,
            log=_quiet,
        )
    assert not (out / "model.safetensors").exists() and not (out / "config.json").exists()


def test_train_from_spec_rejects_wrong_seq_len(toy_files, tmp_path):
    from unie.core.options import ConfigError

    with pytest.raises(ConfigError, match="seq_len"):
        train_from_spec(
            "m",
            _spec("mdlm"),
            toy_files / "train.parquet",
            toy_files / "tokenizer",
            tmp_path / "o",
            tmp_path / "c",
            seq_len=16,
            log=_quiet,
        )


def test_length_buckets_draw_each_batch_from_one_bucket_and_collate_it(net_factory, tok_info, tmp_path):
    """length_buckets=2: rows sorted by length are cut in two halves; every batch holds rows of one half only,
    the collate function sees every batch, a resumed run draws the same batches, and length_buckets=1 keeps
    the old uniform draw (so existing runs are unchanged)."""
    import dataclasses

    data = torch.arange(40).view(20, 2).repeat(1, 4)  # row r starts with 2r: its identity
    lengths = torch.tensor([r % 5 for r in range(20)])  # short rows: r % 5 in {0, 1} and half of 2
    short = set(torch.sort(lengths, stable=True).indices[:10].tolist())
    seen = []

    def loss(net, x0, g):
        seen.append(sorted({int(v) // 2 for v in x0[:, 0]}))
        return sum(p.sum() for p in net.parameters()) * 0.0 + x0.float().mean() * 0.0 + 1.0

    def collate(x):
        return x[:, :6]

    cfg = dataclasses.replace(CFG, length_buckets=2, steps=12)
    shapes = []
    train(
        net_factory(max_len=8),
        loss,
        data,
        cfg,
        tmp_path / "a",
        "s",
        log=_quiet,
        progress=False,
        row_lengths=lengths,
        collate=lambda x: shapes.append(tuple(collate(x).shape)) or collate(x),
    )
    assert len(seen) == 12 and shapes == [(4, 6)] * 12
    assert all(set(rows) <= short or not set(rows) & short for rows in seen)  # one bucket per batch
    assert any(set(rows) <= short for rows in seen) and any(not set(rows) & short for rows in seen)
    first = list(seen)
    seen.clear()
    train(
        net_factory(max_len=8),
        loss,
        data,
        cfg,
        tmp_path / "b",
        "s",
        log=_quiet,
        progress=False,
        row_lengths=lengths,
        collate=collate,
    )
    assert seen == first  # the batches are a function of (seed, step)
    with pytest.raises(ValueError, match="row_lengths"):
        train(net_factory(max_len=8), loss, data, cfg, tmp_path / "c", "s", log=_quiet, progress=False)
    with pytest.raises(ValueError, match="length_buckets"):
        TrainConfig(steps=1, batch_size=1, lr=1e-3, length_buckets=0)
