"""Model checkpoints: ``model.safetensors`` + ``config.json`` in one directory.

``config.json`` holds the :class:`ModelConfig` (or, with ``arch: dit``, the :class:`~unie.models.dit.DiTConfig` of
a released checkpoint imported by rule ``import_released`` and of what is fine-tuned from it), the method that trained the weights (``mdlm``, ``ar``,
...), the tokenizer fingerprint (so a mismatch is caught on load, not as garbage samples), the size and SHA-256
of ``model.safetensors`` (``weights``: safetensors has no checksum, so a flipped byte is caught on load instead of
being used), the size and SHA-256 of the other files of the folder (``files``: the training history, the DLLM
models' tokenizer), any method-specific metadata, and its own content hash (``content_sha256``, as a result JSON:
:func:`unie.core.integrity.json_digest`), so that an edit of the architecture (``n_heads`` 2 -> 1 keeps every
tensor's shape) is caught on load and not read as another network.  The weights' safetensors header records the
digest of the network the config describes (:data:`NETWORK_KEY`, :func:`network_digest`): weights written with it
refuse a ``config.json`` without its content hash (removed), or one that describes another network; weights
without it predate these records and say so.  A model is the two files together.  Both are written atomically,
the weights first: a ``config.json`` always describes the weights beside it.  Loading never unpickles: weights
come from safetensors.

Every failure to load names the file and what to do: :class:`CheckpointError` for a missing or wrong checkpoint,
:class:`DamagedCheckpointError` (also a :class:`~unie.core.integrity.DamagedFileError`) for a damaged one.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import InputError
from ..core.integrity import (
    HASH_KEY,
    DamagedFileError,
    atomic_write,
    atomic_write_text,
    file_record,
    json_digest,
    verify_file,
)
from ..core.options import ModelConfig, from_dict
from ..core.registry import BACKBONES

if TYPE_CHECKING:  # torch and safetensors are imported where weights are written or read: the checks of a config.json
    import torch  # (the record check before every run, :mod:`unie.pipeline.damage`) import neither


class CheckpointError(InputError, RuntimeError):
    pass


class DamagedCheckpointError(CheckpointError, DamagedFileError):
    """A checkpoint file that is truncated, changed since it was written, or unreadable."""


def _fix(ckpt_dir) -> str:
    return (
        f"rerun the workflow: it sets the damaged file of {ckpt_dir} aside before it plans the jobs and "
        "retrains the model in the same run"
    )


NETWORK_KEY = "unie.network_sha256"  # the safetensors header's record of the network its config.json describes
NETWORK_FIELDS = ("backbone", "arch", "model", "method", "tokenizer")  # what builds the network and reads its ids


def network_digest(meta: dict) -> str:
    """The digest of what in a ``config.json`` builds the network and reads its token ids (the backbone, the
    architecture, the method and its options, the tokenizer): deterministic for a given model, so that retrained
    weights are byte for byte the same (the training's timings and history stay out of it)."""
    extra = meta.get("extra") if isinstance(meta.get("extra"), dict) else {}
    return json_digest({**{k: meta.get(k) for k in NETWORK_FIELDS}, "options": extra.get("options")})


def save_model(
    net: torch.nn.Module, out_dir, method: str, tokenizer_info: dict, extra: dict | None = None, files=()
) -> None:
    """Write ``out_dir/model.safetensors`` and ``out_dir/config.json`` (atomically, config last, with its content
    hash); ``files``: names of other files of ``out_dir``, written before, whose size and SHA-256 the config
    records (``files``)."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in net.state_dict().items()}
    from .dit import DiTConfig

    meta = {
        "backbone": getattr(net, "registry_name", "transformer"),
        **({"arch": "dit"} if isinstance(net.cfg, DiTConfig) else {}),
        "model": dataclasses.asdict(net.cfg),
        "method": method,
        "tokenizer": tokenizer_info,
        "extra": extra or {},
    }
    meta = json.loads(json.dumps(meta))  # as it is read back (tuples as lists)
    header = {NETWORK_KEY: network_digest(meta)}
    weights = atomic_write(out / "model.safetensors", lambda tmp: save_file(state, str(tmp), metadata=header))
    meta["weights"] = {"file": weights.name, **file_record(weights)}
    if files:
        meta["files"] = {str(name): file_record(out / name) for name in files}
    meta[HASH_KEY] = json_digest(meta)
    atomic_write_text(out / "config.json", json.dumps(meta, indent=2, sort_keys=True))


def weights_header(path) -> dict:
    """The ``__metadata__`` of a safetensors file's header (read without loading a tensor), ``{}`` if it has none
    or cannot be read (the weights' own check then names the damage)."""
    import struct

    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 100 << 20:
                return {}
            header = json.loads(f.read(n))
    except (OSError, struct.error, ValueError):
        return {}
    found = header.get("__metadata__") if isinstance(header, dict) else None
    return found if isinstance(found, dict) else {}


def config_problem(meta: dict, weights) -> str | None:
    """What is wrong with a parsed ``config.json`` beside ``weights`` (None: nothing): its values differ from its
    content hash; it has none although its weights were written with a record of their network (the hash was
    removed); it describes another network than the one its weights were saved with.  A config without a hash
    beside weights without that record predates these records and is taken as it is."""
    if not isinstance(meta, dict):
        return "not a JSON object"
    marked = weights_header(weights).get(NETWORK_KEY) if Path(weights).exists() else None
    if HASH_KEY in meta:
        if json_digest(meta) != meta[HASH_KEY]:
            return (
                "its values differ from the content hash it recorded when it was written (an edited or corrupted value)"
            )
    elif marked is not None:
        return (
            "it carries no content hash, although its weights were written with one for it (its hash fields "
            "were removed)"
        )
    if marked is not None and "model" in meta and marked != network_digest(meta):
        return "it describes another network than the one its weights were saved with (an edited architecture)"
    return None


def read_meta(ckpt_dir) -> dict:
    """A checkpoint's ``config.json``, checked (:func:`config_problem`) and without its content hash."""
    p = Path(ckpt_dir) / "config.json"
    if not p.exists():
        raise CheckpointError(f"missing checkpoint: {p} does not exist (train the model first)")
    try:
        meta = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DamagedCheckpointError(p, f"not valid JSON ({e})", _fix(ckpt_dir)) from None
    if isinstance(meta, dict) and ("model_type" in meta or "architectures" in meta) and "method" not in meta:
        raise CheckpointError(
            f"{p.parent} is a Hugging Face model folder (model_type "
            f"{meta.get('model_type')!r}), not a unie checkpoint: load it with transformers' "
            "from_pretrained (unie.models.hf.load_hf_dllm / load_hf_causal for Uni-E decoding)"
        )
    if not isinstance(meta, dict) or "model" not in meta or "method" not in meta:
        raise CheckpointError(
            f"{p} is not a unie checkpoint's config.json (no 'model'/'method'): a unie model "
            "folder (results/models/NAME) holds the config.json and model.safetensors that "
            "training wrote"
        )
    wfile = (
        meta.get("weights", {}).get("file", "model.safetensors")
        if isinstance(meta.get("weights"), dict)
        else "model.safetensors"
    )
    problem = config_problem(meta, Path(ckpt_dir) / wfile)
    if problem:
        raise DamagedCheckpointError(p, problem, _fix(ckpt_dir))
    return {k: v for k, v in meta.items() if k != HASH_KEY}


def verify_weights(ckpt_dir, meta: dict | None = None) -> Path:
    """The path of ``ckpt_dir``'s weights after checking them against the size and SHA-256 its config.json
    recorded (checkpoints written before the record existed are only checked for presence)."""
    meta = read_meta(ckpt_dir) if meta is None else meta
    wpath = Path(ckpt_dir) / meta.get("weights", {}).get("file", "model.safetensors")
    if not wpath.exists():
        raise CheckpointError(f"missing checkpoint weights: {wpath} ({_fix(ckpt_dir)})")
    if "weights" in meta:
        try:
            verify_file(wpath, meta["weights"], _fix(ckpt_dir))
        except DamagedFileError as e:
            raise DamagedCheckpointError(e.path, e.problem, e.fix) from None
    return wpath


def load_state(ckpt_dir, meta: dict | None = None) -> dict:
    """The verified weights of ``ckpt_dir`` as a state dict (safetensors: no unpickling); an unreadable file
    is a :class:`DamagedCheckpointError` naming it."""
    from safetensors.torch import load_file

    wpath = verify_weights(ckpt_dir, meta)
    try:
        return load_file(str(wpath))
    except Exception as e:  # safetensors' SafetensorError (incomplete metadata, ...), OSError
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DamagedCheckpointError(wpath, f"safetensors cannot read it ({why})", _fix(ckpt_dir)) from None


ARCHS = ("transformer", "dit")


def model_config_of(meta: dict):
    """The architecture recorded in a checkpoint's ``config.json``: a :class:`ModelConfig` (our transformer), or a
    :class:`~unie.models.dit.DiTConfig` when ``arch`` is ``dit`` (the released MDLM-family network)."""
    arch = meta.get("arch", "transformer")
    if arch not in ARCHS:
        raise CheckpointError(f"checkpoint architecture {arch!r} is not one of {ARCHS}")
    if arch == "dit":
        from .dit import DiTConfig

        return from_dict(DiTConfig, meta["model"], "checkpoint model (dit)")
    return from_dict(ModelConfig, meta["model"], "checkpoint model")


def load_model(ckpt_dir, device="cpu", tokenizer_info: dict | None = None, expect_method: str | tuple | None = None):
    """Rebuild the network saved in ``ckpt_dir``; returns ``(net, meta)``.

    Raises :class:`CheckpointError` if the directory is incomplete, the method is not the one
    expected, or ``tokenizer_info`` disagrees with the tokenizer the weights were trained with.
    """
    meta = read_meta(ckpt_dir)
    if expect_method is not None:
        allowed = (expect_method,) if isinstance(expect_method, str) else tuple(expect_method)
        if meta["method"] not in allowed:
            raise CheckpointError(f"{ckpt_dir}: trained as {meta['method']!r}, expected one of {allowed}")
    if tokenizer_info is not None:
        check_tokenizer_match(meta["tokenizer"], tokenizer_info, str(ckpt_dir))
    cfg = model_config_of(meta)
    net = BACKBONES[meta.get("backbone", "transformer")](cfg)
    state = load_state(ckpt_dir, meta)
    missing, unexpected = net.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{Path(ckpt_dir) / 'model.safetensors'}: missing keys {missing}, unexpected keys {unexpected}"
        )
    return net.to(device).eval(), meta


def load(path, device="cpu") -> torch.nn.Module:
    """The network of a unie model folder (``results/models/NAME``, ``results/dllm/models/NAME``: ``config.json`` +
    ``model.safetensors``), its weights verified against the size and SHA-256 recorded beside them, in eval mode
    on ``device``.  ``net.checkpoint_meta`` is its ``config.json`` (the method that trained it, the tokenizer
    fingerprint, the architecture).

    These folders look like Hugging Face ones but are not: ``transformers.AutoModel.from_pretrained`` cannot read
    them (their ``config.json`` has no ``model_type``), and this function refuses a Hugging Face folder, naming
    the loader to use; both refusals are a :class:`CheckpointError` naming the folder."""
    path = Path(path)
    if not path.is_dir():
        what = "is a file" if path.exists() else "does not exist"
        raise CheckpointError(
            f"{path} {what}: a unie model is a folder holding config.json and model.safetensors "
            "(e.g. results/models/mdlm)"
        )
    net, meta = load_model(path, device=device)
    net.checkpoint_meta = meta
    return net


def check_tokenizer_match(saved: dict, current: dict, where: str) -> None:
    for key in ("vocab_size", "mask_id", "bos_id", "eos_id", "fingerprint"):
        if key in saved and key in current and saved[key] != current[key]:
            raise CheckpointError(
                f"tokenizer mismatch for {where}: {key} is {saved[key]!r} in the checkpoint but {current[key]!r} now"
            )
