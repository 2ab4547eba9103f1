"""Stand-ins shared by the tests: a tiny transformers Llama to save with ``save_pretrained`` (the paper profile's
Hugging Face loading paths, offline) and a spy that records every state a DLLM sampler asks its backbone about."""

from __future__ import annotations

import torch

from unie.models.standins import tiny_llama  # noqa: F401  (the tests' tiny transformers Llama)


class Spy:
    """Wraps a DLLM backbone and records every state ``x`` (a copy) it is asked for logits of in ``seen``."""

    def __init__(self, b):
        self.b, self.seen = b, []
        self.mask_id, self.blocked = b.mask_id, b.blocked

    def logits(self, x):
        self.seen.append(x.clone())
        return self.b.logits(x)


# ---------------------------------------------------------------------- remote-code DLLMs (LLaDA, Dream)
# Miniatures of the modeling code LLaDA-8B-Instruct and Dream-v0-Instruct-7B ship beside their weights (loaded with
# trust_remote_code), written for transformers 4.x in the two ways that matter to the version range
# (docs/paper-profile.md): LLaDA's ``LLaDAModelLM`` subclasses ``PreTrainedModel`` and never calls ``post_init()``;
# Dream's ``DreamModel`` calls it and declares ``_tied_weights_keys`` as a list.  The math is a tiny bidirectional
# transformer (LLaDA's attention through each block's ``_scaled_dot_product_attention``, which DAWN wraps); Dream's
# logits at position i are for token i + 1 (Qwen's head), which the "dream" style shifts back.

_LLADA_CONFIG = """
from transformers import PretrainedConfig


class LLaDAConfig(PretrainedConfig):
    model_type = "llada"

    def __init__(self, d_model=16, n_heads=2, n_layers=2, vocab_size=16, mask_token_id=15, **kwargs):
        self.d_model, self.n_heads, self.n_layers = d_model, n_heads, n_layers
        self.vocab_size, self.mask_token_id = vocab_size, mask_token_id
        super().__init__(**kwargs)
"""

_LLADA_MODEL = '''
import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from .configuration_llada import LLaDAConfig


class LLaDABlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.n_heads
        self.att_proj = nn.Linear(config.d_model, 3 * config.d_model)
        self.attn_out = nn.Linear(config.d_model, config.d_model)

    def _scaled_dot_product_attention(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)

    def forward(self, x):
        B, L, D = x.shape
        q, k, v = self.att_proj(x).view(B, L, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        a = self._scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False)
        return x + self.attn_out(a.transpose(1, 2).reshape(B, L, D))


class LLaDAModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(LLaDABlock(config) for _ in range(config.n_layers))
        self.ff_out = nn.Linear(config.d_model, config.vocab_size)

    def forward(self, input_ids):
        h = self.wte(input_ids)
        for block in self.blocks:
            h = block(h)
        return self.ff_out(h)


class LLaDAModelLM(PreTrainedModel):
    """LLaDA's "extremely barebones HF model wrapper": no post_init() (transformers 4.x never needed it)."""

    config_class = LLaDAConfig
    base_model_prefix = "model"
    _no_split_modules = ["LLaDABlock"]

    def __init__(self, config, model=None, init_params=False):
        super().__init__(config)
        self.model = model or LLaDAModel(config)

    def forward(self, input_ids=None, attention_mask=None, output_attentions=None, **kwargs):
        if output_attentions:
            raise ValueError("output_attentions is not yet supported in LLaDA")
        return CausalLMOutputWithPast(logits=self.model(input_ids))
'''

_DREAM_CONFIG = """
from transformers import PretrainedConfig


class DreamConfig(PretrainedConfig):
    model_type = "Dream"

    def __init__(self, hidden_size=16, num_attention_heads=2, num_hidden_layers=2, vocab_size=16,
                 mask_token_id=15, tie_word_embeddings=False, **kwargs):
        self.hidden_size, self.num_attention_heads = hidden_size, num_attention_heads
        self.num_hidden_layers, self.vocab_size, self.mask_token_id = num_hidden_layers, vocab_size, mask_token_id
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
"""

_DREAM_MODEL = """
import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput

from .configuration_dream import DreamConfig


class DreamPreTrainedModel(PreTrainedModel):
    config_class = DreamConfig
    base_model_prefix = "model"
    _no_split_modules = ["DreamDecoderLayer"]

    def _init_weights(self, module):
        pass


class DreamDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x):
        B, L, D = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        return x + self.o_proj(a.transpose(1, 2).reshape(B, L, D))


class DreamBaseModel(DreamPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DreamDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.post_init()

    def forward(self, input_ids):
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h)
        return h


class DreamModel(DreamPreTrainedModel):
    _tied_weights_keys = ["lm_head.weight"]  # a list, as transformers 4.x wanted it

    def __init__(self, config):
        super().__init__(config)
        self.model = DreamBaseModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        return MaskedLMOutput(logits=self.lm_head(self.model(input_ids)))
"""

