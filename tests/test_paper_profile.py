"""The paper profile's loading path, offline: detokenisers, local datasets -> wrapped GPT-2-style chunks,
the tokenizer and model fetchers, the HF evaluator, and dry runs of ``snakemake --profile slurm``.

Everything is built locally (a byte-level BPE trained on a few sentences, a one-layer GPT-2); nothing is
downloaded.  Protocol: ``docs/baselines.md``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: any hub access fails instead of downloading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from unie.data import hub as hf_data
from unie.data.corpus import tokenize_corpus, write_text_parquet
from unie.data.tokens import load_tokens
from unie.data.detokenize import (
    DETOKENIZERS,
    lambada_detokenizer,
    lm1b_detokenizer,
    ptb_detokenizer,
    scientific_papers_detokenizer,
    wikitext_detokenizer,
)
from unie.config.profile import resolve_config

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "config" / "paper.yaml"
EOT = "<|endoftext|>"
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A stitch in time saves nine, and a penny saved is a penny earned.",
    "Robert Boulter is an English film, television and theatre actor.",
    "He had a guest-starring role on the television series The Bill in 2000.",
    "Consumers may want to move their telephones a little closer to the TV set.",
    "It cost $1,000.5 and the dog's bowl was 10 degrees warm (London).",
]


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path, monkeypatch):
    """Keep the `datasets` cache of local fixture files inside the test's tmp dir."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")


# --------------------------------------------------------------------------------------------------
# detokenisers (MDLM dataloader.py semantics)


@pytest.mark.parametrize(
    "text, expected",
    [
        (" = Robert Boulter = \n", " = Robert Boulter =\n"),
        (" = = Career = = \n", " == Career ==\n"),
        ("a guest @-@ starring role", "a guest-starring role"),
        ("cost 1 @,@ 000 @.@ 5 pounds", "cost 1,000.5 pounds"),
        ("film , television and theatre actor . He", "film, television and theatre actor. He"),
        ("Theatre ( London ) and [ 1 ]", "Theatre (London) and [1]"),
        ('he said " hello there " loudly', 'he said "hello there" loudly'),
        ("the dog 's bowl", "the dog's bowl"),
        ("the players ' union", "the players' union"),
        ("in N cases", "in 1 cases"),
        ("10 ° warm", "10°warm"),
        ("end . \n next", "end.\nnext"),
    ],
)
def test_wikitext_detokenizer(text, expected):
    assert wikitext_detokenizer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("the company 's shares", "the company's shares"),
        ("the investors ' money", "the investors' money"),
        ("they do n't know", "they don't know"),
        ("first \n second", "first\nsecond"),
        ("one\\/two", "one/two"),
        ("about $ N N N million", "about $1 1 1 million"),
        ("# N in line", "#1 in line"),
        ("the <unk> said", "the ? said"),
    ],
)
def test_ptb_detokenizer(text, expected):
    assert ptb_detokenizer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("see http : / / example.com now", "see http://example.com now"),
        ("see https : / / example.com now", "see https://example.com now"),
        ("It 's what they 're doing", "It's what they're doing"),
        ("He left the room . Then he came back .", "He left the room. Then he came back."),
        ("Is it true ?", "Is it true?"),
        ("Wow ! Great !", "Wow! Great!"),
        ("a , b : c ; d", "a, b: c; d"),
        ("either / or", "either/or"),
        ('he said " yes " twice', 'he said "yes" twice'),
        ("a ( small ) [ big ] thing", "a (small) [big] thing"),
        ("costs $ 5 or £ 4", "costs $5 or £4"),
    ],
)
def test_lm1b_detokenizer(text, expected):
    assert lm1b_detokenizer(text) == expected


def test_lambada_detokenizer():
    assert lambada_detokenizer("  \u201cHello,\u201d she said.  ") == '\n"Hello," she said.'
    assert lambada_detokenizer("plain") == "\nplain"


def test_scientific_papers_is_wikitext_then_lm1b():
    text = "the value @-@ function ( see [ 1 ] ) is $ 5 . it 's fine ."
    assert scientific_papers_detokenizer(text) == lm1b_detokenizer(wikitext_detokenizer(text))
    assert scientific_papers_detokenizer(text) == "the value-function (see [1]) is $5. it's fine."


def test_registry_names():
    assert set(DETOKENIZERS) == {"ptb", "wikitext", "lm1b", "lambada", "scientific_papers"}
    with pytest.raises(ValueError, match="unknown detokenizer 'nope'.*ptb"):
        hf_data.load_documents({"path": "x.parquet", "format": "parquet", "split": "test", "detokenizer": "nope"})


