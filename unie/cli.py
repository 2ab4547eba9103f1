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
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _registries() -> dict:
    import unie  # noqa: F401  (fills the registries)
    import unie.eval.genppl  # noqa: F401

    from .core.registry import DLLM_SAMPLERS, ENERGIES, EVALUATORS, METHODS, SAMPLERS
    from .dllm.backbone import DecodeOptions

    def defaults(cls):
        return {f.name: f.default for f in dataclasses.fields(cls)}

    return {
        "methods": {n: {"options": defaults(c.Options)} for n, c in sorted(METHODS.items())},
        "samplers": {n: {"options": defaults(e.options_cls), "roles": {r: list(k) for r, k in e.roles.items()},
                         "fixed_steps": e.fixed_steps} for n, e in sorted(SAMPLERS.items())},
        "dllm_samplers": {n: {"options": defaults(e.options_cls), "needs_proxy": e.needs_proxy}
                          for n, e in sorted(DLLM_SAMPLERS.items())},
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
        print(f"DLLM samplers (each also reads the decoding options {decoding}):" if kind == "dllm_samplers"
              else f"{kind}:")
        for name, rec in reg[kind].items():
            opts = ", ".join(f"{k}={v!r}" for k, v in rec["options"].items()) or "no options"
            roles = f"  roles {rec['roles']}" if "roles" in rec else ""
            proxy = "  (needs proxy=)" if rec.get("needs_proxy") else ""
            print(f"  {name}: {opts}{roles}{proxy}")
    print(f"energies: {', '.join(reg['energies'])}")
    print(f"evaluators: {', '.join(reg['evaluators'])}")
    return 0


def cmd_check_config(args) -> int:
    import yaml
    from snakemake.utils import validate

    from .core.config import ConfigError
    from .pipeline.checks import check_config, expand_config

    config = yaml.safe_load(Path(args.config).read_text())
    try:
        validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
        expand_config(config)
        check_config(config)
    except (ConfigError, Exception) as e:  # snakemake's WorkflowError for schema violations
        print(f"{args.config}: {e}", file=sys.stderr)
        return 1
    print(f"{args.config}: ok ({len(config['models'])} models, {len(config['sampling']['runs'])} sampling runs)")
    return 0


def _parse_value(v: str):
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        return v


def cmd_sample(args) -> int:
    import torch

    import unie  # noqa: F401

    from .core.registry import SAMPLERS
    from .data.tokenizer import load_tokenizer
    from .pipeline.models import load_wrapped
    from .pipeline.sample import oracle_models

    entry = SAMPLERS[args.sampler]
    options = entry.options({k: _parse_value(v) for k, v in (o.split("=", 1) for o in args.option)}, where="--option")
    tok = load_tokenizer(args.tokenizer)
    models = {role: load_wrapped(path, tok, args.device) for role, path in (m.split("=", 1) for m in args.model)}
    models.update(oracle_models(options, tok, args.domain))
    torch.set_num_threads(args.threads)
    x, stats = entry(models, args.n, args.length, args.steps, torch.Generator(device=args.device).manual_seed(args.seed),
                     options, batch_size=args.n, device=args.device)
    for row in x.tolist():
        print(tok.decode(row))
    print(json.dumps({"sampler": args.sampler, "options": dataclasses.asdict(options), **stats}), file=sys.stderr)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="unie", description="Uni-E for masked diffusion language models: the command line.",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Regenerate the paper's tables and figures with `snakemake --cores 2` (README).")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("list", help="registered methods, samplers (options, roles), DLLM samplers (options), energies, "
                                    "evaluators")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_list)
    s = sub.add_parser("check-config", help="validate a workflow config without running anything")
    s.add_argument("config")
    s.set_defaults(fn=cmd_check_config)
    s = sub.add_parser("sample", help="sample from trained checkpoints (results/models/<name>) and print the text")
    s.add_argument("--sampler", required=True, help="a registered sampler (unie list)")
    s.add_argument("--model", action="append", default=[], metavar="ROLE=DIR",
                   help="a checkpoint directory per model role, e.g. dlm=results/models/mdlm")
    s.add_argument("--tokenizer", default="resources/tokenizer")
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
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
