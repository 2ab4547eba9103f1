"""Rule dllm_data: tokenizers (word-level, BPE) and the training tensors of the DLLM half."""

from unie.pipeline.rule import job

with job(snakemake) as log:
    import os

    from unie.data.tokens import load_tokens
    from unie.data.tokenizer import load_tokenizer
    from unie.pipeline.dllm_runs import prepare_dllm_data

    d = snakemake.params.dllm
    task_dir = os.path.dirname(snakemake.input.yamls[0])
    names = d["tasks"]["names"]
    train = {t: f"{task_dir}/data/{t}_train.jsonl" for t in names if os.path.exists(f"{task_dir}/data/{t}_train.jsonl")}
    test = {t: f"{task_dir}/data/{t}_test.jsonl" for t in names}
    toy_tok = load_tokenizer(snakemake.input.tokenizer)
    n = d["pretrain_texts"]
    toy = [toy_tok.decode(r) for r in load_tokens(snakemake.input.toy, n).tolist()]
    gen = d["decoding"]["gen_length"]  # a tokenizer without an sft_length trains on the decoding canvas
    sft_length = {name: (d.get("sft_length") or {}).get(name, gen) for name in ("word", "bpe")}
    prepare_dllm_data(
        train,
        test,
        toy,
        os.path.dirname(snakemake.output.meta),
        sft_length,
        d["bpe_vocab_size"],
        n,
        seed=d["tasks"]["seed"],
        log=log,
    )
