"""The DLLM half's file I/O: task data -> tokenizers and training tensors, training the tiny DLLMs, AR rows and
proxy, and the decoders the lm-eval adapter (:mod:`unie.lmeval`) drives.

Directory ``resources/dllm/`` (written by :func:`prepare_dllm_data`):
``tokenizers/{word,bpe}/``, ``{tokenizer}_{layout}_{data}.pt`` tensors (layout ``dllm`` or ``ar``; data ``sft``
or ``mix``), ``{tokenizer}_pretrain.pt`` (pretraining rows, either layout) and ``meta.json`` (prompt lengths per tokenizer, ``gen_length``).
A trained model directory holds ``model.safetensors``, ``config.json`` (with ``extra.layout``: the
tokenizer, prompt and generation lengths the model was trained with) and ``tokenizer/`` (self-contained,
so ``--model_args pretrained=results/models/llada`` is all lm-eval needs).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
from pathlib import Path

import torch

from ..core.config import ConfigError, TrainConfig, from_dict
from ..core.distributed import world
from ..core.integrity import (DamagedFileError, atomic_write, file_record, file_sha256, read_json, verify_file,
                              write_json)
from ..core.train import run_spec, train
from ..data.dllm_format import (ar_sft_rows, content_lengths, dllm_prompt_rows, dllm_sft_rows, pack_text,
                                trim_padding)
from ..data.tasks import task_vocabulary
from ..data.tokenizer import bpe_tokenizer, load_tokenizer, word_tokenizer
from ..energy.bridge import ProxyBridge
from ..core.registry import DLLM_SAMPLERS
from ..methods.dllm import DecodeOptions, mc_loglikelihood
from ..models.checkpoint import CheckpointError, load_model, read_meta, save_model
from ..models.transformer import Transformer
from .models import build_method, init_fingerprint, model_config

LAYOUTS = {"llada": "dllm", "dream": "dllm", "ar": "ar"}


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------- data
def prepare_dllm_data(task_files: dict, test_files: dict, toy_texts: list[str], out_dir, gen_length: int,
                      bpe_vocab_size: int, n_pretrain_texts: int, log=print) -> dict:
    """Tokenizers and training tensors of the DLLM half.

    ``task_files``: task -> train JSONL (the fine-tuning mix); ``test_files``: task -> test JSONL (only to size
    the prompt length); ``toy_texts``: toy-world text (pretraining, and the proxy's mix)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train_docs = [d for t in sorted(task_files) for d in read_jsonl(task_files[t])]
    all_prompts = [d["question"] for d in train_docs] + [d["question"] for t in sorted(test_files)
                                                          for d in read_jsonl(test_files[t])]
    prompts, answers = [d["question"] for d in train_docs], [d["answer"] for d in train_docs]
    toy = toy_texts[:n_pretrain_texts]
    toks = {
        "word": word_tokenizer(task_vocabulary(), unk=True),
        # the LLaDA-like model's own tokenizer: BPE on the same text (it splits many words into pieces)
        "bpe": bpe_tokenizer(toy + [p + " " + a for p, a in zip(prompts, answers)], bpe_vocab_size),
    }
    meta = {"gen_length": gen_length, "prompt_len": {}, "n_sft": len(train_docs), "tasks": sorted(task_files),
            "n_pretrain_texts": len(toy), "files": {}}  # files: size and SHA-256 of each tensor file (checked on load)
    g = torch.Generator().manual_seed(0)
    for name, tok in toks.items():
        tok.save(out / "tokenizers" / name)
        P = 1 + max(len(ids) for ids in tok.encode_batch(all_prompts))
        T = P + gen_length
        meta["prompt_len"][name] = P
        dllm = dllm_sft_rows(tok, prompts, answers, P, gen_length)
        ar = ar_sft_rows(tok, prompts, answers, T)
        pre = pack_text(tok, toy, T)
        pre3 = torch.stack([pre, torch.ones_like(pre)], dim=1)
        tensors = {"dllm_sft": dllm, "ar_sft": ar, "pretrain": pre,  # pretraining rows fit either layout
                   "ar_mix": torch.cat([ar, pre3])[torch.randperm(len(ar) + len(pre3), generator=g)]}
        for key, x in tensors.items():
            atomic_write(out / f"{name}_{key}.pt", lambda tmp, x=x: torch.save(x, tmp))
            meta["files"][f"{name}_{key}.pt"] = file_record(out / f"{name}_{key}.pt")
        log(f"{name} tokenizer: {tok.vocab_size} tokens, prompt_len {P}, T {T}; sft {tuple(dllm.shape)}, "
            f"pretrain {tuple(pre.shape)}")
    write_json(meta, out / "meta.json", indent=1)  # last: it vouches for the files above
    return meta


def load_dllm_tensor(data_dir, filename: str, meta: dict) -> tuple[torch.Tensor, str]:
    """``(tensor, sha256)`` of a training tensor of :func:`prepare_dllm_data`, its bytes checked against the size
    and SHA-256 in ``meta.json``; a damaged file is a :class:`DamagedFileError` naming it and the fix (rule
    ``dllm_data`` rewrites every tensor when its ``meta.json`` is missing)."""
    path = Path(data_dir) / filename
    fix = f"delete {Path(data_dir) / 'meta.json'} and rerun the workflow (rule dllm_data rewrites every tensor)"
    record = meta.get("files", {}).get(filename)
    digest = verify_file(path, record, fix) if record else file_sha256(path)
    try:
        return torch.load(path, weights_only=True), digest
    except Exception as e:
        raise DamagedFileError(path, f"torch cannot read it ({(str(e).splitlines() or [type(e).__name__])[0]})",
                               fix) from None


# ---------------------------------------------------------------------- training
def transfer_weights(net, init, new_tok, old_tok, log=print) -> None:
    """Initialise ``net`` from ``init`` (another vocabulary, or another attention direction: an AR's weights
    for the Dream-like model).  Every tensor of the same name and shape is copied; the embedding and the
    output head are copied row by row for the tokens both vocabularies share (matched by the text they add,
    :meth:`~unie.data.tokenizer.Tokenizer.surfaces`, so BPE's ``▁anchor`` takes the word model's ``anchor``;
    specials by name);
    new tokens keep their initialisation.  Any other shape difference is an error."""
    own, theirs = net.state_dict(), init.state_dict()

    def keys(tok):  # specials by name, every other token by the text it adds (" anchor" in both vocabularies)
        specials = {tok.eos_id, tok.bos_id, tok.mask_id}
        return [t if i in specials or t.startswith("<") and t.endswith(">") else s
                for i, (t, s) in enumerate(zip(tok.tokens, tok.surfaces()))]

    new_index = {}
    for i, k in enumerate(keys(new_tok)):
        new_index.setdefault(k, i)
    shared = [(new_index[k], j) for j, k in enumerate(keys(old_tok)) if k in new_index]
    copied = []
    with torch.no_grad():
        for k, v in theirs.items():
            if k not in own:
                raise CheckpointError(f"init weights have {k!r}, which the new network lacks")
            if own[k].shape == v.shape and k not in ("embed.weight", "head.weight"):
                own[k].copy_(v)
            elif k in ("embed.weight", "head.weight") and own[k].shape[1:] == v.shape[1:]:
                ni, oi = torch.tensor([a for a, _ in shared]), torch.tensor([b for _, b in shared])
                own[k][ni] = v[oi]
            else:
                raise CheckpointError(f"init weights {k!r} have shape {tuple(v.shape)}, the new network "
                                      f"{tuple(own[k].shape)}")
            copied.append(k)
    net.load_state_dict(own)
    log(f"initialised from another checkpoint: {len(copied)} tensors; {len(shared)} of {len(new_tok.tokens)} "
        f"token rows shared by string")


def train_dllm_model(name: str, spec: dict, data_dir, out_dir, ckpt_dir, device: str = "cpu",
                     init_dir=None, init_tokenizer_dir=None, log=print):
    """Train one model of ``config['dllm']['models']`` on ``data_dir/{tokenizer}_{layout}_{data}.pt`` (``{tokenizer}_pretrain.pt``).

    Under ``torch.distributed`` every rank calls this (data-parallel :func:`~unie.core.train.train`, ``device``
    is the rank's own); only rank 0 writes ``out_dir``."""
    data_dir = Path(data_dir)
    tok_name, data_kind = spec["tokenizer"], spec["data"]
    tok = load_tokenizer(data_dir / "tokenizers" / tok_name)
    meta = read_json(data_dir / "meta.json", "DLLM data description")
    method = build_method(spec["method"], tok.info(), spec.get("options", {}), f"dllm.models.{name}.options")
    layout = LAYOUTS[spec["method"]]
    path = data_dir / (f"{tok_name}_pretrain.pt" if data_kind == "pretrain" else f"{tok_name}_{layout}_{data_kind}.pt")
    if not path.exists():
        raise ConfigError(f"dllm.models.{name}: no {data_kind!r} data for layout {layout!r} ({path})")
    data, data_sha = load_dllm_tensor(data_dir, path.name, meta)
    seq_len = data.shape[-1]
    cfg = model_config(spec["arch"], tok.vocab_size, seq_len, method)
    tcfg = from_dict(TrainConfig, spec["train"], f"dllm.models.{name}.train")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(tcfg.seed)
        net = Transformer(cfg).to(device)
    init_tok_fp = None
    if init_dir:
        init, init_meta = load_model(init_dir, device)
        old_tok = load_tokenizer(init_tokenizer_dir)
        init_tok_fp = old_tok.info()["fingerprint"]
        if init_meta["tokenizer"]["fingerprint"] != init_tok_fp:
            raise CheckpointError(f"{init_dir} was not trained with the tokenizer at {init_tokenizer_dir}")
        transfer_weights(net, init, tok, old_tok, log)
    sig = run_spec(tcfg, {"model": dataclasses.asdict(cfg), "method": spec["method"],
                          "options": spec.get("options", {}), "data": {"sha256": data_sha, "shape": list(data.shape)},
                          "tokenizer": tok.info()["fingerprint"], "init": init_fingerprint(init_dir),
                          "init_tokenizer": init_tok_fp})
    log(f"training {name} ({spec['method']}, {tok_name} tokenizer, {data_kind} data {tuple(data.shape)}): "
        f"{sum(p.numel() for p in net.parameters()) / 1e6:.2f}M parameters")
    bucketed = {}
    if tcfg.length_buckets > 1:  # batches of similar length, all-padding columns dropped (see TrainConfig)
        bucketed = {"row_lengths": content_lengths(data, tok.eos_id),
                    "collate": functools.partial(trim_padding, pad_id=tok.eos_id)}
    ema, history = train(net, method.loss, data, tcfg, ckpt_dir, sig, log=log, **bucketed)
    extra = {"options": spec.get("options", {}), "train": spec["train"], "data": str(path),
             "layout": {"kind": layout, "tokenizer": tok_name, "prompt_len": meta["prompt_len"][tok_name],
                        "gen_length": meta["gen_length"], "pad_to_batch": tcfg.length_buckets > 1},
             "final": next((h for h in reversed(history) if "loss" in h), {})}
    if world()[0] == 0:
        save_model(ema, out_dir, spec["method"], tok.info(), extra=extra)
        shutil.copytree(data_dir / "tokenizers" / tok_name, Path(out_dir) / "tokenizer", dirs_exist_ok=True)
        Path(out_dir, "history.json").write_text(json.dumps(history, indent=1))
    return ema, history


# ---------------------------------------------------------------------- decoders (what lm-eval drives)
def load_trained(model_dir, device: str = "cpu"):
    """``(wrapped model, tokenizer, layout)`` of a directory written by :func:`train_dllm_model`."""
    read_meta(model_dir)  # a missing checkpoint is named before its tokenizer is looked for
    tok = load_tokenizer(Path(model_dir) / "tokenizer")
    net, meta = load_model(model_dir, device, tokenizer_info=tok.info())
    method = build_method(meta["method"], tok.info(), meta.get("extra", {}).get("options", {}),
                          f"checkpoint {model_dir} options")
    wrapped = method.wrap(net)
    wrapped.tokenizer = tok
    layout = meta.get("extra", {}).get("layout")
    if layout is None:
        raise CheckpointError(f"{model_dir}: not a DLLM-half checkpoint (no layout in its config.json)")
    return wrapped, tok, layout


def completion_text(tok, ids: list[int]) -> str:
    """The generated text up to the first ``<eos>`` (masks never remain after decoding)."""
    ids = list(ids)
    if tok.eos_id in ids:
        ids = ids[: ids.index(tok.eos_id)]
    return tok.decode(ids).strip()


def check_positions(model, name: str, prompt_positions: int, gen_length: int) -> None:
    """A :class:`ConfigError` before any generation when the longest prompt plus ``gen_length`` exceeds the positions
    the model covers (a Hugging Face model's ``max_position_embeddings``: beyond it, a raw indexing error mid-run)."""
    limit = getattr(model, "max_positions", None)
    if limit is not None and prompt_positions + gen_length > limit:
        raise ConfigError(f"{name}: the longest prompt ({prompt_positions} positions) + gen_length {gen_length} = "
                         f"{prompt_positions + gen_length} exceeds the {limit} positions the model covers "
                         f"(max_position_embeddings of {getattr(model, 'path', name)}); lower gen_length in "
                         "model_args (dllm.decoding) or shorten the prompts")


class DLLMDecoder:
    """A :class:`~unie.core.protocols.TextDecoder` over a DLLM backbone and a registered DLLM sampler
    (:data:`~unie.core.registry.DLLM_SAMPLERS`: ``plain``, the backbone's own decoder; ``energy``, Algorithm 3;
    the baselines).  Without ``sampler`` it is ``energy`` when ``energy_options`` are given, else ``plain``."""

    def __init__(self, backbone, tokenizer, prompt_len: int | None, decode_options: DecodeOptions,
                 energy_options=None, bridge: ProxyBridge | None = None,
                 seed: int = 0, mc_num: int = 32, name: str = "dllm", pad_to_batch: bool = False,
                 sampler: str | None = None):
        """``prompt_len``: the prompt positions the model was trained with (longer prompts are refused); prompts
        are left-padded to it, or only to the batch's longest prompt when ``pad_to_batch`` (a model trained on
        length-bucketed batches, which never saw more padding than its bucket needed).  ``energy_options``:
        the sampler's options object (or mapping); ``bridge``: the proxy, for a sampler that needs one."""
        sampler = sampler or ("plain" if energy_options is None else "energy")
        self.sampler = DLLM_SAMPLERS[sampler]
        if self.sampler.needs_proxy and bridge is None:
            raise ValueError(f"DLLM sampler {sampler!r} needs a proxy")
        if not self.sampler.needs_proxy and bridge is not None:
            raise ValueError(f"DLLM sampler {sampler!r} takes no proxy")
        self.backbone, self.tok, self.prompt_len, self.pad_to_batch = backbone, tokenizer, prompt_len, pad_to_batch
        self.decode_options, self.bridge = decode_options, bridge
        self.energy_options = self.sampler.options(energy_options)  # the sampler's options (kept name)
        self.generator = torch.Generator().manual_seed(seed)
        self.mc_num, self.name = mc_num, name

    def check(self, prompts: list[str]) -> None:
        """Errors before any generation: prompts that do not fit (the trained prompt length, or a Hugging Face
        model's position limit for prompt + ``gen_length``), text the proxy cannot read."""
        lengths = [len(ids) + 1 for ids in self.tok.encode_batch(prompts)]
        if self.prompt_len is not None and max(lengths) > self.prompt_len:
            raise ValueError(f"a prompt needs {max(lengths)} positions; the model was trained with prompt_len "
                             f"{self.prompt_len}")
        P = self.prompt_len if self.prompt_len is not None and not self.pad_to_batch else max(lengths)
        check_positions(self.backbone, self.name, P, self.decode_options.gen_length)
        if self.bridge is not None:
            self.bridge.check(prompts)

    def generate(self, prompts: list[str], max_new_tokens: int) -> tuple[list[str], dict]:
        G = self.decode_options.gen_length
        longest = 1 + max(len(ids) for ids in self.tok.encode_batch(prompts))
        P = longest if self.pad_to_batch or not self.prompt_len else self.prompt_len
        x = dllm_prompt_rows(self.tok, prompts, P, G)
        device = getattr(getattr(self.backbone, "net", None), "device", "cpu")
        x = x.to(device)
        out, stats = self.sampler.fn(self.backbone, x, self.decode_options, self.energy_options, proxy=self.bridge,
                                     generator=self.generator)
        gen = out[:, P:P + min(G, max_new_tokens)].tolist()
        return [completion_text(self.tok, g) for g in gen], {"nfe": stats["nfe"], "generated_tokens": G * len(prompts),
                                                             "proxy_forwards": stats.get("proxy_forwards", 0)}

    def loglikelihood(self, contexts: list[str], continuations: list[str]) -> list[float]:
        out = []
        for c, t in zip(contexts, continuations):
            out.append(mc_loglikelihood(self.backbone, [self.tok.bos_id] + self.tok.encode(c), self.tok.encode(t),
                                        mc_num=self.mc_num, batch_size=min(self.mc_num, 32),
                                        generator=self.generator))
        return out


class ARDecoder:
    """A :class:`~unie.core.protocols.TextDecoder` over an AR model (greedy, ``gen_length`` tokens)."""

    def __init__(self, model, tokenizer, gen_length: int, name: str = "ar"):
        self.model, self.tok, self.gen_length, self.name = model, tokenizer, gen_length, name

    def check(self, prompts: list[str]) -> None:
        lengths = [len(ids) for ids in self.tok.encode_batch(prompts)]
        check_positions(self.model, self.name, max(lengths), self.gen_length)

    def generate(self, prompts: list[str], max_new_tokens: int) -> tuple[list[str], dict]:
        G = min(self.gen_length, max_new_tokens)
        gen = self.model.greedy_continue(self.tok.encode_batch(prompts), G).tolist()
        return [completion_text(self.tok, g) for g in gen], {"nfe": G, "generated_tokens": G * len(prompts)}

    @torch.no_grad()
    def loglikelihood(self, contexts: list[str], continuations: list[str]) -> list[float]:
        out = []
        for c, t in zip(contexts, continuations):
            ctx, tgt = self.tok.encode(c), self.tok.encode(t)
            x = torch.tensor([[self.tok.bos_id] + ctx + tgt])
            lp = self.model.logits(x).log_softmax(-1)[0, :-1].gather(-1, x[0, 1:, None]).squeeze(-1)
            out.append(float(lp[len(ctx):].double().sum()))
        return out


# how a row's model (and proxy) is loaded: copied from a Table 3 row into its model_args (row_model_args)
LOADING_KEYS = ("kind", "style", "trust_remote_code", "mask_token", "proxy_trust_remote_code", "attn_implementation")
DECODER_KEYS = {"pretrained", "proxy", "sampler", "gen_length", "block_length", "tokens_per_step", "confidence", "seed",
                "mc_num", "device", "prompt_len", "name", *LOADING_KEYS}  # plus every registered DLLM sampler's options


# loading keys a kind never reads (an error, not silently ignored): style, mask_token and attn_implementation are
# read for a kind=hf_dllm checkpoint, trust_remote_code for both Hugging Face kinds
NOT_READ_BY_KIND = {"unie": {"style", "mask_token", "attn_implementation", "trust_remote_code"},
                    "hf_ar": {"style", "mask_token", "attn_implementation"}}


def unread_keys(args: dict) -> list[str]:
    """The keys of ``args`` (a row or lm-eval's model_args) that its ``kind`` never reads (:data:`NOT_READ_BY_KIND`)."""
    return sorted(set(args) & NOT_READ_BY_KIND.get(args.get("kind", "unie"), set()))


def sampler_option_keys() -> set[str]:
    return {k for entry in DLLM_SAMPLERS.values() for k in entry.option_names()}


def build_decoder(args: dict):
    """A decoder from lm-eval's ``--model_args`` (a dict).  Keys: ``pretrained`` (a model directory),
    ``kind`` (``unie``, default: our checkpoints; ``hf_dllm``/``hf_ar``: Hugging Face checkpoints with ``style``
    llada|dream, ``trust_remote_code``, ``mask_token``, ``attn_implementation``), decoding options (``gen_length``, ``block_length``,
    ``tokens_per_step``, ``confidence``), ``sampler`` (a registered DLLM sampler: ``plain``, ``energy``
    (Algorithm 3), the baselines; default ``energy`` when an ``energy`` key is given, else ``plain``) with that
    sampler's own options (``K``, ``w``, ... for ``energy``), and ``proxy`` (a directory or HF name, with
    ``proxy_trust_remote_code``) for a sampler that reads an AR proxy.  An unknown key, an option of another
    sampler, a missing checkpoint or an unbridgeable proxy is an error before any generation."""
    args = dict(args)
    unknown = sorted(set(args) - DECODER_KEYS - sampler_option_keys())
    if unknown:
        raise ConfigError(f"unknown model_args {unknown}; known: {sorted(DECODER_KEYS | sampler_option_keys())}")
    sampler = str(args.get("sampler", "energy" if "energy" in args else "plain"))
    if sampler not in DLLM_SAMPLERS:
        raise ConfigError(DLLM_SAMPLERS.unknown_message(sampler))
    entry = DLLM_SAMPLERS[sampler]
    foreign = sorted((set(args) & sampler_option_keys()) - set(entry.option_names()))
    if foreign:
        raise ConfigError(f"model_args {foreign} are not options of DLLM sampler {sampler!r} "
                          f"(its options: {sorted(entry.option_names())})")
    if "pretrained" not in args:
        raise ConfigError("model_args needs pretrained=<model directory>")
    device, kind = args.get("device", "cpu"), args.get("kind", "unie")
    ignored = unread_keys(args)
    if ignored:
        raise ConfigError(f"model_args {ignored} do not apply to kind={kind!r}: nothing would read them")
    seed = int(args.get("seed", 0))
    name = str(args.get("name", Path(str(args["pretrained"])).name))
    if kind == "unie":
        model, tok, layout = load_trained(args["pretrained"], device)
        prompt_len = args.get("prompt_len", layout["prompt_len"])
        pad_to_batch = bool(layout.get("pad_to_batch", False))
        default_gen = layout["gen_length"]
        is_ar = layout["kind"] == "ar"
    elif kind in ("hf_dllm", "hf_ar"):
        from ..models.hf import load_hf_causal, load_hf_dllm

        trust = bool(args.get("trust_remote_code", False))
        if kind == "hf_ar":
            model = load_hf_causal(args["pretrained"], trust_remote_code=trust, device=device)
        else:
            model = load_hf_dllm(args["pretrained"], style=args.get("style", "llada"), trust_remote_code=trust,
                                 mask_token=args.get("mask_token"), device=device,
                                 attn_implementation=args.get("attn_implementation"))
        tok, prompt_len, default_gen, is_ar = model.tokenizer, args.get("prompt_len"), 256, kind == "hf_ar"
        pad_to_batch = False
    else:
        raise ConfigError(f"unknown decoder kind {kind!r}; known: unie, hf_dllm, hf_ar")
    gen_length = int(args.get("gen_length", default_gen))
    if is_ar:
        if "proxy" in args or "sampler" in args or set(args) & sampler_option_keys():
            raise ConfigError("an AR model decodes left to right: sampler/proxy options apply to DLLMs only")
        return ARDecoder(model, tok, gen_length, name=name)
    dec_fields = {f.name for f in dataclasses.fields(DecodeOptions)}
    d_opts = from_dict(DecodeOptions, {**{k: args[k] for k in dec_fields if k in args}, "gen_length": gen_length},
                       "decoding options")
    s_opts = from_dict(entry.options_cls, {k: args[k] for k in entry.option_names() if k in args},
                       f"DLLM sampler {sampler!r} options")
    common = dict(seed=seed, mc_num=int(args.get("mc_num", 32)), name=name, pad_to_batch=pad_to_batch,
                  sampler=sampler)
    if entry.preflight is not None:
        try:
            entry.preflight(model, s_opts)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"DLLM sampler {sampler!r} cannot decode {args['pretrained']}: {e}") from e
    if not entry.needs_proxy:
        if "proxy" in args:
            raise ConfigError(f"DLLM sampler {sampler!r} takes no proxy (proxy={args['proxy']!r} given)")
        return DLLMDecoder(model, tok, prompt_len, d_opts, s_opts, **common)
    if "proxy" not in args:
        raise ConfigError(f"DLLM sampler {sampler!r} needs proxy=<AR proxy directory>")
    if Path(str(args["proxy"]), "tokenizer").exists():
        proxy, _, proxy_layout = load_trained(args["proxy"], device)
        if proxy_layout["kind"] != "ar":
            raise ConfigError(f"proxy {args['proxy']} is not an autoregressive model")
    else:
        from ..models.hf import load_hf_causal

        proxy = load_hf_causal(args["proxy"], trust_remote_code=bool(args.get("proxy_trust_remote_code", False)),
                               device=device)
    if not hasattr(proxy, "logits") or not hasattr(proxy, "bos_id"):
        raise ConfigError(f"proxy {args['proxy']} is not an autoregressive model")
    return DLLMDecoder(model, tok, prompt_len, d_opts, s_opts, ProxyBridge(proxy, tok), **common)


