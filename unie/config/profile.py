"""One configuration from two kinds of file: the experiment grid (*what* is run) and a profile (*how big*).

``config/experiments.yaml`` holds the grid once: the rows of every table, the sampling runs, the likelihood
estimators, the figures and case studies, the bench, the DLLM rows and sweeps.  A profile
(``config/config.yaml``, ``config/smoke.yaml``, ``config/paper.yaml``) is an overlay of sizes, steps, resources,
device and data.  :func:`resolve_config` merges grid <- profile file(s) <- ``--config`` overrides; it is the only
place that does, used by the Snakefile, ``unie check-config`` and the tests.

What a profile may write is listed here, once:

* :data:`PROFILE_KEYS`: settings a profile sets (merged key by key over the grid).  A ``*`` stands for a key the
  grid has (a profile sets the values of the grid's entries, it adds none), e.g. ``dllm.checkpoints.*``: which
  checkpoint each DLLM model name of the grid's rows, sweeps and map stands for (resolved into them by
  :func:`unie.dllm.rows.resolve_checkpoints`, so no profile retypes a row);
* :data:`PROFILE_ADDITIONS`: grid mappings a profile may add keys to, never change a key the grid sets, each with
  its reason;
* :data:`PROFILE_CHOICES`: parts of the grid a profile may replace as a whole, each with its reason;
* :data:`DEFINITIONS`: the grid's catalogs of what each model is (method, parent, options); a profile names the
  models it builds, in its order, with their sizes or sources, and adds no key a definition sets;
* ``exclude:``: grid entries a profile does not run (keys of a mapping, items of a list), e.g. the rows that
  need the toy world's exact distribution on real data.  It may only remove, never add or change.

Any other key of a profile is a change to the grid and is refused with an error that names it.  A profile file may
be written over another (``base: smoke.yaml``, less what it ``drop:``s): :func:`load_profile`.  The two toy profiles
are both written over ``config/toy-world.yaml``, the toy world's own settings (not a profile: no sizes).
"""

from __future__ import annotations

import copy
import fnmatch
import os
from pathlib import Path

import yaml

from ..core.options import ConfigError
from .schema import child_schema, known_keys, unknown_key_message
from .seeds import fill_seeds

REPO = Path(__file__).resolve().parents[2]
# libyaml's safe loader when PyYAML has it (the same documents, ~10x faster than the pure-Python one: a run reads
# its config files several times before it plans), else the pure-Python one
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
GRID = REPO / "config" / "experiments.yaml"
DEFAULT_PROFILE = REPO / "config" / "config.yaml"

# Settings of a profile: dotted paths, `*` stands for one key.  A path covers everything below it.
PROFILE_KEYS: tuple[str, ...] = (
    # where and how it runs
    "profile",
    "seed",
    "device",
    "precision",
    "threads",
    "resources",
    "slurm_partitions",
    "max_runtime",
    "cluster",
    # data, tokenizer and models (sizes, training schedules, recipes: models are built per profile)
    "data",
    "tokenizer",
    "hf_models",
    "models",
    # sizes and step counts of the evaluations
    "ppl",
    "sampling.n_samples",
    "sampling.batch_size",
    "sampling.steps",
    "sampling.job",
    "genppl.eos_rule",  # how Gen PPL scores <eos>: a property of the data (stationary toy windows vs documents)
    "figures.*.evaluator",  # the oracle a profile has (exact pi on the toy world, an HF LM on real data)
    "figures.*.n_samples",
    "figures.fig3_tradeoff.timing",
    "bench.batch_size",
    "bench.steps",
    "bench.paper_scale",
    "bench.repeats",
    "bench.train_batch",
    "bench.train_steps",
    # the DLLM half: sizes, tokenizers, trained models, lm-eval settings
    "dllm.seed",
    "dllm.pretrain_texts",
    "dllm.bpe_vocab_size",
    "dllm.decoding",
    "dllm.sft_length",
    "dllm.batch_size",
    "dllm.eval_job",
    "dllm.include_default_tasks",
    "dllm.limit",
    "dllm.models",
    "dllm.timing",
    "dllm.tasks.n_train",
    "dllm.tasks.n_test",
    "dllm.tasks.seed",
    "dllm.tasks.source",
    "dllm.tasks.allow_code_execution",
    "dllm.tasks.local",
    "dllm.tasks.metrics",
    "dllm.tasks.columns",
    # which checkpoint (model, loading keys, label) each DLLM model name of the rows, sweeps and map stands for
    "dllm.checkpoints.*",
    # the sweeps' benchmark and the values of a curve's varied option (they fit the profile's decoding geometry)
    "dllm.sweeps.task",
    "dllm.sweeps.sets.*.*.vary.*",
    "dllm.map.items",
    "dllm.map.whole",
    "dllm.map.limit",
    "dllm.map.cap",  # test items per task of the map (its own, explored whole, read), and the size its trees are cut at
)

