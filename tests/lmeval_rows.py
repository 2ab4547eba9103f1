"""The lm-eval command line the pipeline records for a Table 3 row (``config.unie_command`` of its results JSON),
rebuilt from a profile's config the way rule ``dllm_eval`` runs the row: :func:`unie.dllm.rows.row_model_args`,
then :func:`unie.dllm.lmeval.evaluate` (the lm-eval seed as the decoder's ``seed``, :func:`unie.dllm.lmeval.lmeval_command`).

Only the paths (the checkpoint, the proxy, the task folder, the output) are read from the command being checked
(they are where the workflow puts its files; they must be relative); every other word is rebuilt.  What
``docs/dllm.md`` shows for the default profile and what a smoke run records are both checked against this."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from lm_eval._cli.utils import key_val_to_dict

from unie.dllm.rows import row_model_args
from unie.dllm.lmeval import RERUN_DIR, lmeval_command
from unie.config.settings import LmEvalSettings, WorkflowSettings


def flag(argv: list[str], name: str) -> str:
    """The value after ``name`` in ``argv`` (given exactly once)."""
    assert argv.count(name) == 1, (name, argv)
    return argv[argv.index(name) + 1]


def expected_row_command(name: str, config: dict, argv: list[str]) -> list[str]:
    """The argv the pipeline records for row ``name`` of ``config`` (a resolved profile), its paths taken from
    ``argv`` after checking that they are relative and name the row's model, proxy and folder."""
    d = config["dllm"]
    row = d["rows"][name]
    given = key_val_to_dict(flag(argv, "--model_args"))
    include, out = flag(argv, "--include_path"), flag(argv, "--output_path")
    paths = [given["pretrained"], include, out] + ([given["proxy"]] if row.get("proxy") else [])
    assert not any(os.path.isabs(p) or p.startswith("..") for p in paths), paths
    assert Path(given["pretrained"]).name == row["model"] and Path(include).parts[-2:] == ("dllm", "tasks")
    assert Path(out).parts[0] == RERUN_DIR and Path(out).parts[-2:] == ("rows", name), out
    inputs = {"model": f"{given['pretrained']}/model.safetensors"}
    if row.get("proxy"):
        assert Path(given["proxy"]).name == row["proxy"]
        inputs["proxy"] = f"{given['proxy']}/model.safetensors"
    lm = LmEvalSettings.from_dllm(d)
    device = config["device"]
    args = row_model_args(name, row, d, inputs, device, WorkflowSettings.from_config(config).job_precision)
    args.pop("device")
    args = {**args, "seed": args.get("seed", lm.seed)}
    row_dir = str(Path(*Path(out).parts[1:]))
    return shlex.split(
        lmeval_command(
            args,
            d["tasks"]["names"],
            include,
            row_dir,
            batch_size=lm.batch_size,
            limit=lm.limit,
            seed=lm.seed,
            allow_code_execution=lm.allow_code_execution,
            device=device,
        )
    )


def documented_command(text: str, marker: str) -> list[str]:
    """The argv of the one ```bash block of ``text`` that contains ``marker`` (continued lines joined)."""
    import re

    blocks = [b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if marker in b]
    assert len(blocks) == 1, f"{len(blocks)} bash blocks contain {marker!r}"
    return shlex.split(blocks[0].replace("\\\n", " "))
