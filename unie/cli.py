"""``unie``: the command line.

* ``unie list``: what is registered (methods, samplers and DLLM samplers with their options and defaults, energies,
  evaluators).
* ``unie check-config FILE``: validate a workflow config (schema + cross-checks) without running anything.
* ``unie sample``: draw samples from trained checkpoints with any registered sampler and print them.

The workflow itself is run with ``snakemake`` (README).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _registries() -> dict:
    from .core.registry import DLLM_SAMPLERS, ENERGIES, EVALUATORS, METHODS, SAMPLERS
    from .dllm.backbone import DecodeOptions

    def defaults(cls):
        return {f.name: f.default for f in dataclasses.fields(cls)}

    return {
        "methods": {n: {"options": defaults(c.Options)} for n, c in sorted(METHODS.items())},
        "samplers": {
            n: {
                "options": defaults(e.options_cls),
                "roles": {r: list(k) for r, k in e.roles.items()},
                "fixed_steps": e.fixed_steps,
            }
            for n, e in sorted(SAMPLERS.items())
        },
        "dllm_samplers": {
            n: {"options": defaults(e.options_cls), "needs_proxy": e.needs_proxy}
            for n, e in sorted(DLLM_SAMPLERS.items())
        },
        "dllm_decoding": defaults(DecodeOptions),  # the options every DLLM sampler reads besides its own
        "energies": sorted(ENERGIES),
        "evaluators": sorted(EVALUATORS),
    }


def cmd_list(args) -> int:
    reg = _registries()
    if args.json:
        print(json.dumps(reg, indent=2, default=str))
        return 0
    decoding = ", ".join(f"{k}={v!r}" for k, v in reg["dllm_decoding"].items())
    for kind in ("methods", "samplers", "dllm_samplers"):
        print(
            f"DLLM samplers (each also reads the decoding options {decoding}):"
            if kind == "dllm_samplers"
            else f"{kind}:"
        )
        for name, rec in reg[kind].items():
            opts = ", ".join(f"{k}={v!r}" for k, v in rec["options"].items()) or "no options"
            roles = f"  roles {rec['roles']}" if "roles" in rec else ""
            proxy = "  (needs proxy=)" if rec.get("needs_proxy") else ""
            print(f"  {name}: {opts}{roles}{proxy}")
    print(f"energies: {', '.join(reg['energies'])}")
    print(f"evaluators: {', '.join(reg['evaluators'])}")
    return 0


def cmd_check_config(args) -> int:
    """Validate a profile (the grid of config/experiments.yaml under the profile file(s), as the Snakefile
    resolves them: unie.config.validate.workflow_config) without running anything; ``--resolved`` prints the
    effective configuration as YAML.  An error is one line naming the key, its file and a did-you-mean
    (``--verbose``: the schema's full report too)."""
    import yaml

    from .config.validate import error_text, workflow_config
    from .core.options import ConfigError

    files = [*(args.config or []), *(args.configfile or [])]
    name = ", ".join(files) or "config/config.yaml"

    def show(config):  # the configuration as written (before the generated figure runs are added)
        print(yaml.safe_dump(config, sort_keys=False, allow_unicode=True, width=120), end="")

    overrides = {}
    for item in args.overrides:  # as snakemake's --config: KEY=VALUE, the value read as YAML
        key, eq, value = item.partition("=")
        if not eq or not key:
            print(f"unie: error: --config {item}: expected KEY=VALUE (e.g. seed=1)", file=sys.stderr)
            return 1
        try:
            overrides[key] = yaml.safe_load(value)
        except yaml.YAMLError as e:
            print(f"unie: error: --config {item}: the value is not YAML ({str(e).splitlines()[0]})", file=sys.stderr)
            return 1
    try:
        config = workflow_config(files or None, overrides or None, show=show if args.resolved else None)
    except ConfigError as e:
        print(error_text(e, verbose=args.verbose), file=sys.stderr)
        return 1
    from .config.rundir import run_directory

    summary = (
        f"{name}{' --config ' + ' '.join(args.overrides) if args.overrides else ''}: ok "
        f"({len(config['models'])} models, {len(config['sampling']['runs'])} sampling runs; "
        f"its run directory: {run_directory(files or None, overrides or None)}/)"
    )
    print(("# " if args.resolved else "") + summary, file=sys.stderr if args.resolved else sys.stdout)
    return 0


def _parse_value(v: str):
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        return v


def _check_role(entry, role: str, path: str) -> None:
    """A checkpoint given for a sampler role must be of a kind the role takes (an AR model is no denoiser)."""
    from .core.options import ConfigError, from_dict
    from .core.registry import METHODS
    from .models.checkpoint import CheckpointError, read_meta

    if role not in entry.roles:
        raise ConfigError(
            f"--model {role}={path}: sampler {entry.name!r} has no model role {role!r}; its roles: "
            + ", ".join(f"{r} ({'/'.join(k)})" for r, k in entry.roles.items())
        )
    meta = read_meta(path)
    cls = METHODS[meta["method"]]
    kind = cls.kind(from_dict(cls.Options, meta.get("extra", {}).get("options", {}), f"checkpoint {path} options"))
    if kind not in entry.roles[role]:
        raise CheckpointError(
            f"--model {role}={path}: this checkpoint is of kind {kind!r} (trained as {meta['method']!r}), but "
            f"sampler {entry.name!r}'s role {role!r} takes {'/'.join(entry.roles[role])} models"
        )


def cmd_sample(args) -> int:
    import torch

    import unie  # noqa: F401

    from .core.options import ConfigError
    from .core.registry import SAMPLERS
    from .data.tokenizer import load_tokenizer
    from .pipeline.model_files import load_wrapped, run_tokenizer
    from .pipeline.sample import oracle_models

    entry = SAMPLERS[args.sampler]
    options = entry.options({k: _parse_value(v) for k, v in (o.split("=", 1) for o in args.option)}, where="--option")
    roles = dict(m.split("=", 1) for m in args.model)
    if args.tokenizer is None and not roles:
        raise ConfigError("--tokenizer: give the tokenizer directory, or a --model whose run's tokenizer is used")
    tok = load_tokenizer(args.tokenizer or run_tokenizer(next(iter(roles.values()))))
    for role, path in roles.items():
        _check_role(entry, role, path)
    models = {role: load_wrapped(path, tok, args.device) for role, path in roles.items()}
    models.update(oracle_models(options, tok, args.domain))
    torch.set_num_threads(args.threads)
    x, stats = entry(
        models,
        args.n,
        args.length,
        args.steps,
        torch.Generator(device=args.device).manual_seed(args.seed),
        options,
        batch_size=args.n,
        device=args.device,
    )
    for row in x.tolist():
        print(tok.decode(row))
    print(json.dumps({"sampler": args.sampler, "options": dataclasses.asdict(options), **stats}), file=sys.stderr)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="unie",
        description="Uni-E for masked diffusion language models: the command line.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Regenerate the paper's tables and figures with `snakemake --cores 2` (README).",
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser(
        "list", help="registered methods, samplers (options, roles), DLLM samplers (options), energies, evaluators"
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_list)
    s = sub.add_parser(
        "check-config",
        allow_abbrev=False,
        help="validate a workflow profile without running anything (--resolved: print it)",
    )
    s.add_argument(
        "config", nargs="*", help="profile file(s) over config/experiments.yaml (default config/config.yaml)"
    )
    s.add_argument("--configfile", action="append", help="the same as a positional file (as snakemake spells it)")
    s.add_argument(
        "--config",
        dest="overrides",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="overrides as snakemake's --config reads them (the value as YAML: seed=1, 'dllm={seed: 2}')",
    )
    s.add_argument("--resolved", action="store_true", help="print the effective configuration as YAML")
    s.add_argument("-v", "--verbose", action="store_true", help="on a schema violation, the schema's full report too")
    s.set_defaults(fn=cmd_check_config)
    s = sub.add_parser(
        "sample", help="sample from trained checkpoints (runs/<run>/results/models/<name>) and print the text"
    )
    s.add_argument("--sampler", required=True, help="a registered sampler (unie list)")
    s.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="ROLE=DIR",
        help="a checkpoint directory per model role, e.g. dlm=runs/toy/results/models/mdlm",
    )
    s.add_argument(
        "--tokenizer",
        default=None,
        help="the tokenizer directory (default: the first --model's run's, runs/<run>/resources/tokenizer)",
    )
    s.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a sampler option")
    s.add_argument("-n", type=int, default=4)
    s.add_argument("--length", type=int, default=32)
    s.add_argument("--steps", type=int, default=32)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--device", default="cpu")
    s.add_argument("--domain", default="owt", help="toy-world domain of the exact proxy (ar_context=exact)")
    s.add_argument("--threads", type=int, default=1)
    s.set_defaults(fn=cmd_sample)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        print("unie: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # an operator's mistake is one line, not a traceback (UNIE_TRACEBACK=1: the traceback)
        if os.environ.get("UNIE_TRACEBACK"):
            raise
        print(f"unie: error: {_one_line(e)}", file=sys.stderr)
        return 1


def _one_line(e: BaseException) -> str:
    """The message of an exception as one line: what went wrong, with the file it names and the fix."""
    from .core.integrity import DamagedFileError
    from .core.options import ConfigError
    from .models.checkpoint import CheckpointError

    if isinstance(e, ModuleNotFoundError) and e.name:
        top = e.name.split(".")[0]
        extra = {"snakemake": "workflow", "lm_eval": "dllm", "nbclient": "notebook", "nbformat": "notebook"}.get(top)
        hint = f" (pip install 'unie[{extra}]')" if extra else ""
        msg = f"this command needs the Python package {top!r}{hint}"
    elif isinstance(e, (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)) and e.filename:
        msg = f"{e.filename}: {e.strerror}"
    elif isinstance(e, KeyError) and len(e.args) == 1 and isinstance(e.args[0], str):
        msg = e.args[0]  # a registry's "unknown sampler 'x'; known: ...", not its repr
    elif isinstance(e, (ConfigError, CheckpointError, DamagedFileError, ValueError, OSError)):
        msg = str(e)
    else:
        msg = f"{type(e).__name__}: {e}"
    return " ".join(msg.split()) or type(e).__name__


if __name__ == "__main__":
    raise SystemExit(main())
