"""Every configuration error in one line: the key, the file it came from, and a did-you-mean.

:func:`workflow_config` is the one path from config files to the configuration a run uses, for the Snakefile and
``unie check-config`` alike: the merge (:func:`unie.config.profile.resolve_config`: grid <- profile file(s) <-
``--config``), the JSON schema (``workflow/schemas/config.schema.yaml``, its defaults filled in as
``snakemake.utils.validate`` does), the figure runs it generates and the cross-checks
(:func:`unie.config.checks.expand_config`, :func:`unie.config.checks.check_config`).  Whatever fails is a
:class:`~unie.core.options.ConfigError` whose message is one line::

    --config: config key 'sed': unknown key; did you mean 'seed'?
    my.yaml: config key 'sampling.stpes': unknown key; did you mean 'steps'?
    my.yaml: config key 'seed': 'abc' is not of type 'integer'

The schema's own report (the rule and the whole offending value) stays on the exception's ``__cause__``, printed
only when asked for (``snakemake --verbose``, ``unie check-config --verbose``): :func:`error_text`.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

from ..core.imports import around_import
from ..core.options import ConfigError
from .profile import DEFAULT_PROFILE, GRID, SCHEMA, display_path, load_yaml, profile_chain, resolve_config
from .schema import dotted, unknown_key_message

# -- where a key came from


class ConfigSources:
    """Which input set a config key: ``--config``, the last profile file that writes it, else the grid."""

    def __init__(self, profile_files=(), cli: dict | None = None, grid=None):
        self.cli = dict(cli or {})
        # each profile file after its base profiles (`base:`): a key its base sets is reported in the base's file
        self.overlays = [(display_path(p), doc) for f in profile_files for p, doc in profile_chain(f)]
        self.grid = display_path(grid or GRID)

    @staticmethod
    def _has(tree, path) -> bool:
        node = tree
        for i, key in enumerate(path):
            if not isinstance(node, dict):
                return i > 0  # a value given whole (a list, a scalar) covers everything below it
            if key not in node:
                return False
            node = node[key]
        return True

    def of(self, path) -> str:
        """The source of ``path`` (a tuple of keys), or of its longest prefix that some source writes."""
        path = tuple(path)
        order = [("--config", self.cli), *reversed(self.overlays)]
        for depth in range(len(path), 0, -1):
            for name, tree in order:
                if self._has(tree, path[:depth]):
                    return name
        return self.grid


# -- the schema, one line per violation


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _without_iri(exec_module, module) -> None:
    """Load ``jsonschema`` (``module``) with the optional ``rfc3987_syntax`` blocked: jsonschema's format checkers
    import it, and it builds its IRI grammars on import (2.3–3.3 s of CPU) for a format neither our schema nor
    Snakemake's notebook support (``nbformat``, which Snakemake imports for every ``script:`` job it starts) names.
    The block lasts only for this import: a later ``import rfc3987_syntax`` elsewhere in the process works as before."""
    block = "rfc3987_syntax" not in sys.modules
    if block:
        sys.modules["rfc3987_syntax"] = None  # an import of it raises ImportError, which jsonschema skips
    try:
        exec_module(module)
    finally:
        if block and sys.modules.get("rfc3987_syntax", ...) is None:
            del sys.modules["rfc3987_syntax"]


def skip_iri_grammars() -> None:
    """Whoever first imports ``jsonschema`` in this process imports it without the IRI grammars (:func:`_without_iri`,
    :func:`unie.core.imports.around_import`); nothing when it is imported already.  The Snakefile calls it first
    thing."""
    around_import("jsonschema", _without_iri)


def _jsonschema():
    """``jsonschema``, imported without the optional ``rfc3987_syntax`` (:func:`skip_iri_grammars`)."""
    skip_iri_grammars()
    import jsonschema

    return jsonschema


def schema_error(config: dict, schema: dict, sources: ConfigSources) -> ConfigError | None:
    """The schema's most relevant violation of ``config`` as a one-line :class:`ConfigError` (its ``__cause__``:
    jsonschema's full report), or ``None``."""
    jsonschema = _jsonschema()
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is None:
        return None
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        props = error.schema.get("properties", {})
        extra = [k for k in error.instance if k not in props]
        key_path = (*path, extra[0]) if extra else path
        msg = unknown_key_message(sources.of(key_path), key_path, list(props))
    else:
        text = error.message
        if error.validator in (
            "type",
            "enum",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "minItems",
            "uniqueItems",
            "oneOf",
            "anyOf",
            "const",
        ):
            text = text.replace(repr(error.instance), _short(error.instance), 1)
        key = dotted(path) if path else "(top level)"
        msg = f"{sources.of(path)}: config key '{key}': {' '.join(text.split())}"
    out = ConfigError(msg)
    out.__cause__ = error
    return out


def validate_config(config: dict, sources: ConfigSources, schema_path=SCHEMA) -> None:
    """Check ``config`` against the schema (one-line error) and fill in the schema's defaults, in place, as the
    Snakefile's ``snakemake.utils.validate`` always did."""
    schema = load_yaml(schema_path)
    error = schema_error(config, schema, sources)
    if error is not None:
        raise error
    from snakemake.utils import validate

    validate(config, str(schema_path))


_QUOTED_KEY = re.compile(r"^config key '([^']+)'")
_LEADING_KEY = re.compile(r"^([A-Za-z_][\w\-]*(?:\.[\w\-]+|\[\d+\])*):")


def with_source(e: ConfigError, config: dict, sources: ConfigSources) -> ConfigError:
    """A cross-check's error (``config key 'a.b': ...`` or ``a.b: ...``) in one line, with the file its key came
    from in front."""
    msg = " ".join(str(e).split())
    m = _QUOTED_KEY.match(msg) or _LEADING_KEY.match(msg)
    path = tuple(p for p in re.split(r"\.|\[\d+\]", m.group(1)) if p) if m else ()
    if not path or path[0] not in config:
        return ConfigError(msg)
    return ConfigError(f"{sources.of(path)}: {msg}")


def workflow_config(profile_files=None, cli_overrides: dict | None = None, grid=None, schema=SCHEMA, show=None) -> dict:
    """The configuration a run uses: resolved (grid <- profile file(s), ``config/config.yaml`` when none <-
    ``cli_overrides``), checked against the schema with its defaults filled in, the figures' sampling runs added,
    cross-checked.  ``show(config)`` sees it as resolved, before the schema (``unie check-config --resolved``).
    Every error is a one-line :class:`ConfigError` naming the key, its file and a did-you-mean."""

    files = [Path(f) for f in (profile_files or [])] or [DEFAULT_PROFILE]
    sources = ConfigSources(files, cli_overrides, grid)
    config = resolve_config(files, cli_overrides, grid=grid)
    if show is not None:
        show(copy.deepcopy(config))
    validate_config(config, sources, schema)
    from .checks import check_config, expand_config  # they read the registries (torch): a schema error is said first

    try:
        expand_config(config)
        check_config(config)
    except ConfigError as e:
        raise with_source(e, config, sources) from e
    return config


def error_text(e: BaseException, verbose: bool = False) -> str:
    """What to print for a configuration error: its one line, and with ``verbose`` the schema's full report."""
    line = " ".join(str(e).split())
    cause = e.__cause__
    if verbose and cause is not None:
        return f"{cause}\n\nunie: config error: {line}"
    hint = (
        " (--verbose: the schema's full report)"
        if cause is not None and type(cause).__name__ == "ValidationError"
        else ""
    )
    return f"unie: config error: {line}{hint}"


__all__ = ["ConfigSources", "error_text", "schema_error", "validate_config", "with_source", "workflow_config"]
