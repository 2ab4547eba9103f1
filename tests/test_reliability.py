"""Nothing stale, nothing lost: a checkpoint is resumed only by the run that wrote it, damaged files are named
and never used, writes are whole or absent, and the operator's settings (runtime cap, --config values) hold.

The workflow-level counterparts (kill -9, corrupt last.pt, a config change, a flipped byte, through Snakemake)
are in ``test_recovery_workflow.py``."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest
import torch

from unie.core.options import ConfigError, TrainConfig
from unie.core.integrity import DamagedFileError, atomic_write, file_record, read_json, verify_file
from unie.core.train import CheckpointBusyError, checkpoint_lock, spec_changes, train
from unie.data.corpus import tokenize_corpus, write_text_parquet
from unie.data.tokens import load_tokens, token_view, write_tokens
from unie.data.toy_world import generate_corpus
from unie.methods.mdlm import MDLM
from unie.models.checkpoint import CheckpointError, DamagedCheckpointError, load_model, save_model
from unie.config.profile import coerce_cli_config
from unie.config.settings import runtime_at
from unie.pipeline.damage import find_damaged, set_aside_damaged
from unie.pipeline.model_files import train_from_spec


def _quiet(_msg):
    pass


def _flip(path: Path, offset: int = -40) -> None:
    """Flip one bit of ``path`` in place (the size stays)."""
    b = bytearray(path.read_bytes())
    b[offset] ^= 0x10
    path.write_bytes(bytes(b))


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# ---------------------------------------------------------------------- a changed run never resumes a stale state
@pytest.fixture(scope="module")
def toy(tmp_path_factory, tok):
    """A tokenizer, two token files of the same shape from different seeds, and a finished MDLM to start from."""
    root = tmp_path_factory.mktemp("reliability")
    tok.save(root / "tokenizer")
    for seed in (0, 1):
        write_text_parquet(generate_corpus("owt", "train", 48, 8, seed=seed), root / f"raw{seed}.parquet")
        tokenize_corpus(
            root / f"raw{seed}.parquet", tok, root / f"train{seed}.parquet", 8, insert_eos=False, chunk_specials=False
        )
    assert not torch.equal(load_tokens(root / "train0.parquet"), load_tokens(root / "train1.parquet"))
    for seed in (0, 1):  # two different initial models
        train_from_spec(
            "init",
            _spec("mdlm", seed=seed),
            root / "train0.parquet",
            root / "tokenizer",
            root / f"init{seed}",
            root / f"init{seed}_ckpt",
            seq_len=8,
            log=_quiet,
        )
    return root


def _spec(method="mdlm", **train):
    return {
        "method": method,
        "arch": {"d_model": 16, "n_layers": 1, "n_heads": 2, "mlp_ratio": 2},
        "train": {"steps": 6, "batch_size": 8, "lr": 3e-3, "warmup": 1, "ckpt_every": 3, "log_every": 3, **train},
    }


# each case: (what changes, how the spec / data / init of the second run differ from the first)
CHANGES = {
    "seed": dict(spec=_spec(seed=1)),
    "steps": dict(spec=_spec(steps=3)),  # fewer steps: a stale resume would return the 6-step model
    "lr": dict(spec=_spec(lr=1e-3)),
    "architecture": dict(spec={**_spec(), "arch": {"d_model": 32, "n_layers": 1, "n_heads": 2, "mlp_ratio": 2}}),
    "method options": dict(spec={**_spec("ar"), "options": {"mask_inputs": True}}, base=_spec("ar")),
    "data": dict(data="train1.parquet"),  # other tokens at the same path (the top-level seed regenerates the data)
    "init_from": dict(init="init1"),  # other initial weights at the same path (the init model was retrained)
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_run_trains_fresh_and_equals_a_fresh_clone(toy, tok, tmp_path, change):
    """After a finished training, a rerun with one thing changed ignores the stale ``last.pt`` (the log names what
    changed) and writes exactly the model a fresh checkout trains; resuming the stale state would have returned
    the first model."""
    case = CHANGES[change]
    base_spec, new_spec = case.get("base", _spec()), case.get("spec", case.get("base", _spec()))
    work = tmp_path / "work"
    for f in ("tokenizer", "train0.parquet"):  # the rule's inputs, at fixed paths
        src, dst = toy / f, work / f.replace("train0", "train")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            import shutil

            shutil.copytree(src, dst)
        else:
            dst.write_bytes(src.read_bytes())
    init = work / "init"
    uses_init = "init" in case
    if uses_init:
        for f in ("model.safetensors", "config.json"):
            (init / f).parent.mkdir(exist_ok=True)
            (init / f).write_bytes((toy / "init0" / f).read_bytes())

    def run(spec, out, ckpt, logs=None):
        return train_from_spec(
            "m",
            spec,
            work / "train.parquet",
            work / "tokenizer",
            out,
            ckpt,
            seq_len=8,
            init_dir=init if uses_init else None,
            log=_quiet if logs is None else logs.append,
        )

    first, _ = run(base_spec, work / "out", work / "ckpt")
    # the change: a new spec, or new bytes behind the same data / init paths
    if "data" in case:
        (work / "train.parquet").write_bytes((toy / "train1.parquet").read_bytes())
    if uses_init:
        for f in ("model.safetensors", "config.json"):
            (init / f).write_bytes((toy / case["init"] / f).read_bytes())
    logs = []
    again, _ = run(new_spec, work / "out", work / "ckpt", logs)
    fresh, _ = run(new_spec, tmp_path / "fresh_out", tmp_path / "fresh_ckpt")
    assert any("not resuming" in m and "step 6" in m for m in logs), logs
    assert not any(m.startswith("resumed") for m in logs), logs
    assert _same(again, fresh), f"{change}: the rerun is not the model a fresh checkout trains"
    assert not _same(again, first) if again.state_dict().keys() == first.state_dict().keys() else True
    assert (work / "out" / "model.safetensors").read_bytes() == (
        tmp_path / "fresh_out" / "model.safetensors"
    ).read_bytes()
    # the log line names what changed
    named = {
        "seed": "train.seed",
        "steps": "train.steps",
        "lr": "train.lr",
        "architecture": "model.d_model",
        "method options": "options",
        "data": "data.sha256",
        "init_from": "init",
    }[change]
    assert any(named in m for m in logs if "not resuming" in m), logs


def test_spec_changes_lists_the_changed_leaves():
    assert spec_changes({"train": {"steps": 30, "lr": 1}}, {"train": {"steps": 15, "lr": 1}}) == "train.steps: 30 -> 15"
    assert "model.d_model: 16 -> 32" in spec_changes({"model": {"d_model": 16}}, {"model": {"d_model": 32}})
    assert "not recorded" in spec_changes(None, {"a": 1})


# ---------------------------------------------------------------------- a damaged or unwritable last.pt
CFG = TrainConfig(steps=8, batch_size=4, lr=1e-2, warmup=3, ckpt_every=3, log_every=2, ema=0.9, seed=0)


def _train(net_factory, tok_info, data, ckpt, logs=None, stop_after=None, **kw):
    net = net_factory(max_len=8)
    ema, history = train(
        net,
        MDLM(tok_info).loss,
        data,
        CFG,
        ckpt,
        {"spec": 1},
        log=(logs.append if logs is not None else _quiet),
        stop_after=stop_after,
        progress=False,
        **kw,
    )
    return ema, history


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_an_unreadable_last_pt_is_reported_in_one_line_and_training_starts_again(
    net_factory, tok_info, random_words, tmp_path, damage
):
    data = random_words(32, 8, seed=0)
    ref, ref_hist = _train(net_factory, tok_info, data, tmp_path / "ref")
    _train(net_factory, tok_info, data, tmp_path / "ckpt", stop_after=6)
    last = tmp_path / "ckpt" / "last.pt"
    {
        "truncated": lambda: _truncate(last),
        "garbage": lambda: last.write_bytes(os.urandom(500)),
        "empty": lambda: last.write_bytes(b""),
    }[damage]()
    logs = []
    ema, hist = _train(net_factory, tok_info, data, tmp_path / "ckpt", logs)
    (line,) = [m for m in logs if "discarding" in m]
    assert "\n" not in line and str(last) in line and "starts again from step 0" in line
    assert "set aside as last.pt.unreadable" in line and (tmp_path / "ckpt" / "last.pt.unreadable").exists()
    assert not any(m.startswith("resumed") for m in logs)
    assert _same(ema, ref)
    assert [{k: v for k, v in h.items() if k != "elapsed_s"} for h in hist] == [
        {k: v for k, v in h.items() if k != "elapsed_s"} for h in ref_hist
    ]


def test_a_checkpoint_that_the_system_cannot_read_is_not_thrown_away(
    net_factory, tok_info, random_words, tmp_path, monkeypatch
):
    """An I/O or memory error while loading says nothing about the file: it is raised, and last.pt stays."""
    data = random_words(32, 8, seed=0)
    _train(net_factory, tok_info, data, tmp_path / "ckpt", stop_after=3)
    for err in (PermissionError(13, "Permission denied"), torch.OutOfMemoryError("CUDA out of memory")):

        def fail(*a, _err=err, **kw):
            raise _err

        monkeypatch.setattr(torch, "load", fail)
        with pytest.raises(type(err)):
            _train(net_factory, tok_info, data, tmp_path / "ckpt")
        monkeypatch.undo()
        assert torch.load(tmp_path / "ckpt" / "last.pt", weights_only=True)["step"] == 3


def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one(
    net_factory, tok_info, random_words, tmp_path, monkeypatch
):
    """The second checkpoint write fails half-way on a full disk, as torch reports it (a RuntimeError from its zip
    writer, no errno): the error names last.pt and says the previous one is unchanged; it loads at step 3, no
    temporary file is left, and the rerun resumes to the uninterrupted model."""
    import unie.core.integrity as integrity

    data = random_words(32, 8, seed=0)
    ref, _ = _train(net_factory, tok_info, data, tmp_path / "ref")
    real_save, real_statvfs, calls = torch.save, os.statvfs, []

    def full_disk(obj, f, *a, **kw):
        calls.append(f)
        if len(calls) == 2:
            Path(f).write_bytes(b"PK\x03\x04 half a checkpoint")
            monkeypatch.setattr(
                integrity.os, "statvfs", lambda p: os.statvfs_result((4096, 4096, 100, 0, 0, 10, 0, 0, 0, 255))
            )
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        return real_save(obj, f, *a, **kw)

    monkeypatch.setattr(torch, "save", full_disk)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(
        OSError, match="no space left on device while writing .*last.pt .the previous version is unchanged"
    ) as e:
        _train(net_factory, tok_info, data, ckpt)
    assert e.value.errno == errno.ENOSPC and "\n" not in str(e.value)
    monkeypatch.setattr(torch, "save", real_save)
    monkeypatch.setattr(integrity.os, "statvfs", real_statvfs)
    assert torch.load(ckpt / "last.pt", weights_only=True)["step"] == 3
    assert sorted(p.name for p in ckpt.iterdir()) == ["last.pt"]  # no temporary file (and the lock is gone)
    logs = []
    ema, _ = _train(net_factory, tok_info, data, ckpt, logs)
    assert any("resumed" in m and "step 3" in m for m in logs) and _same(ema, ref)


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (root only; skipped where mounting is not allowed)."""
    import subprocess

    d = tmp_path / "disk"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip() or r.returncode}")
    yield d
    subprocess.run(["umount", str(d)], check=False)


