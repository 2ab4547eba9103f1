"""Run Snakemake in this process and count the work its start-up does (tests/test_startup.py): the configuration's
resolutions and checks, whether the registries were filled, the files hashed and the modules imported, written as
JSON to ``$UNIE_PROBE_OUT`` when the process ends.  Usage: ``python tests/startup_probe.py SNAKEMAKE-ARGS...``."""

import atexit
import json
import os
import sys

COUNTS = {"resolve_config": 0, "workflow_config": 0, "run_directory": 0, "rule_facts": 0, "files_hashed": 0}


def _counted(module, name, counter):
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        COUNTS[counter] += 1
        return original(*args, **kwargs)

    setattr(module, name, wrapper)
    return wrapper


def _write():
    from unie.config.cache import STATS
    from unie.core import registry

    COUNTS["cache"] = dict(STATS)
    COUNTS["registries"] = registry._FILL["state"]  # empty: no registry was read
    COUNTS["modules"] = sorted(m for m in sys.modules if "." not in m)
    with open(os.environ["UNIE_PROBE_OUT"], "w") as f:
        json.dump(COUNTS, f)


import unie.config.cache as cache  # noqa: E402  (imports no torch: the registries fill when first read)
import unie.config.profile as profile  # noqa: E402
import unie.config.rundir as rundir  # noqa: E402
import unie.config.validate as validate  # noqa: E402
import unie.core.integrity as integrity  # noqa: E402

rundir.resolve_config = validate.resolve_config = _counted(profile, "resolve_config", "resolve_config")
_counted(validate, "workflow_config", "workflow_config")
_counted(rundir, "run_directory", "run_directory")
_counted(cache, "rule_facts", "rule_facts")
_counted(integrity, "file_sha256", "files_hashed")
atexit.register(_write)

from snakemake.cli import main  # noqa: E402

sys.argv = ["snakemake", *sys.argv[1:]]
main()
