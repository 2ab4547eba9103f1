"""The config schema (``workflow/schemas/config.schema.yaml``) walked by key, and the one-line message for a key it
does not know (with a did-you-mean).  Read by the profile check (:func:`unie.config.profile.check_overlay`) and by
the validation of the resolved config (:mod:`unie.config.validate`)."""

from __future__ import annotations

import difflib


def _deref(node, root: dict):
    while isinstance(node, dict) and "$ref" in node:
        target = root
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = target
    return node


def child_schema(node, key, root: dict):
    """The schema of ``key`` under the object schema ``node``, or ``None`` where the schema forbids the key.  A key
    of a free-named mapping (``models``, ``sampling.runs``) gets the schema of its values; a node the schema does not
    describe further allows anything (``{}``)."""
    node = _deref(node, root)
    if not isinstance(node, dict):
        return {}
    props = node.get("properties", {})
    if key in props:
        return _deref(props[key], root)
    extra = node.get("additionalProperties", True)
    if extra is False:
        return None
    return _deref(extra, root) if isinstance(extra, dict) else {}


def known_keys(node, root: dict) -> list[str]:
    """The keys the object schema ``node`` names (empty for a free-named mapping)."""
    node = _deref(node, root)
    return list(node.get("properties", {})) if isinstance(node, dict) else []


def did_you_mean(key, known) -> str:
    """``"did you mean 'steps'?"`` for the closest known key, else the list of known keys."""
    known = [str(k) for k in known]
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    if close:
        return f"did you mean '{close[0]}'?"
    return f"known: {', '.join(known)}" if known else "no key is allowed here"


def dotted(path) -> str:
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


def unknown_key_message(where: str, path, known) -> str:
    return f"{where}: config key '{dotted(path)}': unknown key; {did_you_mean(path[-1], known)}"