# Grid mappings a profile may add keys to (a key the grid sets is refused, not changed), and why.
PROFILE_ADDITIONS: dict[str, str] = {
    "dllm.rows.*.options": "a row's options that only the profile's checkpoint takes (e.g. DAWN's attention "
    "thresholds for LLaDA-8B-Instruct in the paper profile)",
}

# Grid catalogs of definitions: what each model is (its method, the model it starts from, its options; a DLLM-half
# model also its tokenizer and training data), written once for every profile.  A profile names the models it builds,
# in its order, each with its sizes (arch, train) or its source: each named model is its grid definition with the
# profile's keys added (a key the definition sets is refused, not changed), and a definition no profile file names is
# not built (the paper profile trains no `ar_long` and no DLLM-half model).
DEFINITIONS: tuple[str, ...] = ("models", "dllm.models")

# Grid parts a profile may replace as a whole (the grid's value is dropped, not merged), and why.
PROFILE_CHOICES: dict[str, str] = {
    "genppl.evaluators": "the Gen PPL oracles depend on the world: exact pi and trained ARs on the toy world, "
    "Hugging Face LMs on real data",
    "dllm.tasks.names": "the benchmarks depend on the world: toy tasks or lm-eval's built-in ones",
}


def load_yaml(path) -> dict:
    try:
        data = yaml.load(Path(path).read_text(), Loader=SAFE_LOADER)
    except yaml.YAMLError as e:  # one line: the file, the line, the problem
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', None) or e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def profile_chain(path, _seen: tuple = ()) -> list[tuple[Path, dict]]:
    """A profile file and the base profiles it is written over, base first: ``[(file, its document), ...]``.

    A profile may start from another one: ``base: smoke.yaml`` (a path relative to the file's directory, else a
    file of the repository's ``config/``, so a copy of a profile or an overlay of one's own elsewhere still finds
    it) takes every setting of that profile (its own base's too) and this file's settings over them, mapping by
    mapping (a list or a value is taken whole from this file; its ``exclude:`` adds to the base's; a models catalog
    of :data:`DEFINITIONS` it writes lists its models first, in its order).  ``drop:`` removes settings of the base
    this profile does not have, in ``exclude:``'s form (a list of keys, or key -> ``true`` / a nested drop; every
    entry named must exist in the base).  The documents are returned as written, ``base`` and ``drop`` included:
    :func:`load_profile` merges them."""
    path = Path(path)
    where = display_path(path)
    if not path.is_file():
        raise ConfigError(f"{where}: {'not a file' if path.exists() else 'no such config file'}{_profiles_hint()}")
    doc = load_yaml(path)
    base, drop = doc.get("base"), doc.get("drop")
    if base is None:
        if drop is not None:
            raise ConfigError(
                f"{where}: config key 'drop': drops settings of a base profile, but this file has no `base:`"
            )
        return [(path, doc)]
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{where}: config key 'base': expected a profile file name (e.g. smoke.yaml), got {base!r}")
    base_path = path.parent / base
    shipped = REPO / "config" / base
    if not base_path.is_file() and not Path(base).is_absolute() and shipped.is_file():
        base_path = shipped  # a profile of config/ named from a file elsewhere
    if not base_path.is_file():
        also = "" if base_path.parent.resolve() == shipped.parent.resolve() else f" (nor {display_path(shipped)})"
        raise ConfigError(f"{where}: config key 'base': no profile file {display_path(base_path)}{also}")
    chain = (*_seen, path.resolve())
    if base_path.resolve() in chain:
        cycle = " -> ".join(display_path(p) for p in (*chain, base_path.resolve()))
        raise ConfigError(f"{where}: config key 'base': the profiles are each other's base ({cycle})")
    return [*profile_chain(base_path, chain), (path, doc)]


