# Paper profile: Hugging Face evaluator models (GPT-2-large, Llama-2-7B, Llama-3-8B) for Table 2.
# A localrule: compute nodes often have no internet, so the snapshot is fetched on the submit host (or on the site's
# download partition, slurm_partitions.download) into resources/hf/{hf_model}/, which the jobs read with
# local_files_only (they never download).

import re

HF_MODELS = config.get("hf_models", {})


rule download_hf_model:
    output:
        directory("resources/hf/{hf_model}"),
    log:
        run_path("logs/download_hf_model/{hf_model}.log"),
    wildcard_constraints:
        # only the names of config['hf_models']; "(?!)" never matches (toy profile: no hf_models)
        hf_model="|".join(re.escape(name) for name in HF_MODELS) or "(?!)",
    retries: 2
    localrule: DOWNLOADS_LOCAL
    threads: 1
    resources:
        **rule_resources("download_hf_model", 8000, 240),
    params:
        repo_id=lambda wc: HF_MODELS[wc.hf_model],
    script:
        "../scripts/download_hf_model.py"
