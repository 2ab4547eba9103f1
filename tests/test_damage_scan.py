"""The check before planning (:mod:`unie.pipeline.damage`) on small trees the tests write, one family of files at
a time: tables and figures against their records, token files that are not what their place says, lm-eval's files
at any depth (a Table 3 row, a sweep point, a map point), result files without their hash fields, deleted inputs,
and what the check says when it cannot act (a read-only folder, another run holding the lock).  Through Snakemake on
a finished smoke run: ``test_damage_workflow.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from unie.core.integrity import (
    DamagedFileError,
    read_page_bytes,
    read_page_text,
    record_path,
    write_json,
    write_page_record,
)
from unie.data.tokens import TokenFileError, check_token_file, write_token_file, write_tokens
from unie.pipeline.damage import find_damaged, find_missing, identities, plan_rebuilds

RUN = "runs/t"  # every tree below is laid out as one run's directory


def _quiet(_msg):
    pass


def _edit_keep_mtime(path: Path, old: str, new: str) -> None:
    st = path.stat()
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _plan(producer, dry_run=False):
    logs = []
    remake = plan_rebuilds(".", producer, log=logs.append, dry_run=dry_run, run=RUN)
    return remake, logs


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return Path(RUN)


def _tokens(path: Path, dataset: str, split: str, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    write_token_file(
        path,
        [torch.randint(0, 9, (8, 4), generator=g).numpy()],
        4,
        {"tokenizer": "fp", "source": {"dataset": dataset, "split": split}},
    )


# ---------------------------------------------------------------------- tables and figures
def test_a_table_is_read_for_a_page_only_as_written(tree):
    """Its record beside it: an edit with the modification time kept, a deleted record, a record that names another
    file are each refused in one line; the bytes returned are the bytes checked."""
    csv = tree / "results/tables/table2_genppl.csv"
    csv.parent.mkdir(parents=True)
    csv.write_text("row,genppl\nMDLM,990.0\n")
    write_page_record(csv, "table2", {"runs/t/results/genppl/mdlm/steps2.json": "ab" * 32})
    assert read_page_text(csv) == "row,genppl\nMDLM,990.0\n"
    rec = json.loads(record_path(csv).read_text())
    assert rec["made_by"] == "table2" and list(rec["records"]) == [str(csv)]
    _edit_keep_mtime(csv, "990.0", "390.0")
    with pytest.raises(DamagedFileError) as e:
        read_page_text(csv)
    assert str(e.value).startswith(f"{csv} is damaged: its content hash ") and "rule table2 remakes it" in str(e.value)
    record_path(csv).unlink()
    with pytest.raises(DamagedFileError, match="it has no record of its content hash"):
        read_page_bytes(csv)


def test_an_edited_table_and_one_without_its_record_are_remade_by_their_rule(tree):
    tables = tree / "results/tables"
    tables.mkdir(parents=True)
    for name in ("table2_genppl.tex", "table2_genppl.csv", "table1_ppl.csv"):
        (tables / name).write_text(f"{name} 990.0\n")
        write_page_record(tables / name, "table2" if "table2" in name else "table1")
    png = tree / "results/figures/fig4_dllm_tradeoff.png"
    png.parent.mkdir(parents=True)
    png.write_bytes(b"\x89PNG" + bytes(range(200)))
    write_page_record(png, "fig4")
    rules = {
        str(tables / "table2_genppl.tex"): "table2",
        str(tables / "table2_genppl.csv"): "table2",
        str(tables / "table1_ppl.csv"): "table1",
        str(png): "fig4",
    }
    producer = rules.get
    assert _plan(producer) == ([], [])
    _edit_keep_mtime(tables / "table2_genppl.tex", "990.0", "390.0")
    _edit_keep_mtime(tables / "table2_genppl.csv", "990.0", "390.0")
    b = bytearray(png.read_bytes())
    b[50] ^= 1
    png.write_bytes(bytes(b))
    record_path(tables / "table1_ppl.csv").unlink()
    remake, logs = _plan(producer)
    assert remake == sorted(rules)  # every one, by the rule that writes it
    assert len(logs) == 4 and all("\n" not in m for m in logs)
    said = {m.split(" is damaged: ")[0].removeprefix("unie: "): m for m in logs}
    assert (
        said[f"{tables}/table1_ppl.csv"]
        .split(" is damaged: ")[1]
        .startswith(f"it has no record of its content hash ({tables}/.records/table1_ppl.csv.json is missing")
    )
    assert said[f"{tables}/table2_genppl.tex"].endswith("this run rebuilds it (rule table2)")
    assert " is damaged: content hash differs" in said[str(png)] and said[str(png)].endswith("(rule fig4)")


def test_an_edited_record_remakes_the_table_it_covers(tree):
    csv = tree / "results/tables/table1_ppl.csv"
    csv.parent.mkdir(parents=True)
    csv.write_text("a\n")
    write_page_record(csv, "table1")
    _edit_keep_mtime(record_path(csv), '"bytes": 2', '"bytes": 3')
    remake, logs = _plan({str(csv): "table1"}.get)
    assert remake == [str(csv)]
    assert logs == [
        f"unie: {record_path(csv)} is damaged: its values differ from the content hash it recorded when "
        f"it was written (an edited or corrupted value); set aside as {record_path(csv)}.damaged; this "
        f"run remakes it with {csv} (rule table1)"
    ]


# ---------------------------------------------------------------------- token files
def test_a_token_file_must_be_what_its_place_says(tree):
    """Another domain's token file copied over this one, a Parquet without the project's metadata, another
    tokenizer: one line each, from the job that reads it (:func:`check_token_file`) and from the check before
    planning, which remakes it (rule tokenize)."""
    d = tree / "resources/tokenized"
    _tokens(d / "owt/test.parquet", "owt", "test")
    _tokens(d / "lm1b/test.parquet", "owt", "test", seed=1)  # owt's tokens at lm1b's place
    write_tokens(torch.arange(32).view(8, 4), d / "owt/valid.parquet")  # no unie.tokens metadata
    with pytest.raises(TokenFileError) as e:
        check_token_file(d / "lm1b/test.parquet", "lm1b", "test")
    assert str(e.value).startswith(
        f"{d}/lm1b/test.parquet is damaged: its metadata says it holds dataset 'owt', where dataset 'lm1b' is expected"
    )
    with pytest.raises(
        TokenFileError, match="it has no unie.tokens metadata: not a token file written by rule tokenize"
    ):
        check_token_file(d / "owt/valid.parquet", "owt", "valid")
    with pytest.raises(TokenFileError, match="holds tokenizer 'fp', where tokenizer 'other' is expected"):
        check_token_file(d / "owt/test.parquet", "owt", "test", "other")
    producer = lambda p: "tokenize" if "/tokenized/" in p else None  # noqa: E731
    remake, logs = _plan(producer)
    assert remake == [str(d / "lm1b/test.parquet"), str(d / "owt/valid.parquet")]
    assert all(m.endswith("this run rebuilds it (rule tokenize)") for m in logs) and len(logs) == 2


def test_every_file_a_job_reads_is_in_made_from_whatever_it_holds(tree):
    """A Parquet without metadata, a JSON without a hash, a folder: each listed, by the SHA-256 of its bytes (a
    folder: of its files), so a later swap of any of them is seen."""
    bare = tree / "resources/tokenized/owt/test.parquet"
    write_tokens(torch.arange(32).view(8, 4), bare)
    lm = tree / "results/dllm/rows/llada/results.json"
    lm.parent.mkdir(parents=True)
    lm.write_text('{"results": {}}')
    tok = tree / "resources/tokenizer"
    tok.mkdir(parents=True)
    (tok / "tokenizer.json").write_text("{}")
    ids = identities([bare, lm, tok, tree / "missing.json"])
    assert set(ids) == {str(bare), str(lm), str(tok)} and ids[str(tok)].startswith("folder ")
    from unie.core.integrity import file_sha256

    assert ids[str(bare)] == file_sha256(bare) and ids[str(lm)] == file_sha256(lm)


# ---------------------------------------------------------------------- lm-eval's files at any depth
ROW_FILES = {
    "row": "results/dllm/rows/dream_ind",
    "sweep": "results/dllm/sweeps/app_k",
    "map": "results/dllm/map/llada",
}
HOLDER = {"row": "effect.json", "sweep": "lmeval.json", "map": "lmeval.json"}  # a map backbone's lm-eval points
RULE = {"row": "dllm_eval_dream", "sweep": "dllm_sweep_eval", "map": "dllm_map_llada"}


def _lmeval_tree(tree: Path, kind: str):
    """A row's (or a sweep's, or the map's) folder as the workflow leaves it: the job's declared output, lm-eval's
    timestamped results and samples in a subfolder named after the model (a point's one level further down), and
    the file that records them."""
    top = tree / ROW_FILES[kind]
    inner = top / ("dream" if kind == "row" else "uni__K_2/uni__K_2")
    inner.mkdir(parents=True)
    results = inner / "results_2026-11-29T03-30-00.json"
    results.write_text(
        json.dumps({"results": {"t": {"acc,none": 0.0, "acc_stderr,none": 0.0}}, "n-samples": {"t": {"effective": 8}}})
    )
    samples = inner / "samples_t_2026-11-29T03-30-00.jsonl"
    samples.write_text('{"doc_id": 0}\n')
    declared = top / ("results.json" if kind == "row" else HOLDER[kind])
    if kind == "row":
        declared.write_text(results.read_text())
        write_json({"row": "dream_ind"}, top / "effect.json", records=[declared, results, samples])
    else:
        write_json({"points": []}, declared, records=[results, samples])
    producer = {str(declared): RULE[kind]}.get
    return results, declared, producer


@pytest.mark.parametrize("kind", list(ROW_FILES))
@pytest.mark.parametrize("damage", ["one digit", "truncated"])
def test_lm_evals_files_in_a_subfolder_are_remade_by_the_rule_of_the_folder_above(tree, kind, damage):
    """A row's folder named before ``effect.json`` (``dream*``, ``ar_large2``) sorts its subfolder first: its
    damaged lm-eval file is remade all the same, by the rule that writes the row (or the sweep's, the map's
    points), named in one line; once that rule ran, the set-aside copy asks for nothing more."""
    results, declared, producer = _lmeval_tree(tree, kind)
    assert _plan(producer) == ([], [])
    if damage == "one digit":
        _edit_keep_mtime(results, '"acc,none": 0.0', '"acc,none": 0.5')
    else:
        results.write_bytes(results.read_bytes()[:40])
    remake, logs = _plan(producer)
    assert remake == [str(declared)]
    (line,) = logs
    assert line.startswith(f"unie: {results} is damaged: ") and "\n" not in line
    assert line.endswith(f"set aside as {results}.damaged; this run remakes it with {declared} (rule {RULE[kind]})")
    # a run stopped before the rule ran: the next one remakes it again ...
    remake, logs = _plan(producer)
    assert remake == [str(declared)] and "was set aside as" in logs[0] and logs[0].endswith(f"(rule {RULE[kind]})")
    # ... until the rule wrote the folder again (lm-eval's new files have new names)
    st = (Path(f"{results}.damaged")).stat()
    os.utime(declared, ns=(st.st_atime_ns, max(st.st_mtime_ns, st.st_ctime_ns) + 10**9))
    assert _plan(producer) == ([], [])


def test_a_damaged_lmeval_file_is_remade_by_the_rule_whose_record_vouches_for_it(tree):
    """A map backbone's folder holds two files rules make, ``lmeval.json`` (its lm-eval points: it records their
    files) and ``points.json`` (the points with the trees): a damaged lm-eval file is remade by the rule of the one
    that vouches for it, whichever sorts first (here a file named to sort before it, made by another rule)."""
    results, declared, _ = _lmeval_tree(tree, "map")
    other = declared.parent / "a_first.json"  # sorts before lmeval.json, made by a rule, vouches for nothing
    write_json({"points": []}, other)
    producer = {str(declared): RULE["map"], str(other): "dllm_map_points_llada"}.get
    assert _plan(producer) == ([], [])
    _edit_keep_mtime(results, '"acc,none": 0.0', '"acc,none": 0.5')
    remake, logs = _plan(producer)
    assert remake == [str(declared)]
    assert logs[0].endswith(f"this run remakes it with {declared} (rule {RULE['map']})")


# ---------------------------------------------------------------------- no downgrade, deleted inputs
def test_a_result_without_its_hash_fields_is_refused(tree):
    """Every result JSON a rule writes carries its hash; one whose envelope was deleted is damage (it would
    otherwise be read unchecked), remade by its rule; lm-eval's own files (recorded elsewhere) are not."""
    ppl = tree / "results/ppl/ar.json"
    write_json({"domains": {"owt": {"ppl": 25.17}}}, ppl, made_by="ppl")
    raw = json.loads(ppl.read_text())
    ppl.write_text(json.dumps({k: v for k, v in raw.items() if k not in ("content_sha256", "made_by")}))
    (found,) = find_damaged(".", cache_path=None, run=RUN)
    assert found.path == str(ppl) and found.problem.startswith("it carries no content hash, although every result")
    remake, logs = _plan({str(ppl): "ppl"}.get)
    assert remake == [str(ppl)] and logs[0].endswith("this run rebuilds it (rule ppl)")


