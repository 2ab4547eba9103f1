"""`unie.load`: the one loader of a trained model folder (results/models/NAME), and its refusals."""

import json

import pytest
import torch

import unie
from unie.models.checkpoint import save_model


def test_load_returns_the_network(tmp_path, net_factory, tok_info):
    net = net_factory(causal=True)
    save_model(net, tmp_path / "ar", "ar", tok_info)
    weights = (tmp_path / "ar" / "model.safetensors").read_bytes()
    loaded = unie.load(tmp_path / "ar")
    assert isinstance(loaded, torch.nn.Module) and not loaded.training and loaded.cfg == net.cfg
    assert loaded.checkpoint_meta["method"] == "ar"
    for k, v in net.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k])
    assert unie.load(str(tmp_path / "ar"), device="cpu").cfg.causal
    assert (tmp_path / "ar" / "model.safetensors").read_bytes() == weights  # loading writes nothing


def test_load_refuses_what_is_not_a_unie_folder(tmp_path):
    with pytest.raises(unie.CheckpointError, match="does not exist"):
        unie.load(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(unie.CheckpointError, match="is a file"):
        unie.load(tmp_path / "file")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(unie.CheckpointError, match="Hugging Face model folder .*from_pretrained"):
        unie.load(hf)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"hidden": 3}))
    with pytest.raises(unie.CheckpointError, match="not a unie checkpoint"):
        unie.load(other)


def test_a_unie_folder_is_not_a_hugging_face_one(tmp_path, net_factory, tok_info):
    """What the README says: transformers cannot read these folders (no model_type); unie.load can."""
    transformers = pytest.importorskip("transformers")
    save_model(net_factory(), tmp_path / "m", "mdlm", tok_info)
    with pytest.raises((ValueError, OSError, KeyError)):
        transformers.AutoConfig.from_pretrained(tmp_path / "m", local_files_only=True)
    assert unie.load(tmp_path / "m").checkpoint_meta["method"] == "mdlm"


def test_load_for_sampling_gives_a_model_ready_to_sample(tmp_path, net_factory, tok):
    """`unie.load_for_sampling`: the sampler-facing model with the run's tokenizer and mask id; a sampler draws from
    it and the tokenizer decodes the draw."""
    from unie.core.registry import SAMPLERS

    save_model(net_factory(), tmp_path / "results" / "models" / "mdlm", "mdlm", tok.info())
    tok.save(tmp_path / "resources" / "tokenizer")
    m = unie.load_for_sampling(tmp_path / "results" / "models" / "mdlm")  # the tokenizer: the run's own
    assert m.method == "mdlm" and m.mask_id == tok.info()["mask_id"] and hasattr(m.model, "logp_x0")
    sampler = SAMPLERS["ancestral"]
    x, stats = sampler({"dlm": m.model}, 2, 8, 4, torch.Generator().manual_seed(0), sampler.options({}))
    assert x.shape == (2, 8) and not (x == m.mask_id).any() and stats["nfe"] >= 1
    assert all(isinstance(m.tokenizer.decode(row), str) for row in x.tolist())
    save_model(net_factory(causal=True), tmp_path / "elsewhere" / "ar", "ar", tok.info())
    with pytest.raises(FileNotFoundError, match="pass tokenizer="):
        unie.load_for_sampling(tmp_path / "elsewhere" / "ar")
    ar = unie.load_for_sampling(tmp_path / "elsewhere" / "ar", tokenizer=tmp_path / "resources" / "tokenizer")
    assert ar.method == "ar" and hasattr(ar.model, "token_logp")
