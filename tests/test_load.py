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