# --------------------------------------------------------------------------------------------------
# a tiny GPT-2-style tokenizer, built locally


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory) -> Path:
    """A byte-level BPE (vocab 300 incl. <|endoftext|>) saved as a GPT2TokenizerFast directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=[EOT], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    bpe.train_from_iterator(SENTENCES * 3, trainer)
    tok = GPT2TokenizerFast(tokenizer_object=bpe, bos_token=EOT, eos_token=EOT, unk_token=EOT)
    out = tmp_path_factory.mktemp("bpe")
    tok.save_pretrained(out)
    return out


def test_fetch_tokenizer_local_dir(bpe_dir, tmp_path):
    from transformers import AutoTokenizer

    raw = AutoTokenizer.from_pretrained(bpe_dir, local_files_only=True)
    tok = hf_data.fetch_tokenizer(str(bpe_dir), tmp_path / "resources" / "tokenizer")
    assert tok.mask_id == len(raw) == 300
    assert tok.vocab_size == 301
    assert tok.bos_id == tok.eos_id == raw.convert_tokens_to_ids(EOT)
    text = SENTENCES[0]
    assert tok.encode(text) == raw(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(tok.encode(text) + [tok.mask_id]) == text  # the mask id is dropped on decode
    # what rule `tokenizer` does next: save into its output dir; the copy loads back identically
    out = tmp_path / "resources" / "tokenizer"
    tok.save(out)
    from unie.data.tokenizer import load_tokenizer

    assert load_tokenizer(out).info() == tok.info()


def test_fetch_tokenizer_hub_name_saves_then_resaves(bpe_dir, tmp_path, monkeypatch):
    """A hub name is downloaded (simulated: the local BPE) and saved into out_dir; saving again is harmless."""
    import transformers

    calls = []
    real = transformers.AutoTokenizer.from_pretrained

    def fake_from_pretrained(name, *a, **kw):
        calls.append(str(name))
        return real(bpe_dir if name == "gpt2" else name, *a, **kw)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fake_from_pretrained)
    out = tmp_path / "tok"
    tok = hf_data.fetch_tokenizer("gpt2", out)
    assert calls == ["gpt2", str(out)] and tok.path == str(out)  # downloaded once, then read from out_dir
    assert (out / "tokenizer.json").exists()
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", real)
    before = tok.info()
    tok.save(out)  # same directory it was loaded from
    from unie.data.tokenizer import load_tokenizer

    again = load_tokenizer(out)
    assert again.info() == before and again.encode(SENTENCES[1]) == tok.encode(SENTENCES[1])


def test_fetch_tokenizer_missing_local_path(tmp_path):
    with pytest.raises(FileNotFoundError):
        hf_data.fetch_tokenizer(str(tmp_path / "missing"), tmp_path / "out")


# --------------------------------------------------------------------------------------------------
# local datasets -> documents -> wrapped chunks


@pytest.fixture
def fixtures(tmp_path) -> dict[str, Path]:
    """Small local datasets in the three local formats."""
    wiki = [
        " = Robert Boulter = \n",
        "",
        " Robert Boulter is an English film , television actor . \n",
        " He had a guest @-@ starring role in 2000 . \n",
        "   ",
    ]
    pq.write_table(pa.table({"text": wiki, "label": list(range(len(wiki)))}), tmp_path / "wiki.parquet")
    with open(tmp_path / "ptb.jsonl", "w") as f:
        for s in [
            " consumers may want to move their telephones a little closer to the tv set ",
            " the company 's shares rose $ N to $ N N ",
            " they do n't know the <unk> ",
        ]:
            f.write(json.dumps({"sentence": s, "id": 0}) + "\n")
    (tmp_path / "lm1b.txt").write_text("It 's what they 're doing .\nIs it true ?\n\nsee http : / / x.org now\n")
    return {"wiki": tmp_path / "wiki.parquet", "ptb": tmp_path / "ptb.jsonl", "lm1b": tmp_path / "lm1b.txt"}


def test_load_documents_local_formats(fixtures):
    docs = hf_data.load_documents(
        {"path": str(fixtures["wiki"]), "format": "parquet", "split": "validation", "detokenizer": "wikitext"}
    )
    assert docs == [
        " = Robert Boulter =\n",
        " Robert Boulter is an English film, television actor.\n",
        " He had a guest-starring role in 2000.\n",
    ]  # empty and blank rows dropped
    docs = hf_data.load_documents(
        {
            "path": str(fixtures["ptb"]),
            "format": "jsonl",
            "split": "validation",
            "text_field": "sentence",
            "detokenizer": "ptb",
        }
    )
    assert docs[1] == " the company's shares rose $1 to $1 1 " and docs[2] == " they don't know the ? "
    docs = hf_data.load_documents(
        {"path": str(fixtures["lm1b"]), "format": "text", "split": "test", "detokenizer": "lm1b"}
    )
    assert docs == ["It's what they're doing.", "Is it true?", "see http://x.org now"]


def test_load_documents_slices_cap_and_dirs(fixtures, tmp_path):
    spec = {"path": str(fixtures["ptb"]), "format": "json", "split": "train[-2:]", "text_field": "sentence"}
    assert len(hf_data.load_documents(spec)) == 2
    assert len(hf_data.load_documents({**spec, "split": "train", "max_docs": 1})) == 1
    d = tmp_path / "shards"
    d.mkdir()
    for i in range(2):
        pq.write_table(pa.table({"text": [f"doc {i}a", f"doc {i}b"]}), d / f"part-{i}.parquet")
    assert hf_data.load_documents({"path": str(d), "format": "parquet", "split": "test"}) == [
        "doc 0a",
        "doc 0b",
        "doc 1a",
        "doc 1b",
    ]


def test_load_documents_missing_field_names_columns(fixtures):
    with pytest.raises(KeyError, match=r"no text field 'text'.*available columns: sentence, id"):
        hf_data.load_documents({"path": str(fixtures["ptb"]), "format": "jsonl", "split": "validation"})
    with pytest.raises(ValueError, match="unknown format 'csv'"):
        hf_data.load_documents({"path": str(fixtures["ptb"]), "format": "csv", "split": "validation"})


def test_download_streams_documents_in_batches(tmp_path):
    """Rule download (paper path) writes the dataset a batch at a time: ``iter_documents`` yields detokenised,
    non-empty documents per batch, ``write_text_batches`` writes one row group per batch, and the raw Parquet
    holds exactly ``load_documents``' documents."""
    import datasets
    import runpy
    from types import SimpleNamespace

    from unie.data.corpus import read_text_batches, read_texts, write_text_batches

    rows = [" = = Part @-@ %d = = \n" % i if i % 4 else "  \n" for i in range(23)]  # every 4th: blank, dropped
    src = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": rows, "id": list(range(23))}).to_parquet(str(src / "train.parquet"))
    spec = {"path": str(src), "format": "parquet", "split": "train", "detokenizer": "wikitext"}
    docs = hf_data.load_documents(spec)
    assert len(docs) == 17 and docs[0] == " == Part-1 ==\n"
    batches = list(hf_data.iter_documents(spec, batch_size=5))
    assert [len(b) for b in batches] == [3, 4, 4, 4, 2] and sum(batches, []) == docs
    assert sum(hf_data.iter_documents({**spec, "max_docs": 9}, batch_size=4), []) == docs[:6]
    out = tmp_path / "raw" / "part.parquet"
    assert write_text_batches(hf_data.iter_documents(spec, batch_size=5), out) == 17
    assert read_texts(out) == docs and pq.ParquetFile(out).metadata.num_row_groups == 5
    assert sum(read_text_batches(out, 3), []) == docs

    def failing():
        yield docs[:2]
        raise RuntimeError("connection lost")

    with pytest.raises(RuntimeError, match="connection lost"):
        write_text_batches(failing(), tmp_path / "raw" / "broken.parquet")
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == ["part.parquet"]  # nothing half-written
    # the rule's script, as Snakemake runs it
    smk = SimpleNamespace(
        params=SimpleNamespace(data={"source": "hf", "hf": {"wiki": {"test": spec}}}, seed=0),
        wildcards=SimpleNamespace(domain="wiki", split="test"),
        threads=1,
        output=[str(tmp_path / "raw" / "wiki" / "test.parquet")],
        log=[str(tmp_path / "dl.log")],
    )
    threads = torch.get_num_threads()
    try:
        runpy.run_path(str(REPO / "workflow" / "scripts" / "download.py"), init_globals={"snakemake": smk})
    finally:
        torch.set_num_threads(threads)
    assert read_texts(smk.output[0]) == docs and "wiki/test: 17 documents" in (tmp_path / "dl.log").read_text()