def profile_files_by_name(config_dir=None) -> dict[str, Path]:
    """``profile name -> its file`` for every profile file in ``config/`` (a file with a top-level ``profile``)."""
    out = {}
    for f in sorted(Path(config_dir or REPO / "config").glob("*.yaml")):
        try:
            data = load_yaml(f)
        except Exception:  # noqa: BLE001 - not a profile (or not valid YAML): the run's own check reports it
            continue
        name = data.get("profile") if isinstance(data, dict) else None
        if isinstance(name, str) and name not in out:
            out[name] = f
    return out


def _profiles_hint() -> str:
    """`` (the profiles: config/config.yaml, ...)``: the profile files a missing one may have meant."""
    files = sorted(display_path(f) for f in profile_files_by_name().values())
    return f" (the profiles: {', '.join(files)})" if files else ""


def load_profile(path) -> dict:
    """A profile file as one overlay of the grid: its base profiles' settings (:func:`profile_chain`) with its own
    over them, less what it drops.  The models a file names (a catalog of :data:`DEFINITIONS`) come first, in its
    order, then its base's others: a profile names the models it builds in its order, a based one too (an entry
    may be ``{}``: the base's model as it is, at this place)."""
    chain = profile_chain(path)
    out: dict = {}
    for f, doc in chain:
        doc = dict(doc)
        doc.pop("base", None)
        drop = doc.pop("drop", None)
        if drop is not None:
            apply_exclude(out, drop, display_path(f), key="drop", of="the base profile")
        exclude = _exclude_union(out.pop("exclude", None), doc.pop("exclude", None))
        out = merge(out, doc)
        for dotted in DEFINITIONS:  # the file's models first, in its order
            path_ = tuple(dotted.split("."))
            written, built = _get(doc, path_), _get(out, path_)
            if isinstance(written, dict) and isinstance(built, dict):
                _get(out, path_[:-1])[path_[-1]] = {**{k: built[k] for k in written}, **built}
        if exclude is not None:
            out["exclude"] = exclude
    return out


def _exclude_union(base, overlay):
    """A based profile's ``exclude:`` over its base's: it runs nothing its base excludes (a list's items are added,
    mappings merged; ``true`` drops the whole entry)."""
    if overlay is None or base is None:
        return copy.deepcopy(base if overlay is None else overlay)
    if isinstance(base, list) and isinstance(overlay, list):
        return [*base, *(x for x in overlay if x not in base)]
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = copy.deepcopy(base)
        for key, value in overlay.items():
            out[key] = _exclude_union(out.get(key), value)
        return out
    return copy.deepcopy(overlay)


def display_path(path) -> str:
    """A config file as the user would name it: relative to the working directory when below it."""
    p = str(path)
    try:
        rel = os.path.relpath(p)
    except ValueError:
        return p
    return p if rel.startswith("..") else rel


def _matching(path: tuple[str, ...], patterns) -> str | None:
    """The first dotted pattern that ``path`` or one of its prefixes matches, else ``None``."""
    for pattern in patterns:
        parts = pattern.split(".")
        if len(parts) <= len(path) and all(fnmatch.fnmatchcase(str(k), p) for k, p in zip(path, parts)):
            return pattern
    return None


def _matches(path: tuple[str, ...], patterns) -> bool:
    """Whether ``path`` or one of its prefixes matches a dotted pattern."""
    return _matching(path, patterns) is not None


def _check_wildcards(path: tuple, pattern: str, grid: dict, where: str) -> None:
    """Each ``*`` of ``pattern`` (matched by ``path``) names an entry the grid has: a profile sets the values of
    the grid's entries (a checkpoint of a model name the grid uses, a curve's varied option), it adds none."""
    node = grid
    for i, part in enumerate(pattern.split(".")):
        key = path[i]
        if part == "*" and not (isinstance(node, dict) and key in node):
            known = ", ".join(map(str, node)) if isinstance(node, dict) else "none"
            raise ConfigError(
                f"{where}: config key '{_dotted(path[: i + 1])}': {key!r} is not an entry of the grid "
                f"({GRID.name}; known: {known})"
            )
        node = node.get(key) if isinstance(node, dict) else None


