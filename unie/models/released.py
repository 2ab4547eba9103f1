"""Reading the published MDLM-family checkpoints into :class:`unie.models.dit.DiT` (our code, their weights).

Sources, identifiers and formats (read from the authors' repositories; ``docs/released-checkpoints.md``):

=========  ==========================================  =================================================
kind       published as                                format read here
=========  ==========================================  =================================================
``mdlm``   HF ``kuleshov-group/mdlm-owt``              HF folder: ``config.json`` (custom code, ``auto_map``)
                                                       + ``model.safetensors``/``pytorch_model.bin``, keys
                                                       ``backbone.*``; or MDLM's Lightning ``mdlm.ckpt``
``bd3lm``  HF ``kuleshov-group/bd3lm-owt-block_size4``  HF folder as MDLM's plus ``block_size``, ``adaln`` and
                                                       the buffers ``sampling_eps_min``/``sampling_eps_max``
``duo``    HF ``s-sahoo/duo`` (``s-sahoo/duo-distilled``);  HF folder (MDLM-style config, ``time_conditioning``
           raw Lightning checkpoints on Google Drive    true, 50,258 outputs: GPT-2 + [PAD]) or Lightning ``.ckpt``
``sedd``   HF ``louaaron/sedd-small`` / ``-medium``      ``PyTorchModelHubMixin`` folder: hydra ``config.json``
           (and MDLM's Google-Drive ``sedd.ckpt``)      (``tokens``, ``graph``, ``model``), unprefixed keys;
                                                       or the Lightning ``sedd.ckpt``
``ar``     MDLM's Google-Drive ``ar.ckpt`` only         Lightning ``.ckpt``: ``state_dict`` (``backbone.*``,
                                                       causal DiT without ``sigma_map``/adaLN) + ``ema``
=========  ==========================================  =================================================

A Lightning ``.ckpt`` is evaluated with its EMA weights, as upstream does (``ema.copy_to`` before every
evaluation): ``ckpt['ema']['shadow_params']`` is a list in the order of ``backbone.parameters()``, matched
here to the parameter keys of ``ckpt['state_dict']`` in their stored order (buffers skipped).  The pickle is
read by a restricted unpickler: only the globals ``torch.load(weights_only=True)`` allows are resolved; every
other one (omegaconf's ``DictConfig`` in ``hyper_parameters``, anything else) becomes an inert placeholder
that is never imported nor called, so reading a third-party ``.ckpt`` runs none of its code.

``trust_remote_code``: an HF folder whose ``config.json`` has ``auto_map`` (MDLM, BD3-LM, Duo) is published
*as custom code*.  We never execute it (the architecture is :mod:`unie.models.dit`, the weights come from
safetensors or a ``weights_only`` torch load), but the grant is still required, checked from ``config.json``
before any weight is read, for parity with :mod:`unie.models.hf`: a config's ``trust_remote_code: true`` means
the same thing whichever loader serves the folder, and no one points a profile at a custom-code checkpoint
without saying so.  Lightning ``.ckpt`` files and SEDD's hub-mixin folder name no custom code: no grant.

Every failure is one line naming the file and the problem (:class:`ReleasedCheckpointError`).
"""

from __future__ import annotations

import json
import pickle
import re
import types
from dataclasses import asdict
from pathlib import Path

import torch

from .checkpoint import CheckpointError
from .dit import DiT, DiTConfig
from .released_sources import SOURCES, Source  # noqa: F401  (the kinds the workflow imports: defined there)


class ReleasedCheckpointError(CheckpointError):
    pass


# n_heads by hidden size in the upstream model configs (configs/model/{tiny,small,medium}.yaml), for a
# Lightning .ckpt whose hyper-parameters we do not unpickle: tiny 512/8, small 768/12, medium 1024/16
HEADS_BY_WIDTH = {512: 8, 768: 12, 1024: 16}
BD3LM_BUFFERS = ("sampling_eps_min", "sampling_eps_max")


