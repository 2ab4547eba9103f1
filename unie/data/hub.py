"""Paper profile: raw corpora, the tokenizer and evaluator models from Hugging Face (or local copies).

* :func:`iter_documents` reads one (domain, split) dataset spec of ``config[data][hf]`` and yields the
  detokenised documents in batches (rule ``download`` streams them to ``resources/raw/{domain}/{split}.parquet``);
  :func:`load_documents` is the same as one list.
* :func:`fetch_tokenizer` gives the GPT-2 tokenizer as a :class:`unie.data.tokenizer.Tokenizer` (rule ``tokenizer``).
* :func:`fetch_model` downloads an evaluator snapshot (rule ``download_hf_model``; GPT-2-large, Llama-2/3).

Only these functions touch the network, and only for hub names; local paths never do.  Nothing is
downloaded at import.  Before any download they check that the hub answers (:func:`hub_problem`: one request
through the hub client's session, or ``HF_HUB_OFFLINE=1``); where it does not, they read the local Hugging Face cache (``HF_HOME``), and a
name that is not there is a :class:`HubUnreachableError` naming it and how to pre-fetch it, at once instead of
after the hub client's minute of retries.  Protocol (datasets, splits, fields, detokenisers): ``docs/baselines.md``,
the zero-shot perplexity protocol.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from ..core.errors import InputError
from .detokenize import get_detokenizer

# the variables with which the Hugging Face libraries never ask the network: they read HF_HOME's caches only (read
# when each library is imported: set them for a process before it starts)
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


class HubUnreachableError(InputError, ConnectionError):
    """A model, tokenizer or dataset that must come from the Hugging Face Hub, which cannot be reached, and that is
    not in the local cache."""

    def __init__(self, kind: str, name: str, problem: str):
        from huggingface_hub import constants

        home = constants.HF_HOME
        if kind == "dataset":
            fetch = f"python -c \"import datasets; datasets.load_dataset('{name}')\""
        elif kind == "dataset file":  # name: org/repo/path/in/repo
            parts = name.split("/")
            fetch = f"hf download {'/'.join(parts[:2])} {'/'.join(parts[2:])} --repo-type dataset"
        else:
            fetch = f"hf download {name}"
        super().__init__(
            f"cannot download {kind} {name!r}: the Hugging Face Hub {problem}, and {name!r} is not in the local "
            f"cache (HF_HOME={home}); pre-fetch it on a machine with network access into that cache "
            f"(HF_HOME={home} {fetch}), then rerun; with HF_HUB_OFFLINE=1 runs read the cache without trying the "
            "network"
        )


def hub_problem(timeout: float = 5.0) -> str | None:
    """None when the Hugging Face Hub's endpoint answers within ``timeout`` seconds, else why not
    (``HF_HUB_OFFLINE=1``, or the connection error).  One request through the hub client's own HTTP session, so
    proxies (``HTTPS_PROXY``), certificates and ``HF_ENDPOINT`` count as they do for a download; the client itself
    would retry for about a minute."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        return "is switched off here (HF_HUB_OFFLINE=1)"
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout)  # any HTTP answer: the hub is there
        return None
    except Exception as e:  # the session's connect/timeout errors (httpx or requests, by version)
        return (
            f"({constants.ENDPOINT}) is not reachable from this host ({' '.join(str(e).split()) or type(e).__name__})"
        )


# spec["format"] -> the `datasets` packaged builder that reads it
LOCAL_FORMATS = {"parquet": "parquet", "json": "json", "jsonl": "json", "text": "text"}
_SUFFIXES = {"parquet": (".parquet",), "json": (".json", ".jsonl"), "text": (".txt", ".text")}
SPEC_KEYS = {"path", "name", "split", "text_field", "detokenizer", "format", "max_docs", "revision"}


def split_base(split: str) -> str:
    """The split name without a slice: ``"train[-100000:]"`` -> ``"train"``, ``"test"`` -> ``"test"``."""
    base = re.split(r"[\[+]", split, maxsplit=1)[0].strip()
    if not base:
        raise ValueError(f"split {split!r} has no split name")
    return base


def _local_data_files(path: str, builder: str):
    """``data_files`` for a local directory (its files with the builder's suffixes, sorted), else ``path``
    unchanged (a file, a glob, an ``hf://`` or ``https://`` URL: resolved by ``datasets``)."""
    p = Path(path).expanduser()
    if p.is_dir():
        files = sorted(str(f) for f in p.rglob("*") if f.is_file() and f.suffix in _SUFFIXES[builder])
        if not files:
            raise FileNotFoundError(f"{path}: no {'/'.join(_SUFFIXES[builder])} files in this directory")
        return files
    return str(p) if p.exists() else path