def _check_addition(path: tuple, value, grid_node, where: str) -> None:
    """A :data:`PROFILE_ADDITIONS` mapping: keys the grid's mapping ``grid_node`` does not set."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: config key '{_dotted(path)}': expected a mapping of the keys to add")
    for key in value:
        if isinstance(grid_node, dict) and key in grid_node:
            raise ConfigError(
                f"{where}: config key '{_dotted((*path, key))}' is set by the experiment grid "
                f"({GRID.name}) to {grid_node[key]!r}; a profile adds keys here, it changes none"
            )


def _dotted(path) -> str:
    return ".".join(str(k) for k in path)


def _get(tree, path: tuple):
    """The value at ``path`` of nested mappings, else ``None``."""
    node = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _sets(tree, path: tuple) -> bool:
    """Whether ``tree`` sets ``path``: it has the key, or a value (not a mapping) above it that covers it."""
    node = tree
    for key in path:
        if not isinstance(node, dict):
            return True
        if key not in node:
            return False
        node = node[key]
    return True


def leaves(node, path: tuple = ()) -> dict[tuple, object]:
    """``{path: value}`` of a nested mapping's leaves (a list, a scalar or an empty mapping is a leaf)."""
    if isinstance(node, dict) and node:
        out = {}
        for k, v in node.items():
            out.update(leaves(v, (*path, k)))
        return out
    return {path: node}


def pop_definitions(grid: dict) -> dict[str, dict]:
    """The grid's :data:`DEFINITIONS` catalogs, removed from ``grid`` (in place): ``{dotted path: {name: entry}}``."""
    out = {}
    for dotted in DEFINITIONS:
        *parents, leaf = dotted.split(".")
        node = _get(grid, tuple(parents))
        if isinstance(node, dict) and isinstance(node.get(leaf), dict):
            out[dotted] = node.pop(leaf)
    return out


def check_definitions(overlay: dict, definitions: dict, where: str = "profile") -> None:
    """Refuse a key of a profile's model that its grid definition (:data:`DEFINITIONS`) sets: what a model is is
    written once, in the grid; a profile adds its sizes (arch, train) or its source."""
    for dotted, defs in definitions.items():
        entries = _get(overlay, tuple(dotted.split(".")))
        if not isinstance(entries, dict):
            continue
        for name, entry in entries.items():
            definition = defs.get(name)
            if not isinstance(definition, dict) or not isinstance(entry, dict):
                continue
            for path in leaves(entry):
                if path and _sets(definition, path):
                    raise ConfigError(
                        f"{where}: config key '{dotted}.{name}.{_dotted(path)}' is set by the model's definition in "
                        f"the experiment grid ({GRID.name}: {definition!r}); a profile gives a model's sizes (arch, "
                        f"train) or its source and adds keys to its definition, it changes none"
                    )


def apply_definitions(config: dict, definitions: dict, mixed: set | None = None) -> None:
    """Each model a profile names (:data:`DEFINITIONS`) as its grid definition with the profile's keys added, in the
    profile's order, in place; a definition the profile does not name is not built."""
    for dotted, defs in definitions.items():
        path = tuple(dotted.split("."))
        built = _get(config, path)
        if not isinstance(built, dict):
            continue
        out = {}
        for name, entry in built.items():
            definition = defs.get(name)
            if isinstance(definition, dict) and isinstance(entry, dict):
                out[name] = merge(copy.deepcopy(definition), entry, path=(*path, name), mixed=mixed)
            else:
                out[name] = entry
        _get(config, path[:-1])[path[-1]] = out


