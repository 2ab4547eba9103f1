# Released checkpoints as models: a model of config['models'] with a `source:` is not trained; rule import_released
# converts the released weights once into our checkpoint format (results/models/{model}/: config.json with
# `arch: dit` and the weights' SHA-256, model.safetensors), so everything downstream (verification on load,
# fingerprints, init_from, NCE's frozen partners, damage checks) treats it as any trained model.
# docs/released-checkpoints.md.  Where the released files come from (exactly one per source):
#   hf_id:   rule download_released fetches the HF folder on the submit host (resources/released/{model})
#   standin: rule released_standin writes a tiny stand-in in the upstream format (resources/standins/{model})
#   path:    a file placed by hand (MDLM's Google-Drive ar.ckpt, sedd.ckpt); absent, rule released_missing fails
#            with one line naming the file and where to put it

from unie.config.expand import released_models, source_path

RELEASED = released_models(config)
_HF_SOURCES = [m for m, s in RELEASED.items() if s.get("hf_id")]
_STANDINS = [m for m, s in RELEASED.items() if s.get("standin")]
_BY_HAND = [m for m, s in RELEASED.items() if s.get("path")]


def _names(names):
    return "|".join(names) or "(?!)"  # "(?!)" never matches: no such model in this profile


def import_inputs(wc):
    source = RELEASED[wc.model]
    inputs = {"tokenizer": run_path("resources/tokenizer")}
    if source.get("hf_id"):
        inputs["source"] = f"resources/released/{wc.model}"
    elif source.get("standin"):
        inputs["source"] = run_path(f"resources/standins/{wc.model}")
    elif os.path.exists(source["path"]):
        inputs["source"] = source["path"]
    else:
        inputs["source"] = f"resources/released/missing/{wc.model}"
    return inputs


rule import_released:
    input:
        unpack(import_inputs),
    output:
        weights=run_path("results/models/{model}/model.safetensors"),
        config=run_path("results/models/{model}/config.json"),
    log:
        run_path("logs/import_released/{model}.log"),
    wildcard_constraints:
        model=_names(RELEASED),
    threads: 1
    resources:  # a conversion on the CPU: reads the released file, writes safetensors
        **rule_resources("import_released", 4000, 60),
    params:
        source=lambda wc: RELEASED[wc.model],
        path=lambda wc: source_path(wc.model, RELEASED[wc.model], RUN_DIR),
        method=lambda wc: config["models"][wc.model]["method"],
        options=lambda wc: config["models"][wc.model].get("options", {}),
    script:
        "../scripts/import_released.py"


rule download_released:
    output:
        directory("resources/released/{model}"),
    log:
        run_path("logs/download_released/{model}.log"),
    wildcard_constraints:
        model=_names(_HF_SOURCES),
    retries: 2
    localrule: DOWNLOADS_LOCAL  # compute nodes are often offline: the submit host, or the download partition
    threads: 1
    resources:
        **rule_resources("download_released", 8000, 120),
    params:
        repo_id=lambda wc: RELEASED[wc.model]["hf_id"],
    script:
        "../scripts/download_hf_model.py"


rule released_standin:
    input:
        tokenizer=run_path("resources/tokenizer"),
    output:
        directory(run_path("resources/standins/{model}")),
    log:
        run_path("logs/released_standin/{model}.log"),
    wildcard_constraints:
        model=_names(_STANDINS),
    localrule: True
    threads: 1
    params:
        kind=lambda wc: RELEASED[wc.model]["kind"],
        format=lambda wc: RELEASED[wc.model]["standin"],
        block_size=lambda wc: RELEASED[wc.model].get("block_size"),
        seed=config["seed"],
    script:
        "../scripts/released_standin.py"


rule released_missing:
    output:
        "resources/released/missing/{model}",
    wildcard_constraints:
        model=_names(_BY_HAND),
    localrule: True
    threads: 1
    params:
        path=lambda wc: RELEASED[wc.model]["path"],
        kind=lambda wc: RELEASED[wc.model]["kind"],
    script:
        "../scripts/released_missing.py"