REMOTE_STYLES = {
    "llada": {
        "files": {"configuration_llada.py": _LLADA_CONFIG, "modeling_llada.py": _LLADA_MODEL},
        "auto_map": {
            "AutoConfig": "configuration_llada.LLaDAConfig",
            "AutoModel": "modeling_llada.LLaDAModelLM",
            "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
        },
        "config": {
            "model_type": "llada",
            "d_model": 16,
            "n_heads": 2,
            "n_layers": 2,
            "architectures": ["LLaDAModelLM"],
        },
    },
    "dream": {
        "files": {"configuration_dream.py": _DREAM_CONFIG, "modeling_dream.py": _DREAM_MODEL},
        "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        "config": {
            "model_type": "Dream",
            "hidden_size": 16,
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "architectures": ["DreamModel"],
        },
    },
}


def remote_weights(style: str, vocab: int, seed: int = 0) -> dict:
    """The stand-in's weights by their upstream names (LLaDA's ``model.*``, Dream's ``model.*`` + ``lm_head``)."""
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return torch.randn(*shape, generator=g) / shape[-1] ** 0.5

    d, out = 16, {}
    if style == "llada":
        out["model.wte.weight"] = w(vocab, d)
        for i in range(2):
            out[f"model.blocks.{i}.att_proj.weight"], out[f"model.blocks.{i}.att_proj.bias"] = w(3 * d, d), w(3 * d)
            out[f"model.blocks.{i}.attn_out.weight"], out[f"model.blocks.{i}.attn_out.bias"] = w(d, d), w(d)
        out["model.ff_out.weight"], out["model.ff_out.bias"] = w(vocab, d), w(vocab)
    else:
        out["model.embed_tokens.weight"] = w(vocab, d)
        for i in range(2):
            out[f"model.layers.{i}.qkv.weight"], out[f"model.layers.{i}.qkv.bias"] = w(3 * d, d), w(3 * d)
            out[f"model.layers.{i}.o_proj.weight"], out[f"model.layers.{i}.o_proj.bias"] = w(d, d), w(d)
        out["lm_head.weight"] = w(vocab, d)
    return out


def remote_logits(style: str, weights: dict, x: torch.Tensor) -> torch.Tensor:
    """The stand-in's raw logits ``(B, L, V)`` computed by hand from ``weights`` (not through its modeling code)."""
    import torch.nn.functional as F

    pre, emb, blocks, qkv, o = (
        ("model.", "model.wte.weight", "model.blocks", "att_proj", "attn_out")
        if style == "llada"
        else ("model.", "model.embed_tokens.weight", "model.layers", "qkv", "o_proj")
    )
    h = weights[emb][x]
    B, L, D = h.shape
    for i in range(2):
        q, k, v = (
            F.linear(h, weights[f"{blocks}.{i}.{qkv}.weight"], weights[f"{blocks}.{i}.{qkv}.bias"])
            .view(B, L, 3, 2, D // 2)
            .permute(2, 0, 3, 1, 4)
        )
        a = ((q @ k.transpose(-2, -1)) / (D // 2) ** 0.5).softmax(-1) @ v
        h = h + F.linear(
            a.transpose(1, 2).reshape(B, L, D), weights[f"{blocks}.{i}.{o}.weight"], weights[f"{blocks}.{i}.{o}.bias"]
        )
    if style == "llada":
        return F.linear(h, weights["model.ff_out.weight"], weights["model.ff_out.bias"])
    return F.linear(h, weights["lm_head.weight"])


def write_remote_dllm(folder, style: str, tokenizer, seed: int = 0):
    """A folder as LLaDA's or Dream's hub repository holds it: ``config.json`` with ``auto_map``, the configuration
    and modeling files, ``model.safetensors`` and ``tokenizer`` (a :class:`unie.data.tokenizer.Tokenizer` with a
    mask) saved with ``save_pretrained``.  Returns the weights (:func:`remote_logits` reads them)."""
    import json
    from pathlib import Path

    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    spec = REMOTE_STYLES[style]
    for name, text in spec["files"].items():
        (folder / name).write_text(text.lstrip())
    weights = remote_weights(style, tokenizer.vocab_size, seed)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = {
        **spec["config"],
        "auto_map": spec["auto_map"],
        "vocab_size": tokenizer.vocab_size,
        "mask_token_id": tokenizer.mask_id,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    tokenizer.hf.save_pretrained(folder)
    return weights