def check_overlay(overlay: dict, grid: dict, where: str = "profile") -> None:
    """Refuse any key of ``overlay`` that is neither a profile setting nor a profile choice (it would change the
    grid); the error names the key.  A key that neither the grid nor the schema knows is a typo, reported as one
    with the closest known key (``config key 'sampling.stpes': unknown key; did you mean 'steps'?``)."""

    schema = load_yaml(SCHEMA)

    def walk(node, path, grid_node, schema_node):
        for key, value in node.items():
            p = (*path, key)
            pattern = _matching(p, PROFILE_KEYS)
            if pattern is not None:
                _check_wildcards(p, pattern, grid, where)
                continue
            if _matches(p, PROFILE_CHOICES):
                continue
            pattern = _matching(p, PROFILE_ADDITIONS)
            if pattern is not None and len(pattern.split(".")) == len(p):
                _check_wildcards(p, pattern, grid, where)
                _check_addition(p, value, grid_node.get(key) if isinstance(grid_node, dict) else None, where)
                continue
            in_grid = isinstance(grid_node, dict) and key in grid_node
            sub = child_schema(schema_node, key, schema)
            if not in_grid and sub is None:
                raise ConfigError(unknown_key_message(where, p, known_keys(schema_node, schema)))
            if isinstance(value, dict) and value:
                walk(value, p, grid_node[key] if in_grid else None, sub)
                continue
            raise ConfigError(
                f"{where}: config key '{_dotted(p)}' is part of the experiment grid ({GRID.name}), which a profile "
                f"does not change; a profile sets sizes, steps, resources, device, data and checkpoints "
                f"(unie.config.profile.PROFILE_KEYS), adds to {', '.join(PROFILE_ADDITIONS)}, replaces "
                f"{', '.join(PROFILE_CHOICES)} as a whole, or drops grid entries with `exclude:`"
            )

    walk({k: v for k, v in overlay.items() if k != "exclude"}, (), grid, schema)


def apply_exclude(
    config: dict, exclude, where: str = "profile", path: tuple = (), key: str = "exclude", of: str = "the grid"
) -> None:
    """Drop grid entries in place.  At a mapping, ``exclude`` is a list of keys to drop or a mapping of
    key -> ``true`` (drop it) / a nested exclude; at a list, it is the list of items to drop.  Every entry named
    must exist (so a renamed grid entry cannot be silently kept).  ``key`` and ``of`` name the setting and what it
    drops from in the errors (a based profile's ``drop:`` takes entries from ``the base profile``)."""
    at = f"{where}: {key}.{_dotted(path)}" if path else f"{where}: {key}"
    if isinstance(config, list):
        if not isinstance(exclude, list):
            raise ConfigError(f"{at}: the value in {of} is a list; give the items to drop as a list")
        for item in exclude:
            if item not in config:
                raise ConfigError(f"{at}: {item!r} is not in {of}'s list {config}")
        config[:] = [v for v in config if v not in exclude]
        return
    if not isinstance(config, dict):
        raise ConfigError(f"{at}: the value {config!r} in {of} has no entries to drop")
    entries = {k: True for k in exclude} if isinstance(exclude, list) else exclude
    if not isinstance(entries, dict):
        raise ConfigError(f"{at}: expected a list of keys or a mapping, got {exclude!r}")
    for name, sub in entries.items():
        if name not in config:
            raise ConfigError(f"{at}: {name!r} is not in {of} (known: {', '.join(map(str, config))})")
        if sub is True:
            del config[name]
        else:
            apply_exclude(config[name], sub, where, (*path, name), key, of)


def merge(base: dict, overlay: dict, replace=(), path: tuple = (), mixed: set | None = None) -> dict:
    """``overlay`` merged into a copy of ``base``, mapping by mapping; lists, scalars and the paths matched by
    ``replace`` are taken whole from ``overlay``.  ``mixed`` collects the paths of the mappings that got keys
    from both."""
    out = dict(base)
    if mixed is not None and set(overlay) - set(base) and set(base):
        mixed.add(path)
    for key, value in overlay.items():
        p = (*path, key)
        if isinstance(value, dict) and isinstance(out.get(key), dict) and not _matches(p, replace):
            out[key] = merge(out[key], value, replace, p, mixed)
        else:
            out[key] = copy.deepcopy(value)
    return out