def test_a_deleted_input_is_remade_with_what_was_made_from_it(tree):
    """``rm results/ppl/mdlm.json``: Table 1's record names it in ``made_from``; the check plans its job (and so
    Table 1, made from it), where Snakemake alone would do nothing while Table 1 is there."""
    ppl = tree / "results/ppl/mdlm.json"
    write_json({"domains": {}}, ppl, made_by="ppl")
    csv = tree / "results/tables/table1_ppl.csv"
    csv.parent.mkdir(parents=True)
    csv.write_text("a\n")
    write_page_record(csv, "table1", identities([ppl]))
    producer = {str(ppl): "ppl", str(csv): "table1"}.get
    assert _plan(producer) == ([], [])
    ppl.unlink()
    assert find_missing(".", RUN) == {str(ppl): [str(csv)]}
    remake, logs = _plan(producer, dry_run=True)
    assert remake == [str(ppl)]
    assert logs == [
        f"unie: {ppl} is missing (deleted?), and {csv} was made from it: the run will remake it (rule ppl) "
        "and what is made from it"
    ]


# ---------------------------------------------------------------------- when the check cannot act
def test_a_read_only_folder_is_one_line_not_a_traceback(tree, monkeypatch, capsys):
    """``os.replace`` refused (a read-only or immutable folder; root ignores the mode bits, so the refusal is
    simulated): the run ends before planning with one line naming the file, the folder and the fix."""
    from unie.pipeline.run import remake_before_planning

    ppl = tree / "results/ppl/mdlm.json"
    write_json({"domains": {}}, ppl, made_by="ppl")
    _edit_keep_mtime(ppl, '"domains"', '"domainz"')

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    ran = []
    workflow = SimpleNamespace(
        execute=lambda *a, **k: ran.append(1),
        rules=[],
        output_settings=SimpleNamespace(dryrun=False),
        dag_settings=SimpleNamespace(forcerun=frozenset()),
    )
    said = []
    remake_before_planning(workflow, RUN, log=said.append)
    with pytest.raises(SystemExit) as e:
        workflow.execute(SimpleNamespace(name="local", common_settings=None))
    assert e.value.code == 1 and not ran
    assert said == [
        f"unie: {ppl} is damaged: its values differ from the content hash it recorded when it was "
        f"written (an edited or corrupted value); it cannot be set aside as {ppl}.damaged (Permission "
        f"denied: its folder {ppl.parent} is read-only or immutable): make it writable (chmod u+w, "
        "chattr -i) and rerun, and the run remakes it"
    ]