def _fail(where, problem: str):
    raise ReleasedCheckpointError(f"{where}: {problem}")


# ---------------------------------------------------------------------- safe Lightning .ckpt reading
class _Opaque:
    """Stands in for any global a checkpoint names outside torch's weights-only allow-list: accepts whatever
    the pickle does with it and keeps it as inert data."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs, self.state, self.items = args, kwargs, None, []

    def __setstate__(self, state):
        self.state = state

    def append(self, x):
        self.items.append(x)

    def extend(self, xs):
        self.items.extend(xs)

    def __setitem__(self, key, value):
        self.items.append((key, value))


def _opaque_class(module: str, name: str) -> type:
    return type(name, (_Opaque,), {"__module__": f"unie.released.opaque.{module}"})


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        from torch._weights_only_unpickler import _get_allowed_globals

        allowed = _get_allowed_globals()
        key = f"{module}.{name}"
        if key in allowed:
            return allowed[key]
        return _opaque_class(module, name)


_restricted_pickle = types.ModuleType("unie_restricted_pickle")
_restricted_pickle.Unpickler = _RestrictedUnpickler
_restricted_pickle.load = lambda f, **kw: _RestrictedUnpickler(f, **kw).load()
_restricted_pickle.__name__ = "pickle"  # torch.load passes its own persistent_load to this Unpickler


def read_lightning_ckpt(path) -> dict:
    """``torch.load`` of a Lightning checkpoint through the restricted unpickler (see the module doc)."""
    path = Path(path)
    if not path.is_file():
        _fail(path, "missing checkpoint file (download it first; see docs/released-checkpoints.md)")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_restricted_pickle)
    except Exception as e:  # noqa: BLE001 - any unreadable file is one line
        _fail(path, f"not a readable torch checkpoint ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        _fail(path, "not a Lightning checkpoint (no 'state_dict' dict)")
    return ckpt


# ---------------------------------------------------------------------- HF folder reading
def read_hf_config(folder, trust_remote_code: bool) -> dict:
    """``config.json`` of an HF folder, after the grant check (before any weight is read)."""
    p = Path(folder) / "config.json"
    if not p.is_file():
        _fail(p, "missing (an HF checkpoint folder needs config.json next to its weights)")
    try:
        cfg = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        _fail(p, f"not valid JSON ({e})")
    if not isinstance(cfg, dict):
        _fail(p, "not a JSON object")
    if cfg.get("auto_map") and not trust_remote_code:
        _fail(
            p,
            f"names custom code (auto_map {sorted(cfg['auto_map'])}); pass trust_remote_code=True to load it "
            "(our own DiT reads the weights; their code is never run)",
        )
    return cfg


def read_hf_weights(folder) -> dict:
    folder = Path(folder)
    st, binf = folder / "model.safetensors", folder / "pytorch_model.bin"
    if st.is_file():
        from safetensors.torch import load_file

        try:
            return load_file(str(st))
        except Exception as e:  # noqa: BLE001
            _fail(st, f"safetensors cannot read it ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
    if binf.is_file():
        try:
            return torch.load(binf, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001
            _fail(binf, f"not a weights-only torch file ({type(e).__name__})")
    _fail(folder, "no weights: neither model.safetensors nor pytorch_model.bin")


def hf_dit_config(cfg: dict, source: Source, where) -> DiTConfig:
    """The architecture from an upstream ``config.json``: MDLM/BD3-LM/Duo HF style (``hidden_dim``,
    ``n_blocks``, ...) or SEDD's hydra dump (``model.hidden_size``, ``tokens``, ``graph``)."""
    try:
        if "model" in cfg and isinstance(cfg["model"], dict):  # SEDD PyTorchModelHubMixin
            m = cfg["model"]
            if cfg.get("graph", {}).get("type") != "absorb":
                _fail(where, f"SEDD graph {cfg.get('graph')!r} is not the absorbing graph this loader supports")
            return DiTConfig(
                vocab_size=int(cfg["tokens"]) + 1,
                d_model=int(m["hidden_size"]),
                n_layers=int(m["n_blocks"]),
                n_heads=int(m["n_heads"]),
                cond_dim=int(m["cond_dim"]),
                dropout=float(m.get("dropout", 0.1)),
                adaln=True,
                time_conditioning=True,
                max_len=int(m.get("length", 1024)),
            )
        adaln = bool(cfg.get("adaln", True))
        tc = bool(cfg.get("time_conditioning", source.time_conditioning))
        if tc != source.time_conditioning:
            _fail(
                where,
                f"time_conditioning={tc}, but a released {source.kind} is "
                f"{'' if source.time_conditioning else 'not '}time-conditioned",
            )
        return DiTConfig(
            vocab_size=int(cfg["vocab_size"]),
            d_model=int(cfg["hidden_dim"]),
            n_layers=int(cfg["n_blocks"]),
            n_heads=int(cfg["n_heads"]),
            cond_dim=int(cfg["cond_dim"]),
            dropout=float(cfg.get("dropout", 0.1)),
            adaln=adaln,
            time_conditioning=tc,
            causal=bool(cfg.get("causal", False)),
            block_size=int(cfg["block_size"]) if "block_size" in cfg else None,
            max_len=int(cfg.get("model_length", 1024)),
        )
    except KeyError as e:
        _fail(where, f"config.json lacks the key {e.args[0]!r} of the upstream format")
    except (TypeError, ValueError) as e:
        _fail(where, f"config.json has an invalid architecture ({e})")


