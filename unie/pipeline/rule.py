"""The context every rule's script runs in (``workflow/scripts/*.py``)."""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager


@contextmanager
def job(snakemake, name: str | None = None):
    """Context for a rule's script: logs (stdout, stderr, logging) go to ``snakemake.log[0]``;
    torch uses the rule's threads.  Yields a ``log(str)`` function."""
    import torch

    torch.set_num_threads(max(1, int(snakemake.threads)))
    logpath = snakemake.log[0] if len(snakemake.log) else None
    stream = open(logpath, "w", buffering=1) if logpath else sys.stderr
    old_out, old_err = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = stream
    logging.basicConfig(stream=stream, level=logging.INFO, format="%(asctime)s %(message)s", force=True)
    log = logging.getLogger(name or "unie").info
    try:
        yield log
    except BaseException:
        import traceback

        traceback.print_exc(file=stream)
        raise
    finally:
        sys.stdout, sys.stderr = old_out, old_err
        if logpath:
            stream.close()


def write_json(obj, path) -> None:
    """Write ``obj`` as JSON atomically (never a half-written result file)."""
    import json
    import os
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)