def test_documents_to_wrapped_chunks(fixtures, bpe_dir, tmp_path):
    """MDLM wrapping with L=16: [bos] + 14 tokens + [eos] per chunk, an EOS after each document, the
    trailing remainder dropped."""
    tok = hf_data.fetch_tokenizer(str(bpe_dir), tmp_path / "tok")
    specs = {
        "wiki": {"path": str(fixtures["wiki"]), "format": "parquet", "split": "validation", "detokenizer": "wikitext"},
        "ptb": {
            "path": str(fixtures["ptb"]),
            "format": "jsonl",
            "split": "validation",
            "text_field": "sentence",
            "detokenizer": "ptb",
        },
        "lm1b": {"path": str(fixtures["lm1b"]), "format": "text", "split": "test", "detokenizer": "lm1b"},
    }
    L = 16
    for name, spec in specs.items():
        docs = hf_data.load_documents(spec)
        raw = tmp_path / "raw" / f"{name}.parquet"
        write_text_parquet(docs, raw)
        out = tmp_path / "tokenized" / f"{name}.parquet"
        n = tokenize_corpus(raw, tok, out, seq_len=L, insert_eos=True, chunk_specials=True)
        x = load_tokens(out)
        stream = [i for d in docs for i in tok.encode(d) + [tok.eos_id]]
        assert n == len(x) == len(stream) // (L - 2) >= 1, name
        assert x.shape == (n, L)
        assert (x[:, 0] == tok.bos_id).all() and (x[:, -1] == tok.eos_id).all()
        assert x[:, 1:-1].reshape(-1).tolist() == stream[: n * (L - 2)]  # the remainder is dropped
        assert len(stream) - n * (L - 2) < L - 2


# --------------------------------------------------------------------------------------------------
# evaluator models


def test_select_model_files():
    gpt2_large = [
        "config.json",
        "generation_config.json",
        "merges.txt",
        "vocab.json",
        "tokenizer.json",
        "model.safetensors",
        "pytorch_model.bin",
        "tf_model.h5",
        "flax_model.msgpack",
        "rust_model.ot",
        "onnx/decoder_model.onnx",
        "onnx/config.json",
        "README.md",
        "64-8bits.tflite",
    ]
    assert hf_data.select_model_files(gpt2_large) == [
        "config.json",
        "generation_config.json",
        "merges.txt",
        "model.safetensors",
        "tokenizer.json",
        "vocab.json",
    ]
    llama3 = [
        "config.json",
        "generation_config.json",
        "model-00001-of-00004.safetensors",
        "model-00002-of-00004.safetensors",
        "model.safetensors.index.json",
        "original/consolidated.00.pth",
        "original/params.json",
        "original/tokenizer.model",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "LICENSE",
        "USE_POLICY.md",
    ]
    sel = hf_data.select_model_files(llama3)
    assert not any(f.startswith("original/") for f in sel) and "model.safetensors.index.json" in sel
    assert hf_data.select_model_files(["config.json", "pytorch_model.bin", "training_args.bin"]) == [
        "config.json",
        "pytorch_model.bin",
    ]
    # a custom-code DLLM (LLaDA, Dream: auto_map) does not load without its configuration and modeling code
    llada = [
        "config.json",
        "configuration_llada.py",
        "modeling_llada.py",
        "generation_config.json",
        "README.md",
        "model-00001-of-00006.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        ".gitattributes",
    ]
    assert {"configuration_llada.py", "modeling_llada.py", "model-00001-of-00006.safetensors"} <= set(
        hf_data.select_model_files(llada)
    )
    with pytest.raises(ValueError, match="no \\*.safetensors"):
        hf_data.select_model_files(["config.json"])


