"""Work done around a module's import, whoever imports it first: a finder on ``sys.meta_path`` that lets the other
finders find the module and runs its loading through a function of ours, then leaves ``sys.meta_path``.  Used so
that a cost is paid only by a process that loads the module: a rule's torch threads are set when torch is imported
(:func:`unie.pipeline.rule.torch_threads`), jsonschema is imported without its IRI grammars
(:func:`unie.config.validate.skip_iri_grammars`)."""

from __future__ import annotations

import sys
from collections.abc import Callable


class _AroundImport:
    """The finder (module doc): ``around(exec_module, module)`` loads module ``name``."""

    def __init__(self, name: str, around: Callable):
        self.name, self.around = name, around

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module, around = spec.loader.exec_module, self.around
        spec.loader.exec_module = lambda module: around(exec_module, module)
        return spec


def around_import(name: str, around: Callable) -> bool:
    """Load module ``name`` through ``around(exec_module, module)`` (which calls ``exec_module(module)``) when it is
    first imported in this process.  One hook per module: a later call for the same module replaces the waiting
    hook's ``around``.  False (nothing done) when the module is imported already."""
    if name in sys.modules:
        return False
    hook = next((f for f in sys.meta_path if isinstance(f, _AroundImport) and f.name == name), None)
    if hook is None:
        sys.meta_path.insert(0, _AroundImport(name, around))
    else:
        hook.around = around
    return True


__all__ = ["around_import"]
