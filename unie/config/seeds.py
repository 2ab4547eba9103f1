"""One seed for every random stream: the top-level ``seed`` fills every sub-seed the configuration does not set.

``--config seed=1`` is then a second training of everything (``runs/toy+seed-1/``): other toy-world corpora,
other initial weights and batches for every model of both halves, other DLLM tasks and pretraining mix, other
lm-eval and decoder noise, other sampling draws.  A sub-seed written in a config file (or given with ``--config``)
is kept: that is how one stream is varied alone (``--config 'dllm={seed: 3}'`` redraws only the decoders' noise).

What each key seeds (``docs/configuration.md`` has the same table for users):

========================================  ================================================================
``seed``                                  the toy world's corpora (every domain and split), every sampling run
                                          of Tables 1-2 and Figures 2-3 (with the run's name and step count),
                                          the Monte-Carlo passes of Table 1, the timing runs; and, through
                                          :func:`fill_seeds`, every key below that the config leaves unset
``models.<m>.train.seed``                 model ``m``'s initial weights, batch order, dropout and loss noise,
                                          its dev evaluations (DLM half)
``dllm.models.<m>.train.seed``            the same for a model of the DLLM half
``dllm.tasks.seed``                       the toy DLLM tasks' items (train and test splits) and the order of
                                          the proxy's pretraining/SFT mix
``dllm.seed``                             lm-eval's four seeds and every DLLM decoder's per-request noise
                                          (Table 3's rows, the sweeps, the map)
``figures.case_studies.seed``             the case studies' shared generator
========================================  ================================================================

Deliberately fixed, whatever the seed: the brute-force partition check (an exact identity), the sampler bench (a
timing), the entropy-rate reference line of Table 2 (a property of the toy world, not of a training) and the fixed
Monte-Carlo draws of a Uni-EDLM-NCE dev evaluation (one set of masks for every checkpoint, so the comparison is
paired; the dev sequences themselves change with ``seed``).
"""

from __future__ import annotations

# dotted paths of the sub-seeds; ``*`` stands for every key of that mapping
SUB_SEEDS: tuple[str, ...] = (
    "models.*.train.seed",
    "dllm.models.*.train.seed",
    "dllm.tasks.seed",
    "dllm.seed",
    "figures.case_studies.seed",
)


def _fill(node, parts: tuple[str, ...], seed: int) -> None:
    if not isinstance(node, dict) or not parts:
        return
    head, rest = parts[0], parts[1:]
    if not rest:
        node.setdefault(head, seed)
        return
    for key in list(node) if head == "*" else [head]:
        _fill(node.get(key), rest, seed)


def fill_seeds(config: dict) -> dict:
    """Set every sub-seed of :data:`SUB_SEEDS` that ``config`` does not set to ``config['seed']``, in place (a
    section the config does not have gets none); returns ``config``."""
    seed = config.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        return config  # the schema names the bad value
    for path in SUB_SEEDS:
        _fill(config, tuple(path.split(".")), seed)
    return config


def sub_seeds(config: dict) -> dict[str, int]:
    """Every sub-seed of a resolved config by its dotted path (what a test or a reader compares across runs)."""
    out: dict[str, int] = {}

    def walk(node, parts, path):
        if not isinstance(node, dict):
            return
        head, rest = parts[0], parts[1:]
        for key in list(node) if head == "*" else [head]:
            if key not in node:
                continue
            if not rest:
                out[".".join((*path, key))] = node[key]
            else:
                walk(node[key], rest, (*path, key))

    for p in SUB_SEEDS:
        walk(config, tuple(p.split(".")), ())
    return out


__all__ = ["SUB_SEEDS", "fill_seeds", "sub_seeds"]