def test_a_really_full_disk_is_reported_for_torch_and_safetensors_writes(small_disk, net_factory, tok_info):
    """On a real full filesystem torch.save raises a RuntimeError and safetensors a SafetensorError (neither an
    OSError): both become the one-line ENOSPC error, and the earlier files stay whole."""
    last = small_disk / "last.pt"
    atomic_write(last, lambda tmp: torch.save({"step": 1, "w": torch.zeros(10)}, tmp))
    with pytest.raises(OSError, match=f"no space left on device while writing {last} .the previous version"):
        atomic_write(last, lambda tmp: torch.save({"step": 2, "w": torch.zeros(200_000)}, tmp))
    assert torch.load(last, weights_only=True)["step"] == 1
    small = net_factory()  # ~20 KB of weights
    save_model(small, small_disk / "m", "mdlm", tok_info)
    big = net_factory(d_model=128, n_layers=2)  # ~600 KB
    with pytest.raises(OSError, match=r"no space left on device while writing .*model\.safetensors"):
        save_model(big, small_disk / "m", "mdlm", tok_info)
    assert _same(load_model(small_disk / "m")[0], small)
    assert sorted(p.name for p in (small_disk / "m").iterdir()) == ["config.json", "model.safetensors"]


def test_two_trainers_never_share_a_checkpoint_directory(net_factory, tok_info, random_words, tmp_path):
    """A second process training into a directory (a rerun beside a job orphaned by a killed snakemake) is refused
    with the holder's pid; the lock goes with its holder."""
    data = random_words(32, 8, seed=0)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with checkpoint_lock(ckpt):
        with pytest.raises(CheckpointBusyError, match=f"in use by pid {os.getpid()}.*wait for it to end or kill it"):
            _train(net_factory, tok_info, data, ckpt)
        assert not (ckpt / "last.pt").exists()
    (ckpt / ".lock").write_text("pid 999999 on a-killed-job")  # the file a killed holder leaves holds no lock
    _train(net_factory, tok_info, data, ckpt)
    assert torch.load(ckpt / "last.pt", weights_only=True)["step"] == 8
    assert not (ckpt / ".lock").exists()  # removed by its holder at the end


