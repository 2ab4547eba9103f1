# Training: every model in config['models'] with its method's loss (one shared loop: AdamW,
# warm-up, grad clip, EMA, checkpoints in results/checkpoints/{model}/ that a rerun resumes from).
# A model with a `source:` (a released checkpoint) is not trained: rule import_released (released.smk) writes it.

from unie.config.expand import trained_models

TRAINED = trained_models(config)


def train_inputs(wc):
    spec = config["models"][wc.model]
    inputs = {
        "train": run_path(f"resources/tokenized/{TRAIN_DOMAIN}/train.parquet"),
        "tokenizer": run_path("resources/tokenizer"),
    }
    if spec.get("init_from"):
        inputs["init"] = model_files(spec["init_from"])[0]
    for role, partner in FACTS.partners[wc.model].items():  # frozen partners (NCE's proxy or DLM)
        inputs[f"partner_{role}"] = model_files(partner)[0]
    if FACTS.selects_on_dev[wc.model]:  # model selection on the dev split (disjoint from Table 1's test split)
        inputs["dev"] = run_path(f"resources/tokenized/{TRAIN_DOMAIN}/valid.parquet")
    return inputs


rule train:
    input:
        unpack(train_inputs),
    output:
        weights=run_path("results/models/{model}/model.safetensors"),
        config=run_path("results/models/{model}/config.json"),
    log:
        run_path("logs/train/{model}.log"),
    wildcard_constraints:
        model="|".join(TRAINED) or "(?!)",
    priority: 20  # every other job waits for a model: train first
    threads: config["threads"]
    resources:
        **rule_resources("train", 4000, 120, gpu=True),
    params:
        **precision_params(),
        spec=lambda wc: config["models"][wc.model],
        seq_len=config["data"]["seq_len"],
        ckpt_dir=lambda wc: run_path(f"results/checkpoints/{wc.model}"),
        token_cache=TOKEN_CACHE,
        device=config["device"],
        processes=res("train", "processes", None),  # null: resources.gpu processes on CUDA (torchrun when > 1), else 1
    script:
        "../scripts/train.py"