def test_fetch_model_uses_snapshot_download(tmp_path, monkeypatch):
    import huggingface_hub

    seen = {}

    class FakeApi:
        def list_repo_files(self, repo_id):
            return ["config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json"]

    def fake_snapshot_download(repo_id, local_dir, allow_patterns):
        seen.update(repo_id=repo_id, allow_patterns=allow_patterns)
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        (Path(local_dir) / "config.json").write_text("{}")

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    monkeypatch.setattr(hf_data, "hub_problem", lambda: None)  # the hub answers
    out = hf_data.fetch_model("openai-community/gpt2-large", tmp_path / "gpt2_large")
    assert out == tmp_path / "gpt2_large"
    assert seen == {
        "repo_id": "openai-community/gpt2-large",
        "allow_patterns": ["config.json", "model.safetensors", "tokenizer.json"],
    }


@pytest.fixture(scope="module")
def tiny_gpt2_dir(bpe_dir, tmp_path_factory) -> Path:
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tok = AutoTokenizer.from_pretrained(bpe_dir, local_files_only=True)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            n_layer=1,
            n_head=2,
            n_embd=32,
            vocab_size=len(tok),
            n_positions=64,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
        )
    )
    out = tmp_path_factory.mktemp("tiny_gpt2")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _manual_nll(model_dir: Path, text: str, rule: str) -> tuple[float, float]:
    """Next-token NLL of [EOS-as-BOS] + ids under the model, with MDLM's EOS weights (rule 'first')."""
    from transformers import AutoTokenizer, GPT2LMHeadModel

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = GPT2LMHeadModel.from_pretrained(model_dir, local_files_only=True).eval()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    x = torch.tensor([[tok.eos_token_id] + ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(x).logits[0, :-1].double(), -1)
    nll_tok = -logp[torch.arange(len(ids)), torch.tensor(ids)]
    eos = np.array(ids) == tok.eos_token_id
    w = np.ones(len(ids))
    if rule == "first":
        w[eos & (np.cumsum(eos) > 1)] = 0.0
    return float((nll_tok.numpy() * w).sum()), float(w.sum())


def test_hf_evaluator_matches_manual_nll_and_eos_rule(tiny_gpt2_dir):
    from unie.pipeline.sample import load_hf_evaluator

    texts = [SENTENCES[0], f"{SENTENCES[1]}{EOT}The fox.{EOT}{EOT}A dog", SENTENCES[2], SENTENCES[3][:9]]
    n_eos = [0, 3, 0, 0]
    for rule in ("first", "all"):
        ev = load_hf_evaluator(str(tiny_gpt2_dir), eos_rule=rule, max_length=64, batch_size=3)
        nll, ntok = ev.score(texts)
        # batching (right padding + attention mask) changes nothing: one text per pass gives the same numbers
        ev.batch_size = 1
        nll1, ntok1 = ev.score(texts)
        assert torch.allclose(nll, nll1, rtol=1e-5) and torch.equal(ntok, ntok1)
        for i, text in enumerate(texts):
            ref_nll, ref_w = _manual_nll(tiny_gpt2_dir, text, rule)
            assert nll[i].item() == pytest.approx(ref_nll, rel=1e-5)
            assert ntok[i].item() == ref_w
            n_ids = len(ev.tok(text, add_special_tokens=False)["input_ids"])
            # rule 'first': the first EOS counts, the later ones weigh 0; non-EOS text after it still counts
            expected = n_ids - max(n_eos[i] - 1, 0) if rule == "first" else n_ids
            assert ntok[i].item() == expected


def test_a_released_duos_pad_is_written_as_upstream_decodes_it(bpe_dir, tmp_path, monkeypatch):
    """A released Duo's [PAD] is a state of its process (our mask id): its samples may keep one.  Upstream decodes
    samples with its tokenizer's batch_decode (GPT-2 + [PAD], special tokens kept), which writes "[PAD]"; the Gen
    PPL job decodes a Duo's samples to the same text, while a sampler without that state still drops masks."""
    from transformers import AutoTokenizer

    import unie.pipeline.sample as sample
    from unie.data.tokens import write_tokens

    ours = hf_data.fetch_tokenizer(str(bpe_dir), tmp_path / "tokenizer")
    ours.save(tmp_path / "tokenizer")
    upstream = AutoTokenizer.from_pretrained(bpe_dir, local_files_only=True)
    upstream.add_special_tokens({"pad_token": "[PAD]"})  # duo dataloader.get_tokenizer
    assert upstream.pad_token_id == ours.mask_id == 300
    rows = [ours.encode(SENTENCES[0])[:8], ours.encode(SENTENCES[5])[:8]]
    rows[0][3] = rows[1][0] = rows[1][7] = ours.mask_id  # [PAD] inside, first and last
    want = upstream.batch_decode(rows)
    assert all("[PAD]" in w for w in want)
    assert [ours.decode(r, {ours.mask_id: "[PAD]"}) for r in rows] == want
    seen = {}

    class Recorder:
        def score(self, texts):
            seen.setdefault("texts", []).append(list(texts))
            return torch.ones(len(texts), dtype=torch.float64), torch.ones(len(texts), dtype=torch.float64)

    monkeypatch.setattr(sample, "make_evaluator", lambda *a, **k: Recorder())
    for meta, expected in (
        ({"text_states": {str(ours.mask_id): sample.PAD_TEXT}}, want),
        ({}, [ours.decode(r) for r in rows]),
    ):
        write_tokens(torch.tensor(rows), tmp_path / "s.parquet", extra={"unie": json.dumps(meta)})
        sample.evaluate_samples(
            tmp_path / "s.parquet",
            tmp_path / "tokenizer",
            {"ev": {"kind": "hf"}},
            "first",
            {},
            domain="owt",
            log=lambda m: None,
        )
        assert seen["texts"][-1] == expected
    assert "[PAD]" not in "".join(seen["texts"][-1])


# --------------------------------------------------------------------------------------------------
# the paper profile: schema, cross-checks, and Snakemake dry runs through the Slurm profile


def _paper_config() -> dict:
    return resolve_config([PAPER])


def test_paper_config_passes_schema_and_check_config():
    pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
    from snakemake.utils import validate

    from unie.config.checks import check_config

    cfg = _paper_config()
    validate(cfg, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    check_config(cfg)
    toy = resolve_config()
    assert set(toy) <= set(cfg) and set(cfg) - set(toy) == {
        "resources",
        "hf_models",
        "slurm_partitions",
        "max_runtime",
        "cluster",
    }  # same structure
    assert list(cfg["tables"]["table2_genppl"]) == [r for r in toy["tables"]["table2_genppl"]]  # same rows
    assert [r for r in toy["tables"]["table1_ppl"] if "exact" not in r] == list(cfg["tables"]["table1_ppl"])
    assert cfg["data"]["seq_len"] == 1024 and cfg["tokenizer"] == {"kind": "hf", "path": "gpt2"}
    assert [e["label"] for e in cfg["genppl"]["evaluators"].values()] == ["Llama2", "Llama3", "GPT2"]
    rows = cfg["dllm"]["rows"]  # the DLLM baselines and the appendix-only Llama3.1-8B row (the grid's ar_large2)
    assert {"llada_dawn", "llada_apd", "llada_core", "dream_apd", "dream_core"} <= set(rows)
    assert [n for n, r in rows.items() if r.get("appendix_only")] == ["ar_large2"]
    assert rows["ar_large2"]["model"] == "llama31_8b" and rows["ar_large2"]["label"] == "Llama3.1-8B"
    assert rows["llada_dawn"]["options"] == {"sampler": "dawn", "attn_layers": 4, "tau_sink": 0.01, "tau_edge": 0.07}
    assert set(cfg["dllm"]["sweeps"]["sets"]) == {"fig4", "app_k", "app_w"}
    assert cfg["dllm"]["sweeps"]["task"] == "minerva_math500"
    assert all(e["kind"] == "hf" for e in cfg["genppl"]["evaluators"].values())
    for domain, splits in cfg["data"]["hf"].items():
        for split, spec in splits.items():
            assert set(spec) <= hf_data.SPEC_KEYS, (domain, split)
            assert spec.get("detokenizer") is None or spec["detokenizer"] in DETOKENIZERS, (domain, split)


def _snakefile(tmp_path: Path) -> Path:
    """The repository's Snakefile, plus workflow/rules/hf.smk if the Snakefile does not include it yet."""
    snakefile = REPO / "Snakefile"
    if "hf.smk" in snakefile.read_text():
        return snakefile
    wrapper = tmp_path / "Snakefile.paper"
    wrapper.write_text(f'include: "{snakefile}"\ninclude: "{REPO / "workflow" / "rules" / "hf.smk"}"\n')
    return wrapper


def _dry_run_with_profile(tmp_path: Path, *targets: str) -> str:
    """`snakemake --profile slurm -n ...` from a copy of the launch directory (slurm/ + config/paper.yaml),
    so nothing is written into the repository."""
    run_dir = tmp_path / "launch"
    shutil.copytree(REPO / "slurm", run_dir / "slurm")
    (run_dir / "config").mkdir()
    shutil.copy(PAPER, run_dir / "config" / "paper.yaml")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--profile",
        "slurm",
        "-n",
        "-s",
        str(_snakefile(tmp_path)),
        "-d",
        str(tmp_path / "work"),
        *targets,
    ]
    r = subprocess.run(cmd, cwd=run_dir, capture_output=True, text=True, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    assert "Using profile slurm" in out
    return out


def _local_rules(cfg: dict) -> set[str]:
    """The rules the workflow runs on the submit host under ``cfg``: each rule's ``localrule:`` expression, evaluated
    as the workflow evaluates it (the downloads are local unless slurm_partitions.download names a partition)."""
    scope = {"config": cfg, "DOWNLOADS_LOCAL": not (cfg.get("slurm_partitions") or {}).get("download")}
    out = set()
    for f in (REPO / "workflow" / "rules").glob("*.smk"):
        for name, body in re.findall(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", f.read_text(), re.S | re.M):
            m = re.search(r"^\s+localrule: ([^#\n]+)", body, re.M)
            if m and eval(m.group(1), scope):  # noqa: S307 - the workflow's own source
                out.add(name)
    return out


def _job_blocks(out: str, rule: str) -> list[str]:
    return re.findall(rf"^(?:local)?rule {rule}:\n(.*?)(?:\n\n|\Z)", out, re.S | re.M)


def test_dry_run_all_with_slurm_profile(tmp_path):
    pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
    out = _dry_run_with_profile(tmp_path, "all")
    assert "paper.yaml" in out
    train = _job_blocks(out, "train")
    # the paper trains no backbone: MDLM, AR, SEDD, Duo and BD3-LM are the released checkpoints, imported once;
    # only the NCE rows (from the released MDLM) and the masked-context proxy (from the released AR) are trained
    trained = sorted(re.search(r"model=(\w+)", b).group(1) for b in train)
    assert trained == ["ar_masked", "edlm_nce", "uni_edlm_nce"]
    assert all("results/models/mdlm/model.safetensors" in b for b in train if "model=ar_masked" not in b)
    for block in train:
        res = re.search(r"resources: (.*)", block).group(1)
        assert "gpu=1" in res and "slurm_partition=gpu" in res and "mem_mb=128000" in res
        line = _sbatch(block, _paper_config()["threads"])  # what the plugin submits: --gpus, never --gres too
        assert "--gpus=1" in line and "--gres" not in line and "--cpus-per-gpu=8" in line
    imports = _job_blocks(out, "import_released")
    assert sorted(re.search(r"model=(\w+)", b).group(1) for b in imports) == ["ar", "bd3lm", "duo", "mdlm", "sedd"]
    assert all("gpu=" not in b and "slurm_partition=cpu" in b for b in imports)  # a conversion on a CPU node
    fetched = sorted(re.search(r"model=(\w+)", b).group(1) for b in _job_blocks(out, "download_released"))
    assert fetched == ["bd3lm", "mdlm"]  # the HF folders; the Google-Drive files are placed by hand:
    by_hand = sorted(re.search(r"model=(\w+)", b).group(1) for b in _job_blocks(out, "released_missing"))
    assert by_hand == ["ar", "duo", "sedd"]
    hf = _job_blocks(out, "download_hf_model")
    assert sorted(re.search(r"hf_model=(\w+)", b).group(1) for b in hf) == sorted(_paper_config()["hf_models"])
    # Table 3: one lm-eval run per row on the Hugging Face DLLMs, AR rows and proxy, nothing trained
    evals = _job_blocks(out, "dllm_eval")
    assert len(evals) == len(_paper_config()["dllm"]["rows"]) and not _job_blocks(out, "dllm_train")
    # every job's partition follows its GPU request (ppl_energy and the lm-eval runs included)
    blocks = re.findall(r"^(?:local)?rule (\w+):\n(.*?)(?:\n\n|\Z)", out, re.S | re.M)
    gpu_rules = {name for name, b in blocks if re.search(r"resources: .*\bgpu=1\b", b)}
    assert {"train", "ppl", "ppl_energy", "sample", "timing", "dllm_eval", "dllm_sweep_eval"} <= gpu_rules
    assert "dllm_sweep" not in gpu_rules  # the sweeps' tokens/s are their scored passes' (dllm.timing.source lm_eval)
    # every job that runs a model runs it in bf16 (config/paper.yaml's precision on its cuda device), the DLLM half's
    # lm-eval rows and sweeps included: each GPU job's resources show it (a CPU job's, fp32)
    for name, b in blocks:
        res = re.search(r"resources: (.*)", b).group(1)
        if re.search(r"\bgpu=1\b", res):
            assert re.search(r"\bprecision=bf16\b", res), (name, res)
    assert {name for name, b in blocks if "precision=" in b} == gpu_rules
    local = _local_rules(_paper_config())  # what runs on the submit host
    # downloads run on the submit host (compute nodes are often offline): the datasets, models and task files, and
    # the lm-eval tasks' data (prefetch_lmeval, which every lm-eval job reads)
    assert {
        "download",
        "download_task_file",
        "download_hf_model",
        "download_released",
        "released_missing",
        "table3",
        "tokenizer",
        "prefetch_lmeval",
    } <= local
    local |= set(re.findall(r"^rule (\w+):", (REPO / "Snakefile").read_text(), re.M))  # targets: nothing to run
    submitted = [(n, b) for n, b in re.findall(r"^rule (\w+):\n(.*?)(?:\n\n|\Z)", out, re.S | re.M) if n not in local]
    assert {"tokenize", "train", "dllm_eval"} <= {name for name, _ in submitted}
    for name, b in submitted:
        res = re.search(r"resources: (.*)", b).group(1)
        want = "gpu" if re.search(r"\bgpu=[1-9]", res) else "cpu"
        assert re.search(rf"\bslurm_partition={want}\b", res), (name, res)
    assert _job_blocks(out, "table3") and not _job_blocks(out, "dllm_tasks")
    # LiveCodeBench v2 (two release files), MBPP (its test split), MMLU (test + dev, the shots) and HellaSwag
    # (validation) fetched on the submit host, then written as local lm-eval tasks (MMLU, HellaSwag generative)
    files = sorted(
        re.search(r"task=(\w+), file=([\w./-]+)", b).groups() for b in _job_blocks(out, "download_task_file")
    )
    assert files == [
        ("hellaswag_gen", "data/validation-00000-of-00001.parquet"),
        ("livecodebench_v2", "test.jsonl"),
        ("livecodebench_v2", "test2.jsonl"),
        ("mbpp_local", "full/test-00000-of-00001.parquet"),
        ("mmlu_gen", "all/dev-00000-of-00001.parquet"),
        ("mmlu_gen", "all/test-00000-of-00001.parquet"),
    ]
    assert len(_job_blocks(out, "dllm_local_tasks")) == 1
    downloads = {re.search(r"domain=(\w+), split=(\w+)", b).groups() for b in _job_blocks(out, "download")}
    # OWT train, OWT valid (the NCE dev split) and the `test` split of all 8 domains
    assert ("owt", "train") in downloads and ("owt", "valid") in downloads and ("lambada", "test") in downloads
    assert len(downloads) == 10
    assert not (REPO / "logs" / "slurm").exists() or not any((REPO / "logs" / "slurm").iterdir())


def test_dry_run_table2_with_slurm_profile(tmp_path):
    out = _dry_run_with_profile(tmp_path, "runs/paper/results/tables/table2_genppl.tex")
    sample = _job_blocks(out, "sample")  # sampling + Gen PPL under the three evaluators
    cfg = _paper_config()
    runs = set(cfg["tables"]["table2_genppl"].values())
    fixed = {r for r in runs if cfg["sampling"]["runs"][r]["sampler"] in ("data", "ar")}
    assert len(sample) == len(fixed) + 4 * len(runs - fixed)  # data and AR at L steps, the rest at 128..1024
    for block in sample:
        assert all(f"resources/hf/{m}" in block for m in ("llama2", "llama3", "gpt2_large"))
        assert "gpu=1" in block
    assert not _job_blocks(out, "ppl")  # Table 1's jobs are not needed for Table 2


def test_slurm_partitions_renamed_and_runtimes_capped_in_one_line(tmp_path):
    """Site settings on the command line: partition names, a resource (its nested value arrives as a string from
    Snakemake's parser and is typed) and the runtime cap (the partitions' time limit), which every job obeys."""
    out = _dry_run_with_profile(
        tmp_path,
        "all",
        "--config",
        "slurm_partitions={cpu: normal, gpu: a100}",
        "resources={train: {gpu: 1, mem_mb: 1000, runtime: 100}, dllm_eval: {gpu: 2, mem_mb: 96000, runtime: 600}}",
        "max_runtime=600",
    )
    evals, downloads = _job_blocks(out, "dllm_eval"), _job_blocks(out, "download")
    assert evals and all("slurm_partition=a100" in b and "gpu=2" in b for b in evals)
    assert downloads and all("slurm_partition=normal" in b for b in downloads)
    assert all(re.search(r"\bruntime=100\b", b) and "mem_mb=1000" in b for b in _job_blocks(out, "train"))
    assert all(re.search(r"\bruntime=600\b", b) for b in _job_blocks(out, "dllm_sweep_eval"))  # 2880 there, capped
    runtimes = [int(m) for m in re.findall(r"\bruntime=(\d+)", out)]
    assert runtimes and max(runtimes) <= 600


def test_a_row_that_would_be_cut_at_every_attempt_is_refused():
    """A Table 3 row starts over when a retry runs it again: a runtime above max_runtime (a common 24 h limit
    against the profile's 48 h rows) is refused in one line naming the key and the way out (more GPUs)."""
    from unie.core.options import ConfigError
    from unie.config.checks import check_config

    cfg = _paper_config()
    cfg["max_runtime"] = 1440
    with pytest.raises(
        ConfigError,
        match=r"resources.dllm_eval.runtime.*2880 min is more than max_runtime 1440.*"
        r"starts over.*resources.dllm_eval.gpu",
    ):
        check_config(cfg)
    cfg["resources"]["dllm_eval"].update(gpu=2, runtime=1440)  # two GPUs: the documents split between them
    check_config(cfg)  # training, tokenize and the sweeps resume: their runtimes may exceed the cap


class _Resources(dict):
    """A job's resources as the Slurm executor plugin reads them (``.get`` and attributes)."""

    __getattr__ = dict.__getitem__


def _sbatch(block: str, threads: int) -> str:
    """The sbatch command the executor plugin (its own submit-string functions) builds for a dry run's job block."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    res = _Resources()
    for item in re.search(r"resources: (.*)", block).group(1).split(", "):
        key, value = item.split("=", 1)
        res[key] = int(value) if value.isdigit() else value
    job = SimpleNamespace(resources=res, threads=threads)
    params = {
        "run_uuid": "u",
        "slurm_logfile": "log",
        "comment_str": "c",
        "account": "",
        "partition": f"-p {res['slurm_partition']}",
        "workdir": None,
    }
    return get_submit_command(job, params) + set_gres_string(job)


def test_one_gpu_request_form_downloads_on_a_transfer_partition(tmp_path):
    """What the plugin submits: every GPU job asks for its GPUs in one form, --gpus=N by default (see the dry run
    above) or --gres=gpu:[model:]N where the site asks for GRES (config cluster.gpu_request), never both; with
    slurm_partitions.download the downloads are jobs on that partition instead of local rules."""
    cfg = _paper_config()
    out = _dry_run_with_profile(
        tmp_path,
        "all",
        "--config",
        "cluster={gpu_request: gres, gpu_model: a100}",
        "slurm_partitions={cpu: cpu, gpu: gpu, download: transfer}",
    )
    blocks = re.findall(r"^(localrule|rule) (\w+):\n(.*?)(?:\n\n|\Z)", out, re.S | re.M)
    gpu_jobs = [(n, b) for kind, n, b in blocks if "slurm_partition=gpu" in b]
    assert {"train", "ppl", "sample", "dllm_eval", "dllm_sweep_eval"} <= {n for n, _ in gpu_jobs}
    for name, b in gpu_jobs:
        line = _sbatch(b, cfg["threads"])
        n = int(re.search(r"\bgpus=(\d+)", b).group(1))
        assert f"--gres=gpu:a100:{n}" in line and "--gpus" not in line, (name, line)
        assert " -p gpu" in line and "precision=bf16" in b
        assert ("--cpus-per-gpu=" in line) == ("cpus_per_gpu=" in b)  # the sweeps hold cores: --cpus-per-task
    cfg = {**cfg, "slurm_partitions": {"cpu": "cpu", "gpu": "gpu", "download": "transfer"}}
    assert not _local_rules(cfg) & {
        "download",
        "tokenizer",
        "download_hf_model",
        "download_released",
        "download_task_file",
        "prefetch_lmeval",
    }
    downloads = {
        "download",
        "tokenizer",
        "download_hf_model",
        "download_released",
        "download_task_file",
        "prefetch_lmeval",
    }
    for kind, name, b in blocks:
        if name in downloads:
            assert kind == "rule" and "slurm_partition=transfer" in b, (kind, name)  # submitted, to transfer
            assert "--gres" not in _sbatch(b, 1) and "--gpus" not in _sbatch(b, 1)
    assert sorted(re.search(r"model=(\w+)", b).group(1) for k, n, b in blocks if n == "train") == [
        "ar_masked",
        "edlm_nce",
        "uni_edlm_nce",
    ]


def test_a_second_gpu_request_form_in_the_profile_is_refused(tmp_path):
    """`gres` under set-resources (the old advice of the profile's comment) would send --gres beside the rules'
    --gpus: the workflow refuses it in one line naming where, before planning."""
    run_dir = tmp_path / "launch"
    shutil.copytree(REPO / "slurm", run_dir / "slurm")
    (run_dir / "config").mkdir()
    shutil.copy(PAPER, run_dir / "config" / "paper.yaml")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--profile",
            "slurm",
            "-n",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path / "work"),
            "all",
            "--set-resources",
            "train:gres=gpu:1",
        ],
        cwd=run_dir,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    lines = [x for x in (r.stdout + r.stderr).splitlines() if x.startswith("unie: error:")]
    assert r.returncode != 0 and len(lines) == 1 and "set-resources train: gres" in lines[0], r.stderr[-2000:]
    assert "cluster.gpu_request" in lines[0]


def test_the_site_environment_of_the_jobs():
    """HF_HOME where the site sets one (the submit host and every job); inside a cluster job that is not a
    download, the Hugging Face libraries offline; a download job (on a transfer partition) stays online."""
    from unie.config.settings import ClusterSettings
    from unie.data.hub import OFFLINE_ENV

    site = ClusterSettings.from_config({"cluster": {"hf_home": "/scratch/hf"}})
    assert site.job_environment((), remote=False) == {"HF_HOME": "/scratch/hf"}  # the submit host
    assert site.job_environment(("train",), remote=True) == {"HF_HOME": "/scratch/hf", **OFFLINE_ENV}
    assert site.job_environment(("download_hf_model",), remote=True) == {"HF_HOME": "/scratch/hf"}
    assert ClusterSettings.from_config(_paper_config()).job_environment(("dllm_eval",), remote=True) == OFFLINE_ENV
    assert ClusterSettings.from_config({"cluster": {"offline": False}}).job_environment(("ppl",), remote=True) == {}
    assert set(OFFLINE_ENV) == {"HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"}
    assert ClusterSettings().gpu_resources(2) == {"gpu": 2}
    assert ClusterSettings(gpu_model="h100").gpu_resources(1) == {"gpu": 1, "gpu_model": "h100"}
    assert ClusterSettings(gpu_request="gres").gpu_resources(4) == {"gres": "gpu:4", "gpus": 4}
    assert ClusterSettings(gpu_request="gres").gpu_resources(0) == {}
    smk = (REPO / "workflow" / "rules" / "common.smk").read_text()  # applied by the workflow in every process
    assert "os.environ.update(CLUSTER.job_environment(_target_rules(), workflow.remote_exec))" in smk


def test_an_unreachable_hub_names_the_model_at_once(tmp_path, monkeypatch):
    """Offline (a closed endpoint, or HF_HUB_OFFLINE=1) and not in the cache: a model, a tokenizer or a dataset is
    refused in about a second with its name, HF_HOME and how to pre-fetch it (the hub client alone retries for
    about a minute and ends with a ConnectError that does not name it)."""
    import time

    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "ENDPOINT", "http://127.0.0.1:9")  # discard port: connection refused
    monkeypatch.setattr(hub, "HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    assert "not reachable" in hf_data.hub_problem()
    cases = [
        (lambda: hf_data.fetch_model("org/some-model", tmp_path / "m"), "model 'org/some-model'"),
        (lambda: hf_data.fetch_tokenizer("org/some-tokenizer", tmp_path / "t"), "tokenizer 'org/some-tokenizer'"),
        (lambda: hf_data.load_split({"path": "org/some-dataset", "split": "train"}), "dataset 'org/some-dataset'"),
    ]
    for call, name in cases:
        t0 = time.time()
        with pytest.raises(hf_data.HubUnreachableError) as e:
            call()
        msg = str(e.value)
        assert time.time() - t0 < 30 and name in msg and "not reachable" in msg and "\n" not in msg
        assert f"HF_HOME={tmp_path / 'hf'}" in msg and "pre-fetch" in msg
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    assert "HF_HUB_OFFLINE=1" in hf_data.hub_problem()
    # the check goes through the hub client's own HTTP session (its proxies and certificates), not a raw socket
    import huggingface_hub.utils

    asked = []

    class Session:
        def head(self, url, timeout):
            asked.append((url, timeout))

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.utils, "get_session", lambda: Session())
    assert hf_data.hub_problem() is None and asked == [("http://127.0.0.1:9", 5.0)]
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    with pytest.raises(hf_data.HubUnreachableError, match="switched off"):
        hf_data.fetch_model("org/some-model", tmp_path / "m")