def test_the_checks_say_when_another_run_holds_the_lock(tree):
    ppl = tree / "results/ppl/mdlm.json"
    write_json({"domains": {}}, ppl, made_by="ppl")
    _edit_keep_mtime(ppl, '"domains"', '"domainz"')
    locks = Path(".snakemake/locks")
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("runs/other+seed-1/results/ppl/mdlm.json\n")  # another run's files: checked
    assert _plan({str(ppl): "ppl"}.get)[0] == [str(ppl)]
    ppl.with_name(ppl.name + ".damaged").rename(ppl)
    (locks / "0.input.lock").write_text(f"{ppl}\n")  # a lock on this run's files
    assert _plan({str(ppl): "ppl"}.get) == (
        [],
        [
            "unie: the checks for damaged, replaced and deleted files were skipped: another snakemake run holds this "
            "directory's lock (.snakemake/locks); rerun when it has ended (or `snakemake --unlock` if none runs)"
        ],
    )
    assert ppl.exists()


def test_a_task_yaml_is_the_same_input_wherever_its_run_lies(tmp_path):
    """lm-eval's task YAMLs quote their data files by absolute path: two working directories (a local and a cluster
    run of the same config) write different bytes for the same tasks.  Their identity (what a model or result
    records as made from them) names each data file by its name and content instead; a changed data file changes
    it."""
    from unie.pipeline.damage import identity
    from unie.pipeline.task_files import write_lmeval_tasks

    a, b = tmp_path / "local" / "tasks", tmp_path / "cluster" / "tasks"
    for out in (a, b):
        write_lmeval_tasks(out, n_train=2, n_test=3, seed=0)
    ya, yb = a / "toy_math.yaml", b / "toy_math.yaml"
    assert ya.read_bytes() != yb.read_bytes()  # the absolute paths differ
    assert identity(ya) == identity(yb) and identity(a) == identity(b)
    data = b / "data" / "toy_math_test.jsonl"
    data.write_text(data.read_text() + "\n")
    assert identity(ya) != identity(yb)
    data.unlink()
    assert identity(yb) != identity(ya)