def row_model_args(name: str, row: dict, dllm: dict, inputs: dict, device: str) -> dict:
    """lm-eval ``model_args`` of a Table 3 row (config ``dllm.rows``): the model (and proxy) directories from
    the rule's inputs, the shared decoding options, the shared energy options (``dllm.energy``) for an
    Algorithm 3 row (:func:`row_sampler`), then the row's own ``options`` (``sampler`` and its options)."""
    def directory(path):
        p = Path(path)
        return str(p.parent if p.suffix else p)

    args = {"pretrained": directory(inputs["model"]), "name": name, "device": device}
    for key in LOADING_KEYS:
        if key in row:
            args[key] = row[key]
    args.update(dllm.get("decoding", {}))  # an AR row's decoder reads only gen_length
    if row.get("proxy"):
        args["proxy"] = directory(inputs["proxy"])
    if row_sampler(row) == "energy":
        args.update(dllm.get("energy", {}))  # Algorithm 3's shared options (dllm.energy)
    args.update(row.get("options", {}))
    return args


def row_sampler(row: dict) -> str:
    """The DLLM sampler of a Table 3 row, as :func:`build_decoder` reads its ``model_args``: ``options.sampler``,
    else ``energy`` (Algorithm 3) for a row whose options name an ``energy``, else ``plain`` (the backbone's own
    decoder)."""
    opts = row.get("options", {})
    return str(opts.get("sampler", "energy" if "energy" in opts else "plain"))


