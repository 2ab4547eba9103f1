"""Training a model of ``config['models']`` and loading checkpoints as the objects samplers use.

* :func:`train_from_spec`: build a model for a method, train it (resumable), save the EMA weights.
* :func:`import_released`: a released checkpoint (a model's ``source``) converted once into our checkpoint format.
* :func:`load_wrapped`: a saved checkpoint as its method's sampler-facing object (denoiser, AR proxy, ...).
* :func:`download_hf_model`, :func:`write_released_standin`, :func:`released_missing`: the download, stand-in and
  missing-checkpoint rules of the models read from elsewhere.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import torch

from ..core.distributed import world
from ..core.integrity import MADE_FROM, atomic_write_text
from ..core.options import ConfigError, ModelConfig, TrainConfig, from_dict, make_options
from ..core.precision import check_precision, precision_record
from ..core.registry import METHODS
from ..core.train import TrainOptions, initial_network, run_spec, train
from ..data.tokenizer import load_tokenizer
from ..data.tokens import TokenRows, check_token_file, load_tokens, token_file_info, token_place
from ..models.checkpoint import CheckpointError, load_model, model_config_of, read_meta, save_model
from ..models.dit import DIT_ARCH_KEYS, DiTConfig, backbone_for
from .damage import identities


def build_method(method: str, tokenizer_info: dict, options: dict | None = None, where: str | None = None):
    """The method object for ``method`` with its options checked strictly (a misspelled key names itself)."""
    cls = METHODS[method]
    return cls(tokenizer_info, from_dict(cls.Options, options or {}, where or f"method {method!r} options"))


def model_config(arch: dict, vocab_size: int, seq_len: int, method) -> ModelConfig:
    arch = dict(arch)
    if getattr(method, "time_conditioned", False):
        arch.setdefault("cond_dim", 64)
        if arch["cond_dim"] <= 0:
            raise ConfigError("a time-conditioned method needs arch.cond_dim > 0")
    return from_dict(
        ModelConfig, {**arch, "vocab_size": vocab_size, "max_len": seq_len, "causal": bool(method.causal)}, "arch"
    )


def fresh_network(method, cfg, seed: int):
    """The network ``method`` trains (its own, e.g. NCE's energy network, else the backbone ``cfg`` describes) before
    any warm start, its initial weights a function of ``seed`` (``TrainConfig.seed``) alone: both halves' trainers
    build their networks here (:func:`train_from_spec`, :func:`unie.pipeline.dllm_runs.train_dllm_model`)."""
    return initial_network(lambda: method.build_net(cfg) if hasattr(method, "build_net") else backbone_for(cfg), seed)


def warm_start(net, init, init_meta: dict, cfg: ModelConfig, method, where: str, log=print) -> None:
    """Initialise ``net`` from a trained network ``init`` (``init_from``).

    The same architecture: every weight is copied (or the method's ``init_from`` decides, e.g. the energy
    network takes the denoiser as its backbone).  The same backbone with or without time conditioning
    (an MDLM's weights for SEDD or Duo, which add adaLN conditioning on ``sigma``): every tensor whose name
    and shape match is copied, the conditioning layers start as initialised (adaLN at zero, so the
    conditioned network starts as the unconditioned one without its LayerNorm affine parameters), and
    the log lists what was not copied.  Any other difference is an error."""
    saved = init_meta["model"]
    if saved == dataclasses.asdict(cfg):
        if hasattr(method, "init_from"):
            method.init_from(net, init)
        else:
            net.load_state_dict(init.state_dict())
        log(f"initialised from {where}")
        return
    if {k: v for k, v in saved.items() if k != "cond_dim"} != {
        k: v for k, v in dataclasses.asdict(cfg).items() if k != "cond_dim"
    }:
        raise CheckpointError(
            f"init_from {where}: architecture {saved} differs from {dataclasses.asdict(cfg)} "
            "(only the time conditioning, cond_dim, may differ)"
        )
    own, theirs = net.state_dict(), init.state_dict()
    copied = {k: v for k, v in theirs.items() if k in own and own[k].shape == v.shape}
    net.load_state_dict(copied, strict=False)
    fresh = sorted(set(own) - set(copied))
    dropped = sorted(set(theirs) - set(copied))
    log(f"warm start from {where}: {len(copied)} tensors copied; kept as initialised: {fresh}; not used: {dropped}")


def is_dit(model_dir) -> bool:
    """Whether a saved model is the released DiT architecture (imported, or fine-tuned from an import)."""
    return read_meta(model_dir).get("arch") == "dit"


def released_arch(init_dir, arch: dict | None, method, where: str) -> DiTConfig:
    """The architecture of a model fine-tuned from a DiT (``init_from`` a released checkpoint): the init's
    :class:`DiTConfig`, with ``arch.dropout`` if given; causal iff the method is (the AR proxy from the AR)."""
    cfg = model_config_of(read_meta(init_dir))
    extra = sorted(set(arch or {}) - set(DIT_ARCH_KEYS))
    if extra:
        raise ConfigError(
            f"{where}.arch: {extra} cannot be set for a model fine-tuned from a released checkpoint "
            f"(its architecture is {init_dir}'s); only {list(DIT_ARCH_KEYS)}"
        )
    if bool(method.causal) != cfg.causal:
        raise ConfigError(
            f"{where}: init_from {init_dir} is {'causal' if cfg.causal else 'bidirectional'}, but the "
            f"method is {'causal' if method.causal else 'bidirectional'}"
        )
    return DiTConfig(**{**dataclasses.asdict(cfg), **(arch or {})})


def init_fingerprint(init_dir) -> str | None:
    """The identity of a checkpoint another training starts from or reads (``init_from``, NCE's frozen partners)
    for the resume check: its path and the SHA-256 of its weights, so a checkpoint left by a run that started
    from *other* weights is never resumed (retraining the init model must retrain what starts from it)."""
    if not init_dir:
        return None
    from ..core.integrity import file_sha256

    digest = file_sha256(Path(init_dir, "model.safetensors"))[:16]
    return f"{init_dir}@{digest}"


@dataclasses.dataclass(frozen=True)
class TrainFromSpecOptions:
    """:func:`train_from_spec`'s options, the single home of their defaults (built by
    :func:`~unie.core.options.make_options` from an instance or keywords: an unknown one is an error naming it; the
    training rule passes keywords, JSON-serialisable for torchrun's ranks, :mod:`unie.pipeline.launch`)."""

    device: str = "cpu"  # under torch.distributed the rank's own
    init_dir: str | Path | None = None  # init_from: the checkpoint directory the weights start from
    partner_dirs: dict | None = None  # role -> checkpoint directory of a frozen model the method needs (NCE's)
    dev_path: str | Path | None = None  # a held-out token file, for a method with dev_metrics (selection on dev)
    n_dev: int = 512  # its first rows used
    precision: str = "fp32"  # the training passes' (unie.core.precision)
    token_cache: str | Path | None = None  # where the token file's Arrow view is kept (default: beside the file)
    log: Callable[[str], None] = print
    stop_after: int | None = None  # stop (checkpointed) at this step, to simulate an interruption

    def __post_init__(self):
        check_precision(self.precision)


def train_from_spec(
    name: str,
    spec: dict,
    train_path,
    tokenizer_dir,
    out_dir,
    ckpt_dir,
    seq_len: int,
    options: TrainFromSpecOptions | None = None,
    **kwargs,
):
    """Train model ``name`` of ``config['models']``; writes ``out_dir/{model.safetensors,config.json}``.

    ``options``: :class:`TrainFromSpecOptions`, or its fields as keywords.  ``partner_dirs`` (role -> checkpoint
    dir) are frozen models a method needs (NCE's proxy or DLM); ``dev_path`` is a held-out split for methods with
    ``dev_metrics`` (model selection on dev).
    ``train_path`` is a Parquet token file (:mod:`unie.data.tokens`): its metadata is the data's identity for the
    resume check and names its tokenizer; batches come from its zero-copy Arrow view, kept in ``token_cache``
    (default: beside the file).
    ``precision`` (:mod:`unie.core.precision`): the training passes' precision; a run in another precision than
    ``fp32`` has another run specification (its ``last.pt`` is not resumed by an fp32 run, nor the converse) and
    records it in ``config.json``.
    Under ``torch.distributed`` every rank calls this (data-parallel :func:`~unie.core.train.train`, ``device``
    is the rank's own); only rank 0 writes ``out_dir``."""
    o = make_options(TrainFromSpecOptions, options, "train_from_spec options", **kwargs)
    device, init_dir, partner_dirs, dev_path, precision, log = (
        o.device,
        o.init_dir,
        o.partner_dirs or {},
        o.dev_path,
        o.precision,
        o.log,
    )
    tok = load_tokenizer(tokenizer_dir)
    options = spec.get("options", {})
    method = build_method(spec["method"], tok.info(), options, f"models.{name}.options")
    cfg = (
        released_arch(init_dir, spec.get("arch"), method, f"models.{name}")
        if init_dir and is_dit(init_dir)
        else model_config(spec["arch"], tok.vocab_size, seq_len, method)
    )
    tcfg = from_dict(TrainConfig, spec["train"], f"models.{name}.train")
    net = fresh_network(method, cfg, tcfg.seed).to(device)
    if init_dir:
        init, meta = load_model(init_dir, device, tokenizer_info=tok.info())
        warm_start(net, init, meta, cfg, method, str(init_dir), log)
    for tokens in (
        train_path,
        dev_path,
    ):  # written by rule tokenize for the place the rule names (its tokenizer: below)
        if tokens is not None:
            check_token_file(tokens, *token_place(tokens))
    data_id = token_file_info(train_path)  # its metadata: content hash, shape, largest id, tokenizer
    if data_id["tokenizer"] not in (None, tok.info()["fingerprint"]):
        raise ConfigError(
            f"{train_path} was tokenised with tokenizer {data_id['tokenizer']}, but {tokenizer_dir} is "
            f"{tok.info()['fingerprint']} (tokenizer mismatch: rerun the tokenize rule)"
        )
    if data_id["shape"][1] != seq_len:
        raise ConfigError(f"{train_path}: sequences have length {data_id['shape'][1]}, config says seq_len={seq_len}")
    if data_id["max_id"] >= tok.vocab_size:
        raise ConfigError(f"{train_path}: token ids exceed the tokenizer's vocabulary (tokenizer mismatch)")
    data = TokenRows.open(train_path, o.token_cache)  # a memory-mapped view, its values checked against the hash
    if hasattr(method, "prepare"):  # methods that need other models (e.g. NCE's frozen AR proxy)
        partners = {role: load_wrapped(d, tok, device) for role, d in partner_dirs.items()}
        method.prepare(net=net, models=partners, device=device, log=log)
    eval_fn = None
    if hasattr(method, "dev_metrics"):
        if dev_path is None:
            raise ConfigError(f"method {spec['method']!r} selects its checkpoint on a dev split: give dev_path")
        dev = load_tokens(dev_path, o.n_dev).long().to(device)
        eval_fn = lambda ema: method.dev_metrics(ema, dev, torch.Generator(device=device).manual_seed(tcfg.seed + 4242))
    sig = run_spec(
        tcfg,
        {
            "model": dataclasses.asdict(cfg),
            "method": spec["method"],
            "options": options,
            "data": data_id,
            "tokenizer": tok.info()["fingerprint"],
            "init": init_fingerprint(init_dir),
            "partners": {role: init_fingerprint(d) for role, d in sorted(partner_dirs.items())},
            "dev": None if eval_fn is None else {**token_file_info(dev_path), "n_dev": o.n_dev},
            **precision_record(precision),
        },
    )
    n_params = sum(p.numel() for p in net.parameters())
    log(f"training {name} ({spec['method']}): {n_params / 1e6:.2f}M parameters, {len(data)} sequences of {seq_len}")
    params = method.parameters(net) if hasattr(method, "parameters") else None
    ema, history = train(
        net,
        method.loss,
        data,
        tcfg,
        ckpt_dir,
        sig,
        TrainOptions(log=log, stop_after=o.stop_after, params=params, eval_fn=eval_fn, precision=precision),
    )
    if o.stop_after is not None and o.stop_after < tcfg.steps:
        return ema, history
    dev = [h for h in history if "dev" in h]
    extra = {
        "options": options,
        "train": spec["train"],
        **precision_record(precision),
        "final": next((h for h in reversed(history) if "loss" in h), {}),
        # what it was trained from, by content: a later run retrains it when one of these is replaced
        MADE_FROM: identities(
            [
                train_path,
                tokenizer_dir,
                dev_path if eval_fn is not None else None,
                *(
                    Path(d, f)
                    for d in [init_dir, *partner_dirs.values()]
                    if d
                    for f in ("model.safetensors", "config.json")
                ),
            ]
        ),
    }
    if dev:
        best = min((h for h in dev if h["dev"]["admissible"]), key=lambda h: h["dev"]["loss"])
        extra["dev"] = {
            "initial": dev[0],
            "selected": best,
            "dev_split": str(dev_path),
            "rule": "lowest dev NCE loss among admissible checkpoints (guard not above the initial)",
        }
        log(
            f"dev energy separation: initial {dev[0]['dev']['separation']:.3f} -> selected (step {best['step']}) "
            f"{best['dev']['separation']:.3f}; accuracy {dev[0]['dev']['accuracy']:.3f} -> {best['dev']['accuracy']:.3f}"
        )
    if world()[0] == 0:
        atomic_write_text(Path(out_dir, "history.json"), json.dumps(history, indent=1))
        save_model(ema, out_dir, spec["method"], tok.info(), extra=extra, files=["history.json"])
    return ema, history


def _source_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return [p for p in (path / "config.json", path / "model.safetensors", path / "pytorch_model.bin") if p.is_file()]


def import_released(
    name: str, source: dict, method_name: str, options: dict | None, tokenizer_dir, out_dir, source_path, log=print
) -> None:
    """Model ``name``'s ``source`` (a released checkpoint: HF folder or Lightning ``.ckpt`` at ``source_path``)
    read by :func:`unie.methods.released_methods.load_released` and written to ``out_dir`` as our own checkpoint
    (``config.json`` with ``arch: dit`` and the ``weights`` record, ``model.safetensors``), so that loading,
    verification, fingerprints, ``init_from`` and NCE's partners treat it as any trained model.

    The tokenizer must have the layout the checkpoint was trained with: GPT-2 + the appended mask, unless the
    source says otherwise (``tokenizer_info``) or is a stand-in written for this very tokenizer (``standin``).
    Runs on the CPU (a conversion)."""
    from ..core.integrity import file_sha256
    from ..methods.released_methods import GPT2_MASKED, load_released
    from ..models.released import SOURCES, ReleasedCheckpointError

    tok = load_tokenizer(tokenizer_dir)
    info = tok.info()
    kind = source["kind"]
    if SOURCES[kind].method != method_name:
        raise ConfigError(
            f"models.{name}: a released {kind} checkpoint is a {SOURCES[kind].method!r} model, not {method_name!r}"
        )
    expected = dict(info) if source.get("standin") else {**GPT2_MASKED, **(source.get("tokenizer_info") or {})}
    bad = [k for k in ("vocab_size", "mask_id", "bos_id", "eos_id") if expected[k] != info[k]]
    if bad:
        raise ReleasedCheckpointError(
            f"{source_path}: tokenizer mismatch for models.{name}: the checkpoint was trained with "
            f"{ {k: expected[k] for k in bad} }, {tokenizer_dir} has { {k: info[k] for k in bad} } (use the tokenizer "
            "the checkpoint was trained with: GPT-2 + the appended mask, tokenizer: {kind: hf, path: gpt2})"
        )
    net_kwargs = {k: source[k] for k in ("use_ema", "n_heads", "block_size") if source.get(k) is not None}
    wrapped = load_released(
        kind,
        source_path,
        tokenizer_info=info,
        trust_remote_code=bool(source.get("trust_remote_code")),
        device="cpu",
        options=options,
        **net_kwargs,
    )
    opts = dict(options or {})
    if kind == "bd3lm":
        opts["block_size"] = wrapped.net.cfg.block_size
    if kind == "duo":  # upstream's vocabulary, [PAD] a state: what every later load of the import rebuilds
        opts["pad_state"] = True
    meta = dict(wrapped.released)
    meta["files"] = {p.name: file_sha256(p) for p in _source_files(Path(source_path))}
    if source.get("standin"):
        meta["standin"] = True
    save_model(wrapped.net, out_dir, method_name, info, extra={"options": opts, "released": meta})
    n = sum(p.numel() for p in wrapped.net.parameters())
    log(
        f"imported {name}: released {kind} ({meta['identifier']}) from {source_path} ({meta['format']}"
        f"{', EMA weights' if meta.get('ema') else ''}), {n / 1e6:.2f}M parameters, arch {meta['arch']} -> {out_dir}"
    )


def download_hf_model(repo_id: str, out_dir, log=print) -> Path:
    """Rule download_hf_model: the Hugging Face snapshot ``repo_id`` (config, tokenizer, safetensors;
    :func:`unie.data.hub.fetch_model`) in ``out_dir`` (``resources/hf/{hf_model}``, for the HF evaluators and the
    DLLM rows; needs internet: a localrule); returns its folder."""
    from ..data.hub import fetch_model

    out = fetch_model(repo_id, out_dir)
    log(f"{repo_id} -> {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    return out


def write_released_standin(
    out_dir, kind: str, fmt: str, tokenizer_dir, seed: int = 0, block_size: int | None = None, log=print
) -> Path:
    """Rule released_standin: a tiny random checkpoint in a released model's upstream format ``fmt``
    (:func:`unie.models.standins.write_standin`), sized to the project's tokenizer at ``tokenizer_dir`` (gpu-smoke
    profile and tests: the import path end to end with no download); returns the path the loader is given."""
    from ..models.standins import write_standin

    info = load_tokenizer(tokenizer_dir).info()
    path = write_standin(out_dir, kind, fmt, info, seed=seed, block_size=block_size)
    log(f"stand-in {kind} ({fmt}) for vocab {info['vocab_size']} -> {path}")
    return path


def released_missing(kind: str, path) -> None:
    """Rule released_missing: a released checkpoint placed by hand (published on Google Drive only) is absent: a
    :class:`FileNotFoundError` naming the file and where to put it."""
    from ..models.released import SOURCES

    raise FileNotFoundError(
        f"{path} is missing: the released {kind} checkpoint ({SOURCES[kind].identifier}) cannot be downloaded by the "
        f"workflow; download it by hand and place it at {path} (docs/released-checkpoints.md), then rerun"
    )


def load_wrapped(model_dir, tokenizer, device: str = "cpu"):
    """A checkpoint as its method's sampler-facing object (``MDLMDenoiser``, ``ARModel``, ...).

    A directory holding ``released.json`` (``{"kind", "path", "trust_remote_code", ...}``, written by the rule
    that imports a released checkpoint) is read with :func:`unie.methods.released_methods.load_released` instead."""
    marker = Path(model_dir, "released.json")
    if marker.exists():
        from ..methods.released_methods import load_released

        spec = json.loads(marker.read_text())
        return load_released(spec.pop("kind"), spec.pop("path"), tokenizer_info=tokenizer.info(), device=device, **spec)
    net, meta = load_model(model_dir, device=device, tokenizer_info=tokenizer.info())
    method = build_method(
        meta["method"], tokenizer.info(), meta.get("extra", {}).get("options", {}), f"checkpoint {model_dir} options"
    )
    wrapped = method.wrap(net)
    wrapped.method_name = meta["method"]
    return wrapped


@dataclasses.dataclass(frozen=True)
class SamplingModel:
    """A trained model ready to sample (:func:`load_for_sampling`): ``model`` is its method's sampler-facing object
    (a denoiser with ``logp_x0`` for the ``dlm`` role, an AR with ``token_logp`` / ``logp_next`` for ``proxy`` /
    ``ar``), ``tokenizer`` decodes the ids it draws, ``mask_id`` is the mask token (``None`` for a tokenizer without
    one), ``method`` the method that trained it."""

    model: object
    tokenizer: object
    mask_id: int | None
    method: str
    path: Path


def run_tokenizer(model_dir) -> Path:
    """The tokenizer of the run that trained the model in ``model_dir``: ``resources/tokenizer`` beside the
    ``results/`` that holds it (``runs/<name>/results/models/NAME`` -> ``runs/<name>/resources/tokenizer``).  A
    missing one is a :class:`FileNotFoundError` naming it."""
    model_dir = Path(model_dir)
    run = model_dir.resolve().parents[2] if len(model_dir.resolve().parents) > 2 else model_dir
    tokenizer = run / "resources" / "tokenizer"
    if not tokenizer.is_dir():
        raise FileNotFoundError(
            f"{tokenizer}: no tokenizer beside {model_dir} (the run's resources/tokenizer); "
            "pass tokenizer=<directory> (unie sample: --tokenizer DIR)"
        )
    return tokenizer


def load_for_sampling(model_dir, tokenizer=None, device: str = "cpu") -> SamplingModel:
    """A trained model folder (``runs/<name>/results/models/NAME``) as a ready-to-sample model with its tokenizer
    and mask id.

    ``tokenizer``: a tokenizer directory or object; by default the run's own (:func:`run_tokenizer`:
    ``runs/<name>/resources/tokenizer``).  The checkpoint's tokenizer fingerprint must match (a mismatch is a
    :class:`CheckpointError` naming both).  A missing folder or tokenizer is an error naming the path."""
    model_dir = Path(model_dir)
    if tokenizer is None:
        tokenizer = run_tokenizer(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(
            f"{model_dir} does not exist: a unie model is a folder holding config.json and "
            "model.safetensors (e.g. runs/toy/results/models/mdlm)"
        )
    tok = load_tokenizer(tokenizer) if isinstance(tokenizer, (str, Path)) else tokenizer
    wrapped = load_wrapped(model_dir, tok, device)
    mask_id = getattr(wrapped, "mask_id", None)
    if mask_id is None:
        mask_id = tok.info().get("mask_id")
    return SamplingModel(
        wrapped, tok, mask_id, getattr(wrapped, "method_name", read_meta(model_dir)["method"]), model_dir
    )