def resolve_config(profile_files=None, cli_overrides: dict | None = None, grid=None) -> dict:
    """The effective configuration: the grid (``config/experiments.yaml``), then each profile file in order
    (``config/config.yaml`` when none is given; a later file wins), then ``cli_overrides`` (Snakemake's
    ``--config``, nested values read as YAML), not yet validated against the schema.

    Each profile file is checked on its own: only :data:`PROFILE_KEYS`, :data:`PROFILE_ADDITIONS` and
    :data:`PROFILE_CHOICES`, plus ``exclude:`` (applied after the merge).  The models the profile files name are
    their grid definitions (:data:`DEFINITIONS`) with the profiles' sizes or sources added, in the profiles' order.
    ``--config`` may override any key.  Last,
    the DLLM half's model names become the profile's checkpoints (:func:`unie.dllm.rows.resolve_checkpoints`: the
    rows, sweeps and map as they run; ``dllm.checkpoints`` is resolved away), and every sub-seed no input sets takes
    the top-level ``seed`` (:func:`unie.config.seeds.fill_seeds`)."""
    from ..dllm.rows import resolve_checkpoints

    grid_path = Path(grid) if grid is not None else GRID
    config = copy.deepcopy(load_yaml(grid_path))
    definitions = pop_definitions(config)  # what each model is: filled into the models the profile names, below
    files = [Path(f) for f in (profile_files or [])] or [DEFAULT_PROFILE]
    mixed: set = set()  # mappings with keys from the grid and from a profile: put in the schema's order
    for f in files:
        overlay = load_profile(f)  # with its base profile's settings (`base:`), less what it drops (`drop:`)
        where = display_path(f)
        check_overlay(overlay, config, where)
        check_definitions(overlay, definitions, where)
        exclude = overlay.get("exclude")
        config = merge(
            config, {k: v for k, v in overlay.items() if k != "exclude"}, tuple(PROFILE_CHOICES), mixed=mixed
        )
        if exclude:
            apply_exclude(config, exclude, where)
    apply_definitions(config, definitions, mixed)
    if cli_overrides:
        cli = copy.deepcopy(dict(cli_overrides))
        config = merge(config, cli)
        coerce_cli_config(config, cli)
    if isinstance(config.get("dllm"), dict):
        resolve_checkpoints(config["dllm"])
    fill_seeds(config)  # the top-level seed reaches every stream whose sub-seed no file sets (unie.config.seeds)
    return order_by_schema(config, load_yaml(SCHEMA), only=mixed)


SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def order_by_schema(config, schema: dict, only: set | None = None, path: tuple = (), root: dict | None = None):
    """``config`` with the keys of its mappings (those at the paths in ``only``, or all) in the order of the
    schema's ``properties``; keys the schema does not list keep their order, after the listed ones.  A mapping
    merged from the grid and a profile then has one canonical order whatever the split, so a rule's parameters
    (a sub-dict of the config, compared by Snakemake as text) read the same as when one file held them."""
    root = root if root is not None else schema
    while isinstance(schema, dict) and "$ref" in schema:
        node = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = node
    if not isinstance(config, dict) or not isinstance(schema, dict):
        return config
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    keys = list(config)
    if only is None or path in only:
        keys = [k for k in props if k in config] + [k for k in config if k not in props]
    return {
        k: order_by_schema(
            config[k], props[k] if k in props else extra if isinstance(extra, dict) else {}, only, (*path, k), root
        )
        for k in keys
    }


__all__ = [
    "DEFINITIONS",
    "GRID",
    "PROFILE_ADDITIONS",
    "PROFILE_CHOICES",
    "PROFILE_KEYS",
    "apply_definitions",
    "apply_exclude",
    "check_definitions",
    "check_overlay",
    "leaves",
    "load_profile",
    "merge",
    "order_by_schema",
    "pop_definitions",
    "profile_chain",
    "resolve_config",
]


# ---------------------------------------------------------------------- command line and cluster settings
def coerce_cli_config(config: dict, cli: dict) -> None:
    """Read the nested values given with ``--config`` as YAML, in place.

    Snakemake parses ``--config 'resources={train: {runtime: 30}}'`` with YAML's base loader, so every nested
    leaf arrives as a string (``'30'``) and the schema refuses it; a top-level scalar (``seed=1``) is already typed.
    Each string leaf that came from the command line (``cli``, the parsed ``--config``) becomes what YAML makes of
    it when that is a number, a boolean or null (``'30'`` -> 30, ``'true'`` -> True), else stays a string
    (``'a100'``); values from the config files are left as they are."""

    def coerce(value):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        return parsed if parsed is None or isinstance(parsed, (bool, int, float)) else value

    def walk(node, given):
        if isinstance(given, dict) and isinstance(node, dict):
            for k, v in given.items():
                if k in node:
                    node[k] = walk(node[k], v)
            return node
        if isinstance(given, list) and isinstance(node, list) and len(node) == len(given):
            return [walk(n, g) for n, g in zip(node, given)]
        if isinstance(given, str) and node == given:
            return coerce(given)
        return node

    for key, given in cli.items():
        if key in config and isinstance(given, (dict, list)):
            config[key] = walk(config[key], given)