# ---------------------------------------------------------------------- sweeps (Figure 4, appendix k/w tables)
def sweep_points(dllm: dict, sweep: str) -> list[dict]:
    """The points of sweep ``sweep`` (config ``dllm.sweeps.sets``): per curve, per value of its one varied
    option, ``{name, curve, label, key, value, row}`` where ``row`` is the curve's row spec (a Table 3 row: model,
    proxy, options) with ``options[key] = value``.  ``name`` = ``{curve}__{key}_{value}`` is the point's
    directory under ``results/dllm/sweeps/{sweep}/``."""
    out = []
    for curve, spec in dllm["sweeps"]["sets"][sweep].items():
        base = {k: v for k, v in spec.items() if k != "vary"}
        ((key, values),) = spec["vary"].items()
        for value in values:
            row = {**base, "options": {**base.get("options", {}), key: value}}
            out.append({"name": f"{curve}__{key}_{value}", "curve": curve, "label": spec.get("label", curve),
                        "key": key, "value": value, "row": row})
    return out


def run_sweep(sweep: str, dllm: dict, inputs: dict, out_dir, device: str, evaluate, log=print) -> list[dict]:
    """Rule dllm_sweep: one lm-eval run (the real evaluator, ``--log_samples``) per point of ``sweep`` on the task
    ``dllm.sweeps.task``, all in this process (lm-eval and the models are imported once; every point's
    throughput is timed by the adapter: warm-up batch excluded, model loading excluded, ``dllm.batch_size``).
    Writes ``{point}/results.json`` (lm-eval's JSON) and ``{point}/throughput.json`` per point and
    ``points.json`` (one record per point: accuracy and its s.e. from lm-eval, tokens/s, NFE) under
    ``out_dir``; returns the records.  ``evaluate``: :func:`unie.lmeval.evaluate` (the layer above passes it in)."""
    from ..data.tasks import PRIMARY_METRIC

    out_dir = Path(out_dir)
    task = dllm["sweeps"]["task"]
    metric = dllm["tasks"].get("metrics", {}).get(task) or f"{PRIMARY_METRIC[task]},none"
    include = inputs.get("tasks") or inputs.get("local_tasks")
    include = Path(include[0] if isinstance(include, (list, tuple)) else include).parent if include else None
    records = []
    for point in sweep_points(dllm, sweep):
        point_dir = out_dir / point["name"]
        args = row_model_args(point["name"], point["row"], dllm, {role: inputs[f"{point['curve']}_{role}"]
                              for role in ("model", "proxy") if f"{point['curve']}_{role}" in inputs}, device)
        log(f"{sweep} {point['name']}: model_args {args}")
        found = evaluate(args, [task], include, point_dir, dllm["batch_size"],
                         include_defaults=dllm.get("include_default_tasks", False), limit=dllm.get("limit"),
                         seed=dllm.get("seed", 0), allow_code_execution=dllm["tasks"].get("allow_code_execution", False),
                         log=log)
        shutil.copyfile(found, point_dir / "results.json")
        res = json.loads((point_dir / "results.json").read_text())["results"][task]
        tp = json.loads((point_dir / "throughput.json").read_text())
        name, filt = metric.split(",", 1)
        records.append({"sweep": sweep, "point": point["name"], "curve": point["curve"], "label": point["label"],
                        "key": point["key"], "value": point["value"], "task": task, "metric": metric,
                        "accuracy": 100 * res[metric], "stderr": 100 * res[f"{name}_stderr,{filt}"],
                        "n": len(read_jsonl(next(point_dir.rglob(f"samples_{task}_*.jsonl")))),
                        "tokens_per_s": tp["tokens_per_s"], "nfe": tp["nfe"], "seconds": tp["seconds"],
                        "requests": tp["requests"], "generated_tokens": tp["generated_tokens"],
                        "model_args": {k: v for k, v in args.items() if k != "device"}})
        log(f"  accuracy {records[-1]['accuracy']:.1f} ± {records[-1]['stderr']:.1f}, "
            f"{records[-1]['tokens_per_s']:.0f} tokens/s, NFE {tp['nfe']}")
    tmp = out_dir / "points.json.tmp"
    tmp.write_text(json.dumps({"sweep": sweep, "task": task, "metric": metric, "batch_size": dllm["batch_size"],
                               "points": records}, indent=1))
    tmp.replace(out_dir / "points.json")
    return records