def load_split(spec: dict):
    """The ``datasets.Dataset`` of a spec (before text extraction).

    ``format: hub`` (default) calls ``datasets.load_dataset(path, name, split=split)``, which downloads
    (cluster side).  Local formats (``parquet``, ``json``/``jsonl``, ``text``) read ``path`` with the
    packaged builder, offline; the files form the split named by ``split``'s base name, so slices such
    as ``"train[-100000:]"`` work on local files too.  ``max_docs`` keeps the first ``max_docs`` rows."""
    import datasets

    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise ValueError(f"dataset spec: unknown keys {sorted(unknown)}; known: {sorted(SPEC_KEYS)}")
    for key in ("path", "split"):
        if not spec.get(key):
            raise ValueError(f"dataset spec: missing {key!r} in {spec}")
    fmt = spec.get("format") or "hub"
    split = spec["split"]
    if fmt == "hub":
        problem = hub_problem()
        if problem is None:
            ds = datasets.load_dataset(spec["path"], spec.get("name"), split=split, revision=spec.get("revision"))
        else:  # the cache only, at once (datasets would retry the hub for a minute first)
            saved = datasets.config.HF_HUB_OFFLINE
            datasets.config.HF_HUB_OFFLINE = True
            try:
                ds = datasets.load_dataset(spec["path"], spec.get("name"), split=split, revision=spec.get("revision"))
            except Exception:
                raise HubUnreachableError("dataset", spec["path"], problem) from None
            finally:
                datasets.config.HF_HUB_OFFLINE = saved
    elif fmt in LOCAL_FORMATS:
        builder = LOCAL_FORMATS[fmt]
        files = _local_data_files(spec["path"], builder)
        ds = datasets.load_dataset(builder, data_files={split_base(split): files}, split=split)
    else:
        raise ValueError(f"dataset spec {spec['path']}: unknown format {fmt!r}; known: hub, {', '.join(LOCAL_FORMATS)}")
    if spec.get("max_docs") is not None:
        ds = ds.select(range(min(int(spec["max_docs"]), len(ds))))
    return ds


def iter_documents(spec: dict, batch_size: int = 1000) -> Iterator[list[str]]:
    """The detokenised, non-empty documents of one dataset spec (``config[data][hf][domain][split]``), in
    dataset order, ``batch_size`` rows at a time (a batch may come out shorter, or empty, after dropping).

    Spec keys (schema ``$defs.hf_dataset``): ``path``, ``name`` (config name or null), ``split``,
    ``text_field`` (default ``"text"``), ``detokenizer`` (a key of ``unie.detokenize.DETOKENIZERS`` or null),
    ``format`` (``hub`` | ``parquet`` | ``json`` | ``jsonl`` | ``text``), ``max_docs`` (first N rows).
    Documents that are empty or whitespace-only after detokenising are dropped.  (MDLM keeps them, so
    with ``insert_eos`` each empty WikiText line adds one lone EOS there; here it adds nothing.)
    ``datasets`` keeps the split in memory-mapped Arrow files, so memory holds one batch (rule ``download``
    writes them with :func:`unie.data.corpus.write_text_batches`)."""
    detok = get_detokenizer(spec.get("detokenizer"))  # fail on a bad name before any download
    field = spec.get("text_field") or "text"
    ds = load_split(spec)
    if field not in ds.column_names:
        raise KeyError(
            f"dataset {spec['path']} ({spec['split']}): no text field {field!r}; "
            f"available columns: {', '.join(ds.column_names)}"
        )
    for batch in ds.select_columns([field]).iter(batch_size=batch_size):
        texts = [t if isinstance(t, str) else "" for t in batch[field]]
        if detok is not None:
            texts = [detok(t) for t in texts]
        yield [t for t in texts if t.strip()]


def load_documents(spec: dict) -> list[str]:
    """All documents of :func:`iter_documents` in one list (small splits, tests)."""
    return [t for batch in iter_documents(spec) for t in batch]


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or Path(path).expanduser().exists()