# ---------------------------------------------------------------------- damaged files: one line, the path, the fix
@pytest.fixture
def saved(net_factory, tok_info, tmp_path):
    d = tmp_path / "results" / "models" / "m"
    save_model(net_factory(), d, "mdlm", tok_info)
    return d


def test_weights_are_written_readable_by_the_group_with_their_hash(saved):
    meta = json.loads((saved / "config.json").read_text())
    assert meta["weights"] == {"file": "model.safetensors", **file_record(saved / "model.safetensors")}
    old = os.umask(0o022)
    try:
        for f in ("model.safetensors", "config.json"):
            assert stat.S_IMODE((saved / f).stat().st_mode) == 0o644, f  # safetensors alone writes 0600
    finally:
        os.umask(old)
    assert sorted(p.name for p in saved.iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize(
    "damage,problem", [("flip", "content hash"), ("truncate", "truncated"), ("append", "longer than written")]
)
def test_damaged_weights_are_refused_with_one_line_naming_the_file(saved, damage, problem):
    w = saved / "model.safetensors"
    {
        "flip": lambda: _flip(w),
        "truncate": lambda: _truncate(w, 0.9),
        "append": lambda: w.write_bytes(w.read_bytes() + b"\0"),
    }[damage]()
    with pytest.raises(DamagedCheckpointError) as e:
        load_model(saved)
    msg = str(e.value)
    assert "\n" not in msg and str(w) in msg and problem in msg
    assert msg.endswith(
        f"rerun the workflow: it sets the damaged file of {saved} aside before it plans the jobs and "
        "retrains the model in the same run"
    )
    assert isinstance(e.value, CheckpointError) and isinstance(e.value, DamagedFileError)


def _predating(saved: Path) -> None:
    """``saved`` as a checkpoint written before weights records and config hashes: a config.json without them,
    weights whose header records no network."""
    from safetensors.torch import load_file, save_file

    meta = json.loads((saved / "config.json").read_text())
    for key in ("weights", "content_sha256"):
        del meta[key]
    (saved / "config.json").write_text(json.dumps(meta))
    save_file(load_file(saved / "model.safetensors"), saved / "model.safetensors")


def test_unreadable_weights_without_a_record_and_a_broken_config_name_the_file(saved):
    _predating(saved)
    load_model(saved)  # taken as it is: its weights say it predates the records
    _truncate(saved / "model.safetensors", 0.5)
    with pytest.raises(DamagedCheckpointError, match=r"model\.safetensors is damaged: safetensors cannot read it"):
        load_model(saved)
    (saved / "config.json").write_text('{"model": ')
    with pytest.raises(DamagedCheckpointError, match=r"config\.json is damaged: not valid JSON"):
        load_model(saved)


def _edit_config(saved: Path, change, rehash: bool = False) -> None:
    """``change(meta)`` applied to the config.json of ``saved``, its modification time kept (with ``rehash``, its
    content hash recomputed, as an editor who knows the format would)."""
    from unie.core.integrity import json_digest

    cfg = saved / "config.json"
    st = cfg.stat()
    meta = json.loads(cfg.read_text())
    change(meta)
    if rehash:
        meta["content_sha256"] = json_digest(meta)
    cfg.write_text(json.dumps(meta, indent=2, sort_keys=True))
    os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize(
    "edit, problem",
    [
        ("n_heads", "its values differ from the content hash it recorded"),
        ("n_heads, hash recomputed", "it describes another network than the one its weights were saved with"),
        ("hash fields deleted", "it carries no content hash, although its weights were written with one for it"),
        ("weights record deleted", "its values differ from the content hash it recorded"),
    ],
)
def test_a_model_is_its_weights_and_its_config(saved, edit, problem):
    """``n_heads`` 2 -> 1 keeps every tensor's shape: without the config's hash the model would load as another
    network.  Each edit of config.json (its mtime kept) is refused on load with one line naming it, and found by
    the check before planning, which remakes the weights (rule train)."""
    from unie.core.integrity import file_sha256

    before = file_sha256(saved / "model.safetensors")
    change = {
        "n_heads": lambda m: m["model"].update(n_heads=1),
        "n_heads, hash recomputed": lambda m: m["model"].update(n_heads=1),
        "hash fields deleted": lambda m: m.pop("content_sha256"),
        "weights record deleted": lambda m: m.pop("weights"),
    }[edit]
    _edit_config(saved, change, rehash=edit.endswith("recomputed"))
    with pytest.raises(DamagedCheckpointError) as e:
        load_model(saved)
    assert str(e.value).startswith(f"{saved / 'config.json'} is damaged: {problem}") and "\n" not in str(e.value)
    root = saved.parents[2]
    (found,) = find_damaged(root, cache_path=None)
    assert (found.path, found.output) == ("results/models/m/config.json", "results/models/m/model.safetensors")
    assert found.problem.startswith(problem)
    assert file_sha256(saved / "model.safetensors") == before  # the weights themselves are fine


def test_damaged_token_files_are_refused(toy, tmp_path):
    """A flipped byte in a page fails its CRC, other tokens under the same metadata fail the content hash (when
    read whole, and when the view is built), a truncated file has no footer: each a one-line error naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "train0.parquet"
    p.write_bytes((toy / "train0.parquet").read_bytes())
    assert load_tokens(p).shape == (48, 8)
    _flip(p, 100)  # inside the first data page
    with pytest.raises(DamagedFileError, match="train0.parquet is damaged: pyarrow cannot read it"):
        load_tokens(p)
    with pytest.raises(DamagedFileError, match="train0.parquet is damaged: pyarrow cannot read it"):
        token_view(p, tmp_path / "cache")
    table = pq.read_table(toy / "train0.parquet")  # valid pages, other tokens, the original metadata
    values = table.column(0).combine_chunks().flatten().to_numpy()
    other = pa.FixedSizeListArray.from_arrays(pa.array(values[::-1].copy()), 8)
    pq.write_table(pa.table({"input_ids": other}).replace_schema_metadata(table.schema.metadata), p)
    with pytest.raises(DamagedFileError, match="train0.parquet is damaged: its content hash differs"):
        load_tokens(p)
    assert load_tokens(p, 5).shape == (5, 8)  # the first rows alone are not checked against the whole's hash
    with pytest.raises(DamagedFileError, match="train0.parquet is damaged: its tokens differ from the content hash"):
        token_view(p, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*.arrow"))
    _truncate(p, 0.7)
    with pytest.raises(DamagedFileError, match="train0.parquet is damaged: pyarrow cannot read it"):
        load_tokens(p)


def test_samples_parquet_pages_are_checksummed(tmp_path):
    p = tmp_path / "steps4.parquet"
    write_tokens(torch.arange(4000).view(500, 8) % 100, p)
    assert load_tokens(p).shape == (500, 8)
    b = bytearray(p.read_bytes())
    b[200] ^= 0x01  # inside the first data page
    p.write_bytes(bytes(b))
    with pytest.raises(DamagedFileError, match="steps4.parquet is damaged: pyarrow cannot read it"):
        load_tokens(p)


def test_verify_file_and_read_json_name_what_is_wrong(tmp_path):
    f = tmp_path / "x.bin"
    f.write_bytes(b"abc")
    rec = file_record(f)
    assert verify_file(f, rec) == rec["sha256"]
    f.unlink()
    with pytest.raises(DamagedFileError, match="missing although its metadata lists it"):
        verify_file(f, rec)
    with pytest.raises(FileNotFoundError, match=r"missing result file: .*r\.json does not exist"):
        read_json(tmp_path / "r.json")
    (tmp_path / "r.json").write_text("{")
    with pytest.raises(DamagedFileError, match=r"r\.json is damaged: not valid JSON"):
        read_json(tmp_path / "r.json")


def test_atomic_write_leaves_the_old_file_when_the_writer_fails(tmp_path):
    p = tmp_path / "out.txt"
    atomic_write(p, lambda tmp: tmp.write_text("old"))

    def crash(tmp):
        tmp.write_text("half")
        raise RuntimeError("writer died")

    with pytest.raises(RuntimeError, match="writer died"):
        atomic_write(p, crash)
    assert p.read_text() == "old" and [q.name for q in tmp_path.iterdir()] == ["out.txt"]


def test_damaged_outputs_are_set_aside_for_snakemake_to_rebuild(saved, toy, tmp_path, tok):
    """The workflow's check before planning: a model whose weights differ from their record, a token file whose
    bytes changed; unchanged files are hashed once (then a stat suffices); a dry run only reports."""
    root = tmp_path
    tokdir = root / "resources" / "tokenized" / "owt"
    tokdir.mkdir(parents=True)
    (tokdir / "train.parquet").write_bytes((toy / "train0.parquet").read_bytes())
    (tokdir / "valid.parquet").write_bytes((toy / "train1.parquet").read_bytes())
    assert find_damaged(root) == []
    assert json.loads((root / ".snakemake/unie/verified.json").read_text()).keys() == {
        "results/models/m/model.safetensors",
        "resources/tokenized/owt/train.parquet",
        "resources/tokenized/owt/valid.parquet",
    }
    _flip(saved / "model.safetensors")
    _truncate(tokdir / "train.parquet", 0.9)
    _flip(tokdir / "valid.parquet", 100)  # a page's CRC fails
    logs = []
    assert len(set_aside_damaged(root, log=logs.append, dry_run=True)) == 3
    assert (saved / "model.safetensors").exists() and all("the run will set it aside" in m for m in logs)
    logs = []
    damaged = set_aside_damaged(root, log=logs.append)
    assert {d.output for d in damaged} == {
        "results/models/m/model.safetensors",
        "resources/tokenized/owt/train.parquet",
        "resources/tokenized/owt/valid.parquet",
    }
    assert {d.problem.split(" (")[0] for d in damaged if d.path.endswith(".parquet")} == {
        "its footer cannot be read",
        "pyarrow cannot read it",
    }
    assert not (saved / "model.safetensors").exists() and (saved / "model.safetensors.damaged").exists()
    assert (tokdir / "train.parquet.damaged").exists() and len(logs) == 3 and all("\n" not in m for m in logs)
    assert any("results/models/m/model.safetensors is damaged" in m and "this run rebuilds it" in m for m in logs)
    # beside a running snakemake (its lock), nothing is touched
    (root / ".snakemake" / "locks").mkdir(parents=True)
    (root / ".snakemake" / "locks" / "0.input.lock").write_text("x")
    (tokdir / "train.parquet.damaged").rename(tokdir / "train.parquet")
    assert set_aside_damaged(root, log=logs.append) == [] and (tokdir / "train.parquet").exists()


def test_damage_the_scan_cannot_see_is_reported_by_the_job_that_reads_the_file(saved, tmp_path, monkeypatch):
    """A file above the hash limit, or bit rot that keeps its size and times: the scan passes it, the job that loads
    it fails in one line and records it, and the next run sets it aside."""
    from types import SimpleNamespace

    from unie.pipeline.rule import job

    root = tmp_path
    monkeypatch.chdir(root)
    w = saved / "model.safetensors"
    _flip(w)
    assert find_damaged(root, hash_limit=0) == []  # size only
    with pytest.raises(SystemExit):
        with job(SimpleNamespace(threads=1, log=[str(root / "job.log")])):
            load_model(saved)
    assert (root / ".snakemake/unie/damaged.txt").read_text().split() == ["results/models/m/model.safetensors"]
    (damaged,) = set_aside_damaged(root, log=_quiet)
    assert damaged.output == "results/models/m/model.safetensors" and "a job found" in damaged.problem
    assert (saved / "model.safetensors.damaged").exists() and not (root / ".snakemake/unie/damaged.txt").exists()


# ---------------------------------------------------------------------- operator settings
def test_runtime_grows_with_attempts_up_to_the_cap():
    assert [runtime_at(2880, a, None) for a in (1, 2, 3)] == [2880, 5760, 8640]
    assert [runtime_at(600, a, 1440) for a in (1, 2, 3)] == [600, 1200, 1440]
    assert max(runtime_at(2880, a, 2880) for a in range(1, 10)) == 2880


def test_cli_config_values_are_read_as_yaml():
    """``--config 'resources={train: {runtime: 30}}'`` arrives with string leaves (YAML's base loader)."""
    config = {
        "seed": 1,
        "resources": {"train": {"runtime": "30", "gpu": "1", "mem_mb": 4000, "note": "on"}},
        "slurm_partitions": {"cpu": "normal", "gpu": "a100"},
        "flags": ["true", "x"],
        "untouched": "30",
    }
    coerce_cli_config(
        config,
        {
            "resources": {"train": {"runtime": "30", "gpu": "1"}},
            "slurm_partitions": {},
            "flags": ["true", "x"],
            "seed": 1,
        },
    )
    assert config["resources"]["train"] == {"runtime": 30, "gpu": 1, "mem_mb": 4000, "note": "on"}  # file values stay
    assert config["slurm_partitions"] == {"cpu": "normal", "gpu": "a100"} and config["flags"] == [True, "x"]
    assert config["untouched"] == "30"  # not given as a nested value on the command line


def test_a_tokenizer_mismatch_between_tokens_and_tokenizer_is_refused(toy, tmp_path):
    from unie.data.tokenizer import word_tokenizer

    word_tokenizer(["other", "words"]).save(tmp_path / "tok")
    with pytest.raises(ConfigError, match="tokenizer mismatch"):
        train_from_spec(
            "m",
            _spec(),
            toy / "train0.parquet",
            tmp_path / "tok",
            tmp_path / "out",
            tmp_path / "ck",
            seq_len=8,
            log=_quiet,
        )
    assert not (tmp_path / "out").exists() and not (tmp_path / "ck" / "last.pt").exists()


def test_a_job_reports_an_operator_error_in_one_line(tmp_path, capsys):
    from types import SimpleNamespace

    from unie.pipeline.rule import job

    log = tmp_path / "job.log"
    smk = SimpleNamespace(threads=1, log=[str(log)])
    with pytest.raises(SystemExit) as e:
        with job(smk):
            raise ConfigError("models.ar.train: unknown key 'stpes'\n(did you mean 'steps'?)")
    assert e.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"unie: error: models.ar.train: unknown key 'stpes' (did you mean 'steps'?) (log: {log})"]
    assert "Traceback" in log.read_text()
    with pytest.raises(ZeroDivisionError):  # anything else keeps its traceback
        with job(smk):
            1 / 0


def test_dllm_training_tensors_are_checked_against_meta_json(tmp_path):
    from unie.pipeline.dllm_runs import load_dllm_tensor

    d = tmp_path / "resources" / "dllm"
    d.mkdir(parents=True)
    x = torch.arange(600).view(20, 30)
    torch.save(x, d / "bpe_dllm_sft.pt")
    from unie.core.integrity import write_json

    meta = {"files": {"bpe_dllm_sft.pt": file_record(d / "bpe_dllm_sft.pt")}}
    write_json(meta, d / "meta.json")  # as rule dllm_data writes it: with its content hash
    y, digest = load_dllm_tensor(d, "bpe_dllm_sft.pt", meta)
    assert torch.equal(x, y) and digest == meta["files"]["bpe_dllm_sft.pt"]["sha256"]
    assert find_damaged(tmp_path, cache_path=None) == []
    _flip(d / "bpe_dllm_sft.pt")
    with pytest.raises(
        DamagedFileError,
        match=r"bpe_dllm_sft.pt is damaged: .*rerun the workflow: .*rule dllm_data "
        r"rewrites every tensor",
    ):
        load_dllm_tensor(d, "bpe_dllm_sft.pt", meta)
    (damaged,) = find_damaged(tmp_path, cache_path=None)
    assert damaged.path == "resources/dllm/bpe_dllm_sft.pt" and damaged.output == "resources/dllm/meta.json"


def test_dllm_sft_with_changed_data_trains_fresh(tmp_path):
    """The DLLM half's fine-tuning: new SFT tensors at the same path (other task data) are not resumed from the
    stale checkpoint; the model equals a fresh run's."""
    from unie.pipeline.dllm_runs import prepare_dllm_data, train_dllm_model

    def data(answers, out):
        tasks = tmp_path / f"tasks_{answers}"
        tasks.mkdir(exist_ok=True)
        rows = [
            {
                "question": f"question : sort [ {i} {i + 1} ]",
                "answer": f"[ {i} {i + 1} ]" if answers == "done" else f"[ {i + 1} {i} ]",
            }
            for i in range(8)
        ]
        (tasks / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
        prepare_dllm_data(
            {"t": tasks / "t.jsonl"},
            {"t": tasks / "t.jsonl"},
            ["the baker bakes the pie"] * 4,
            out,
            gen_length=16,
            bpe_vocab_size=40,
            n_pretrain_texts=4,
            log=_quiet,
        )

    spec = {
        "method": "llada",
        "tokenizer": "word",
        "data": "sft",
        "arch": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "train": {"steps": 4, "batch_size": 4, "lr": 1e-3, "ckpt_every": 2, "log_every": 2},
    }
    d = tmp_path / "data"
    data("done", d)
    train_dllm_model("m", spec, d, tmp_path / "out", tmp_path / "ckpt", log=_quiet)
    data("ok", tmp_path / "fresh_data")
    data("ok", d)  # same path, other content (the word tokenizer is the same: only the tensors change)
    logs = []
    again, _ = train_dllm_model("m", spec, d, tmp_path / "out", tmp_path / "ckpt", log=logs.append)
    fresh, _ = train_dllm_model("m", spec, tmp_path / "fresh_data", tmp_path / "out2", tmp_path / "ckpt2", log=_quiet)
    assert any("not resuming" in m and "data.sha256" in m for m in logs), logs
    assert _same(again, fresh)


def test_an_input_error_on_a_torchrun_rank_reaches_the_console_as_one_line(tmp_path, monkeypatch):
    """Multi-GPU training and lm-eval runs: a rank that stops on an input error writes its message beside the
    launch arguments, and the launcher raises it (an operator error: one console line), not "torchrun exited 1"."""
    import subprocess

    from unie.core import ranks
    from unie.pipeline import launch
    from unie.core.errors import OPERATOR_ERRORS

    args_file = tmp_path / "args.json"
    args_file.write_text("{}")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(ConfigError):
        with ranks.reporting_rank_errors(args_file):
            raise ConfigError("models.ar.train: unknown key 'stpes'")
    assert (tmp_path / "error.1.txt").read_text() == "models.ar.train: unknown key 'stpes'"
    with pytest.raises(ZeroDivisionError):
        with ranks.reporting_rank_errors(args_file):
            1 / 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["args.json", "error.1.txt"]

    class Ranks:  # torchrun's stand-in: rank 0 reports an input error and the launch fails
        def __init__(self, cmd, **kw):
            Path(cmd[-1]).with_name("error.0.txt").write_text("results/checkpoints/ar is in use by pid 7")
            self.stdout = iter(["rank 0 failed\n"])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait(self):
            return 1

    monkeypatch.setattr(subprocess, "Popen", Ranks)
    with pytest.raises(ranks.RankError, match="^results/checkpoints/ar is in use by pid 7$") as e:
        launch.run_training("models", {"name": "ar"}, nproc=2, log=_quiet)
    assert isinstance(e.value, OPERATOR_ERRORS)


@pytest.mark.parametrize("change", ["partner", "dev split"])
def test_nce_with_a_changed_partner_or_dev_split_trains_fresh(tmp_path, tok, change):
    """NCE fine-tuning reads a frozen proxy and selects on a dev split: other proxy weights, or other dev tokens,
    at the same paths are a different run (the stale last.pt would hold a selection made with the old ones)."""
    L, arch = 8, {"d_model": 16, "n_layers": 1, "n_heads": 2}
    tok.save(tmp_path / "tok")
    for name, split, n, seed in (("train", "train", 64, 0), ("valid", "valid", 16, 0), ("valid1", "valid", 16, 1)):
        write_text_parquet(generate_corpus("owt", split, n, L, seed=seed), tmp_path / f"{name}.parquet")
        tokenize_corpus(
            tmp_path / f"{name}.parquet",
            tok,
            tmp_path / f"{name}_tokens.parquet",
            L,
            insert_eos=False,
            chunk_specials=False,
        )
    small = {"steps": 4, "batch_size": 8, "lr": 1e-3, "ckpt_every": 2}
    train = tmp_path / "train_tokens.parquet"
    train_from_spec(
        "mdlm",
        {"method": "mdlm", "arch": arch, "train": small},
        train,
        tmp_path / "tok",
        tmp_path / "m",
        tmp_path / "ck_m",
        L,
        log=_quiet,
    )
    for seed in (0, 1):
        train_from_spec(
            "p",
            {"method": "ar", "options": {"mask_inputs": True}, "arch": arch, "train": {**small, "seed": seed}},
            train,
            tmp_path / "tok",
            tmp_path / f"p{seed}",
            tmp_path / f"ck_p{seed}",
            L,
            log=_quiet,
        )
    proxy, dev = tmp_path / "proxy", tmp_path / "dev.parquet"

    def place(proxy_seed, dev_name):
        proxy.mkdir(exist_ok=True)
        for f in ("model.safetensors", "config.json"):
            (proxy / f).write_bytes((tmp_path / f"p{proxy_seed}" / f).read_bytes())
        dev.write_bytes((tmp_path / f"{dev_name}_tokens.parquet").read_bytes())

    spec = {
        "method": "nce",
        "options": {"energy": "uni", "train": "dlm", "ar_context": "masked", "proxy": "p"},
        "arch": arch,
        "train": {"steps": 4, "batch_size": 8, "lr": 1e-3, "ckpt_every": 2, "log_every": 2},
    }

    def run(out, ckpt, logs=None):
        return train_from_spec(
            "n",
            spec,
            train,
            tmp_path / "tok",
            out,
            ckpt,
            L,
            init_dir=tmp_path / "m",
            partner_dirs={"proxy": proxy},
            dev_path=dev,
            log=_quiet if logs is None else logs.append,
        )[0]

    place(0, "valid")
    run(tmp_path / "out", tmp_path / "ck")
    place(1, "valid") if change == "partner" else place(0, "valid1")
    logs = []
    again = run(tmp_path / "out", tmp_path / "ck", logs)
    fresh = run(tmp_path / "out_fresh", tmp_path / "ck_fresh")
    named = "partners.proxy" if change == "partner" else "dev.sha256"
    assert any("not resuming" in m and named in m for m in logs), logs
    assert _same(again, fresh)


# ---------------------------------------------------------------------- result files carry their content hash
def _edit_keep_mtime(path: Path, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` once in ``path``, its modification time kept (as bit rot or ``cp -p`` keep it)."""
    st = path.stat()
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _ppl_result() -> dict:
    import math

    nll = 4.312113517402162
    return {
        "source": "mdlm",
        "domains": {
            "owt": {"nll_per_token": nll, "nll_se": 0.16, "ppl": math.exp(nll), "tokens": 1024, "sequences": 64}
        },
    }


def test_a_result_json_carries_its_content_hash_and_a_one_digit_edit_is_named(tmp_path):
    from unie.core.integrity import HASH_KEY, write_json

    p = tmp_path / "results" / "ppl" / "mdlm.json"
    write_json(_ppl_result(), p, made_by="ppl", made_from={"results/models/mdlm/model.safetensors": "ab" * 32})
    raw = json.loads(p.read_text())
    assert len(raw[HASH_KEY]) == 64 and raw["made_by"] == "ppl"
    assert read_json(p) == _ppl_result()  # the writer's object, without what the writer added
    p.write_text(json.dumps(raw, indent=7, sort_keys=True))  # layout is not content
    assert read_json(p) == _ppl_result()
    _edit_keep_mtime(p, '"nll_se": 0.16', '"nll_se": 0.18')  # a number no other one checks
    with pytest.raises(DamagedFileError) as e:
        read_json(p)
    assert str(e.value) == (
        f"{p} is damaged: its values differ from the content hash it recorded when it was "
        "written (an edited or corrupted value); rerun the workflow: it sets the file aside "
        "before planning and rule ppl remakes it in the same run"
    )
    # without its hash fields (deleted: the values would otherwise be read unchecked) it is refused
    stripped = {k: v for k, v in raw.items() if k not in ("content_sha256", "made_by", "made_from", "records")}
    p.write_text(json.dumps(stripped))
    with pytest.raises(
        DamagedFileError,
        match=r"mdlm\.json is damaged: it carries no content hash, although every "
        r"result file of this workflow is written with one",
    ):
        read_json(p)
    # a JSON another program writes (lm-eval's) is checked where its numbers allow it
    bad = _ppl_result()
    bad["domains"]["owt"]["ppl"] = 14.597986587527
    (tmp_path / "old.json").write_text(json.dumps(bad))
    with pytest.raises(
        DamagedFileError,
        match=r"old\.json is damaged: its numbers disagree: domains\.owt ppl "
        r"14\.597986587527 is not exp\(nll_per_token 4\.3121",
    ):
        read_json(tmp_path / "old.json", hashed=False)


def test_lm_eval_numbers_must_agree_with_their_count(tmp_path):
    from unie.eval.metrics import lmeval_numbers_problem

    def results(p, se, n=8, metric="exact_match"):
        return {
            "results": {"toy_math": {f"{metric},none": p, f"{metric}_stderr,none": se}},
            "n-samples": {"toy_math": {"original": n, "effective": n}},
            "group_subtasks": {},
        }

    import math

    assert lmeval_numbers_problem(results(0.0, 0.0)) is None
    assert lmeval_numbers_problem(results(0.375, math.sqrt(0.375 * 0.625 / 7))) is None
    assert "has s.e. 0.0, not 0.18898" in lmeval_numbers_problem(results(0.5, 0.0))  # a mean moved 0.0 -> 0.5
    assert "not a count of 8 items" in lmeval_numbers_problem(results(0.3, math.sqrt(0.3 * 0.7 / 7)))
    # a metric that need not be 0/1 per item (pass@1 over several draws): only the bound holds
    assert lmeval_numbers_problem(results(0.3, 0.1, metric="pass_at_1")) is None
    assert "above its bound" in lmeval_numbers_problem(results(0.5, 0.3, metric="pass_at_1"))
    # groups pool their subtasks' standard errors: not checked
    grouped = results(0.5, 0.0)
    grouped["group_subtasks"] = {"toy_math": ["a", "b"]}
    assert lmeval_numbers_problem(grouped) is None


def test_the_scan_sets_aside_edited_results_and_their_records_and_names_what_remakes_them(tmp_path, monkeypatch):
    """Before planning: a one-digit edit of a result JSON (its mtime kept), a changed samples file the Gen PPL
    vouches for, and an lm-eval result whose numbers disagree are set aside; the run remakes each by the rule that
    makes it (a file no rule makes: the one holding its record); a dry run renames nothing and plans the same."""
    from unie.core.integrity import write_json
    from unie.pipeline.damage import plan_rebuilds

    root = tmp_path
    monkeypatch.chdir(root)
    ppl = Path("results/ppl/mdlm.json")
    write_json(_ppl_result(), ppl, made_by="ppl")
    samples = Path("results/samples/mdlm/steps2.parquet")
    write_tokens(torch.arange(64).view(8, 8), samples)
    genppl = Path("results/genppl/mdlm/steps2.json")
    write_json({"samples": str(samples), "genppl": {}}, genppl, records=[samples])
    lm = Path("results/dllm/rows/llada/llada/results_2026.json")
    lm.parent.mkdir(parents=True)
    lm.write_text(
        json.dumps({"results": {"t": {"acc,none": 0.0, "acc_stderr,none": 0.0}}, "n-samples": {"t": {"effective": 8}}})
    )
    rules = {
        "results/ppl/mdlm.json": "ppl",
        "results/samples/mdlm/steps2.parquet": "sample_table2",
        "results/genppl/mdlm/steps2.json": "sample_table2",
        "results/dllm/rows/llada": "dllm_eval_llada",
    }
    producer = rules.get
    assert plan_rebuilds(root, producer, log=_quiet) == []
    _edit_keep_mtime(ppl, "4.312113517402162", "4.312113517402163")
    b = bytearray(samples.read_bytes())
    b[100] ^= 0x01
    samples.write_bytes(bytes(b))
    _edit_keep_mtime(lm, '"acc,none": 0.0', '"acc,none": 0.5')
    logs = []
    planned = plan_rebuilds(root, producer, log=logs.append, dry_run=True)
    assert planned == ["results/dllm/rows/llada", "results/ppl/mdlm.json", "results/samples/mdlm/steps2.parquet"]
    assert ppl.exists() and samples.exists() and len(logs) == 3
    logs = []
    assert plan_rebuilds(root, producer, log=logs.append) == planned
    assert not ppl.exists() and Path("results/ppl/mdlm.json.damaged").exists() and not samples.exists()
    assert not lm.exists() and genppl.exists()
    assert sorted(logs) == sorted(
        [
            "unie: results/dllm/rows/llada/llada/results_2026.json is damaged: its numbers disagree: t acc,none = 0.5 "
            "over 8 items has s.e. 0.0, not 0.1889822365046136; set aside as "
            "results/dllm/rows/llada/llada/results_2026.json.damaged; this run remakes it with results/dllm/rows/llada "
            "(rule dllm_eval_llada)",
            "unie: results/ppl/mdlm.json is damaged: its values differ from the content hash it recorded when it was "
            "written (an edited or corrupted value); set aside as results/ppl/mdlm.json.damaged; this run rebuilds it "
            "(rule ppl)",
            "unie: results/samples/mdlm/steps2.parquet is damaged: content hash differs from the one recorded when it "
            "was written; set aside as results/samples/mdlm/steps2.parquet.damaged; this run rebuilds it "
            "(rule sample_table2)",
        ]
    )
    # a run stopped before it remade them: the next one remakes what was set aside and is still missing
    logs = []
    assert plan_rebuilds(root, producer, log=logs.append) == planned
    assert all("not made again since" in m for m in logs) and len(logs) == 3


def test_a_replaced_input_with_an_old_mtime_gets_the_current_one(tmp_path, toy, tok, monkeypatch):
    """``cp -p`` of another token file over the one a model was trained on: the model recorded its input by content,
    so the check gives the file the current time (Snakemake then retrains what was made from it); a second check
    finds it newer already and leaves it."""
    from unie.pipeline.damage import find_stale, plan_rebuilds

    monkeypatch.chdir(tmp_path)
    tokens = Path("resources/tokenized/owt/train.parquet")
    tokens.parent.mkdir(parents=True)
    tokens.write_bytes((toy / "train0.parquet").read_bytes())
    tok.save(Path("resources/tokenizer"))
    train_from_spec(
        "m",
        _spec(steps=2),
        tokens,
        "resources/tokenizer",
        "results/models/m",
        "results/checkpoints/m",
        seq_len=8,
        log=_quiet,
    )
    made = json.loads(Path("results/models/m/config.json").read_text())["extra"]["made_from"]
    assert list(made) == [str(tokens), "resources/tokenizer"] and find_stale(".") == []  # every file it read
    old = os.stat(tokens).st_mtime_ns - 10**12
    tokens.write_bytes((toy / "train1.parquet").read_bytes())  # other tokens, an old modification time
    os.utime(tokens, ns=(old, old))
    (stale,) = find_stale(".")
    assert stale.output == "results/models/m/model.safetensors" and stale.source == str(tokens)
    logs = []
    assert plan_rebuilds(".", log=logs.append) == []  # nothing forced: Snakemake's own rule (a newer input) applies
    assert tokens.stat().st_mtime_ns > Path("results/models/m/model.safetensors").stat().st_mtime_ns
    assert len(logs) == 1 and logs[0].startswith("unie: resources/tokenized/owt/train.parquet was replaced (content ")
    assert "after results/models/m/model.safetensors was made from it: its modification time is set to now" in logs[0]
    logs = []
    plan_rebuilds(".", log=logs.append)
    assert logs == []


def test_a_refused_job_never_loses_another_jobs_log(tmp_path, capsys):
    """Snakemake removes a job's log before it runs it again, also while an orphaned job still writes to it: the
    orphan copies its earlier lines to the new file and goes on there, under the refused job's lines."""
    from types import SimpleNamespace

    from unie.pipeline.rule import job

    log = tmp_path / "train.log"
    with job(SimpleNamespace(threads=1, log=[str(log)])) as say:
        say("orphan: step 20")
        log.unlink()  # snakemake, rerun, removes the log; the second job opens it and is refused
        log.write_text("refused: results/checkpoints/ar is in use by pid 1\n")
        say("orphan: step 40")
    lines = log.read_text().splitlines()
    assert lines[0] == "refused: results/checkpoints/ar is in use by pid 1"
    assert "this log was replaced by another run's job" in lines[1]
    assert lines[2].endswith("orphan: step 20") and lines[3].endswith("orphan: step 40")


def test_a_job_in_a_longer_process_gives_the_root_logger_back(tmp_path):
    """While a job runs, the root logger writes to its log; afterwards it has its own handlers and level again, so a
    later message in the same process (a test's Snakemake run) does not reach the job's closed log ("--- Logging
    error ---", which ended a test's output when the test ran after a job in the same process)."""
    import logging
    from types import SimpleNamespace

    from unie.pipeline.rule import job

    root = logging.getLogger()
    before = root.handlers[:], root.level
    log = tmp_path / "job.log"
    with job(SimpleNamespace(threads=1, log=[str(log)])):
        logging.getLogger("unie.test").info("inside the job")
    assert (root.handlers, root.level) == before
    assert log.read_text().rstrip().endswith("inside the job")
    logging.getLogger("snakemake.logging").error("after the job")  # reaches only what was there before
    assert log.read_text().count("after the job") == 0


def test_which_parquet_readers_check_page_crcs(tmp_path, hf_offline):
    """The README's claim: a flipped byte in a samples file can reach ``pandas.read_parquet`` and
    ``datasets.load_dataset("parquet", ...)`` (pyarrow's default reader) as other tokens without an error; pyarrow
    with ``page_checksum_verification=True`` (also through pandas) and :func:`unie.data.tokens.load_tokens` refuse
    it."""
    import pandas as pd
    import pyarrow.parquet as pq

    p = tmp_path / "steps4.parquet"
    x = torch.arange(4000).view(500, 8) % 100
    write_tokens(x, p)
    good = p.read_bytes()
    silent = None
    for i in range(4, len(good) // 2):
        b = bytearray(good)
        b[i] ^= 0x01
        p.write_bytes(bytes(b))
        try:
            got = pd.read_parquet(p)["input_ids"]
        except Exception:
            continue
        if [list(r) for r in got] != x.tolist():
            silent = i
            break
    assert silent is not None, "no flip reached pandas silently"
    import datasets

    ds = datasets.load_dataset("parquet", data_files=str(p), split="train", cache_dir=str(tmp_path / "cache"))
    assert [list(r) for r in ds["input_ids"]] != x.tolist()  # no error either
    with pytest.raises(OSError, match="CRC"):
        pq.read_table(p, page_checksum_verification=True)
    with pytest.raises(OSError, match="CRC"):
        pd.read_parquet(p, page_checksum_verification=True)
    with pytest.raises(DamagedFileError):
        load_tokens(p)