def _strip_prefix(state: dict, prefix: str) -> dict:
    """Upstream HF models keep the DiT under ``backbone.``; other top-level keys (BD3-LM's buffers) stay."""
    return {(k[len(prefix) :] if k.startswith(prefix) else k): v for k, v in state.items()}


def ckpt_dit_config(backbone: dict, source: Source, where, n_heads: int | None, block_size: int | None) -> DiTConfig:
    """The architecture of a Lightning checkpoint from its tensor shapes (``n_heads`` from the upstream
    model configs by width unless given)."""
    if "vocab_embed.embedding" not in backbone:
        _fail(where, "state_dict has no backbone.vocab_embed.embedding (not an MDLM-family DiT checkpoint)")
    V, d = backbone["vocab_embed.embedding"].shape
    layers = {int(m.group(1)) for k in backbone if (m := re.match(r"blocks\.(\d+)\.", k))}
    adaln = "sigma_map.mlp.0.weight" in backbone
    cond = int(backbone["sigma_map.mlp.0.weight"].shape[0]) if adaln else 128
    heads = n_heads or HEADS_BY_WIDTH.get(int(d))
    if heads is None:
        _fail(where, f"hidden size {d} is not an upstream model config's; pass n_heads")
    causal = source.causal
    if causal and adaln:
        _fail(where, "an AR checkpoint must not have sigma_map/adaLN (is this a diffusion checkpoint?)")
    return DiTConfig(
        vocab_size=int(V),
        d_model=int(d),
        n_layers=len(layers),
        n_heads=heads,
        cond_dim=cond,
        adaln=adaln,
        time_conditioning=source.time_conditioning and adaln,
        causal=causal,
        block_size=block_size,
    )


def _load_strict(net: DiT, state: dict, where) -> None:
    own = net.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        _fail(
            where,
            f"key set differs from the upstream architecture: missing {missing[:6]}"
            f"{'...' if len(missing) > 6 else ''}, unexpected {unexpected[:6]}{'...' if len(unexpected) > 6 else ''}",
        )
    bad = [k for k in own if own[k].shape != state[k].shape]
    if bad:
        _fail(
            where,
            f"shape mismatch at {bad[0]}: {tuple(state[bad[0]].shape)} stored, {tuple(own[bad[0]].shape)} "
            f"expected ({len(bad)} tensors differ)",
        )
    net.load_state_dict(state, strict=True)