def fetch_tokenizer(path: str, out_dir):
    """The :class:`unie.data.tokenizer.Tokenizer` of a Hugging Face tokenizer ``path``.

    A local directory is loaded as is (never downloads).  Anything else is a hub name (``"gpt2"``): it is
    downloaded with ``transformers.AutoTokenizer.from_pretrained`` and ``save_pretrained(out_dir)`` first,
    and the returned tokenizer reads that saved copy, so a later ``.save(out_dir)`` rewrites the same files
    with the same content.  The mask id is appended after the vocabulary as a special token when the tokenizer has none
    (GPT-2: mask 50257, vocab 50258)."""
    from .tokenizer import hf_tokenizer

    p = Path(path).expanduser()
    if p.is_dir():
        return hf_tokenizer(p)
    if _looks_local(path):
        raise FileNotFoundError(f"tokenizer path {path} is not a directory")
    from transformers import AutoTokenizer

    problem = hub_problem()
    if problem is None:
        tok = AutoTokenizer.from_pretrained(path)  # downloads from the hub
    else:
        try:
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except OSError:
            raise HubUnreachableError("tokenizer", path, problem) from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out)
    return hf_tokenizer(out)


# Files an evaluator needs: configs, tokenizer files, weights, and the modeling/configuration code of a
# custom-code model (LLaDA's and Dream's `auto_map` names *.py files that transformers imports under
# trust_remote_code: without them the folder does not load).  Other frameworks' weights (TF, Flax, ONNX, Rust) and
# Meta's original consolidated checkpoints (Llama `original/`) are skipped.
_MODEL_EXTRA = (".json", ".model", ".txt", ".tiktoken", ".py")
_SKIP_DIRS = ("original/", "onnx/", "coreml/")


def select_model_files(files: list[str]) -> list[str]:
    """The repository files to download for a causal-LM evaluator or a DLLM: configs, tokenizer files and custom
    code (top-level ``*.py``), plus the ``*.safetensors`` weights (or the PyTorch ``*.bin`` weights when a repo
    has no safetensors)."""
    files = [f for f in files if not f.startswith(_SKIP_DIRS)]
    weights = [f for f in files if f.endswith(".safetensors")]
    if not weights:
        weights = [f for f in files if f.endswith(".bin") and "training_args" not in f]
    if not weights:
        raise ValueError(f"no *.safetensors or *.bin weights among {files}")
    return sorted([f for f in files if f.endswith(_MODEL_EXTRA) and "/" not in f] + weights)


def fetch_model(repo_id: str, out_dir) -> Path:
    """Download the Hugging Face snapshot ``repo_id`` (files of :func:`select_model_files`) into ``out_dir``.

    Needs internet (run it on a login node: rule ``download_hf_model`` is a localrule).  Gated models
    (meta-llama/*) need an accepted licence and a token (``HF_TOKEN`` or ``huggingface-cli login``)."""
    import huggingface_hub

    out = Path(out_dir)
    problem = hub_problem()
    if problem is None:
        files = select_model_files(huggingface_hub.HfApi().list_repo_files(repo_id))
        huggingface_hub.snapshot_download(repo_id, local_dir=out, allow_patterns=files)
    else:  # the cached snapshot (HF_HOME), copied
        import shutil

        try:
            cached = Path(huggingface_hub.snapshot_download(repo_id, local_files_only=True))
        except Exception:
            raise HubUnreachableError("model", repo_id, problem) from None
        names = [str(f.relative_to(cached)) for f in cached.rglob("*") if f.is_file()]
        for name in select_model_files(names):
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cached / name, out / name)
    if not (out / "config.json").exists():
        raise FileNotFoundError(f"{repo_id}: no config.json after download into {out}")
    return out


def fetch_dataset_file(repo_id: str, filename: str, out_path, revision: str | None = None) -> Path:
    """One file of the Hugging Face dataset repository ``repo_id`` (at ``revision``, default ``main``) at
    ``out_path`` (rule ``download_task_file``: a local task's release file).  From the hub when it answers (checked
    first, :func:`hub_problem`), else from the local cache (``HF_HOME``, filled e.g. by ``hf download --repo-type
    dataset``); not there either: a :class:`HubUnreachableError` naming it, at once."""
    import shutil
    import tempfile

    from huggingface_hub import hf_hub_download

    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    problem = hub_problem()
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        if problem is None:
            got = hf_hub_download(repo_id, filename, repo_type="dataset", revision=revision, local_dir=tmp)
        else:
            try:
                got = hf_hub_download(repo_id, filename, repo_type="dataset", revision=revision, local_files_only=True)
            except Exception:
                raise HubUnreachableError("dataset file", f"{repo_id}/{filename}", problem) from None
        shutil.copyfile(got, Path(tmp) / "file")
        (Path(tmp) / "file").replace(out)
    return out
