"""`unie`'s errors: an operator's mistake (a bad option, a missing file, a checkpoint in the wrong role) is one line
on stderr starting `unie: error:` and a non-zero exit status, never a traceback."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from unie.models.checkpoint import save_model

REPO = Path(__file__).resolve().parents[1]


def unie(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "unie.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO)},
    )


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tok):
    from conftest import make_net

    d = tmp_path_factory.mktemp("cli")
    tok.save(d / "tokenizer")
    save_model(make_net(tok.vocab_size, causal=True), d / "ar", "ar", tok.info())
    save_model(make_net(tok.vocab_size), d / "mdlm", "mdlm", tok.info())
    return d


def assert_one_line_error(r, *words):
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("unie: error: "), r.stderr
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def sample(folders, *args):
    return unie("sample", "--tokenizer", "tokenizer", "-n", "1", "--length", "8", "--steps", "4", *args, cwd=folders)


def test_sample_works(folders):
    r = sample(folders, "--sampler", "ancestral", "--model", "dlm=mdlm")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stderr.strip().splitlines()[-1])["sampler"] == "ancestral"


def test_checkpoint_in_the_wrong_role(folders):
    # an AR checkpoint where the sampler expects a masked diffusion denoiser
    assert_one_line_error(sample(folders, "--sampler", "ancestral", "--model", "dlm=ar"), "dlm=ar", "'ar'", "absorbing")
    assert_one_line_error(sample(folders, "--sampler", "ancestral", "--model", "proxy=mdlm"), "no model role 'proxy'")


def test_missing_files(folders):
    assert_one_line_error(sample(folders, "--sampler", "ancestral", "--model", "dlm=nope"), "nope")
    r = unie("sample", "--sampler", "ancestral", "--model", "dlm=mdlm", "--tokenizer", "no_tokenizer", cwd=folders)
    assert_one_line_error(r, "no_tokenizer")


def test_bad_options(folders):
    assert_one_line_error(sample(folders, "--sampler", "ancestral", "--model", "dlm=mdlm", "--option", "foo=1"), "foo")
    assert_one_line_error(sample(folders, "--sampler", "ancestrall", "--model", "dlm=mdlm"), "ancestral")


def test_hugging_face_folder(folders, tmp_path):
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    r = unie(
        "sample",
        "--sampler",
        "ancestral",
        "--model",
        f"dlm={hf}",
        "--tokenizer",
        str(folders / "tokenizer"),
        cwd=folders,
    )
    assert_one_line_error(r, "Hugging Face")