def apply_ema(net: DiT, backbone_keys: list[str], shadow: list, where) -> None:
    """Copy upstream EMA ``shadow_params`` (ordered as ``backbone.parameters()``) onto ``net``."""
    params = dict(net.named_parameters())
    names = [k for k in backbone_keys if k in params]
    if len(shadow) < len(names):  # upstream chains the noise schedule's parameters after the backbone's
        _fail(where, f"ema has {len(shadow)} shadow parameters for {len(names)} backbone parameters")
    with torch.no_grad():
        for name, value in zip(names, shadow):
            if tuple(value.shape) != tuple(params[name].shape):
                _fail(
                    where,
                    f"ema shadow parameter for {name} has shape {tuple(value.shape)}, "
                    f"expected {tuple(params[name].shape)}",
                )
            params[name].copy_(value)


def load_released_net(
    kind: str,
    path,
    *,
    trust_remote_code: bool = False,
    device="cpu",
    dtype=torch.float32,
    use_ema: bool = True,
    n_heads: int | None = None,
    block_size: int | None = None,
):
    """The upstream network at ``path`` (an HF folder or a Lightning ``.ckpt``) as our :class:`DiT`, in eval
    mode.  Returns ``(net, meta)``; ``meta`` holds the source, the format, the architecture and (BD3-LM) the
    stored ``block_size`` and clipped-schedule buffers."""
    if kind not in SOURCES:
        raise ReleasedCheckpointError(f"unknown released-checkpoint kind {kind!r} (one of {sorted(SOURCES)})")
    source = SOURCES[kind]
    path = Path(path)
    meta = {"kind": kind, "method": source.method, "identifier": source.identifier, "path": str(path)}
    if path.is_dir():
        if "hf" not in source.formats:
            _fail(path, f"{kind} is published as a Lightning .ckpt, not an HF folder")
        cfg_json = read_hf_config(path, trust_remote_code)
        cfg = hf_dit_config(cfg_json, source, path / "config.json")
        state = _strip_prefix(read_hf_weights(path), "backbone.")
        extra = {k: state.pop(k) for k in BD3LM_BUFFERS if k in state}
        meta.update(format="hf", **{k: float(v) for k, v in extra.items()})
        ema = None
    elif path.suffix == ".ckpt" or path.is_file():
        if "ckpt" not in source.formats:
            _fail(path, f"{kind} is published as an HF folder, not a Lightning .ckpt")
        ckpt = read_lightning_ckpt(path)
        sd = ckpt["state_dict"]
        state = {k[len("backbone.") :]: v for k, v in sd.items() if k.startswith("backbone.")}
        extra = {k: state.pop(k) for k in BD3LM_BUFFERS if k in state}
        cfg = ckpt_dit_config(state, source, path, n_heads, block_size)
        meta.update(format="ckpt", ignored_keys=sorted(k for k in sd if not k.startswith("backbone.")))
        ema = ckpt.get("ema") if use_ema else None
        if use_ema and not (isinstance(ema, dict) and isinstance(ema.get("shadow_params"), (list, tuple))):
            _fail(
                path,
                "no EMA weights (ckpt['ema']['shadow_params']); upstream evaluates with them "
                "(pass use_ema=False to use the raw weights)",
            )
    else:
        _fail(path, "missing: give the HF checkpoint folder or the Lightning .ckpt file")
    if kind == "bd3lm":
        bs = block_size or cfg.block_size
        if bs is None:
            _fail(path, "BD3-LM needs its block size (config.json block_size, or block_size=...)")
        if cfg.block_size not in (None, bs):
            _fail(path, f"block_size={block_size} given but the checkpoint says {cfg.block_size}")
        cfg = DiTConfig(**{**asdict(cfg), "block_size": int(bs)})
    if kind == "ar" and not cfg.causal:
        _fail(path, "an AR source must be causal")
    net = DiT(cfg)
    _load_strict(net, state, path)
    if ema is not None:
        apply_ema(net, list(state), list(ema["shadow_params"]), path)
        meta["ema"] = True
    meta["arch"] = asdict(cfg)
    return net.to(device=device, dtype=dtype).eval(), meta
