"""Rule partition_check: enumerate the Uni-E partition function on V=3, L=4 (see unie.partition_check)."""

import pandas as pd

from unie.pipeline.checks import job

with job(snakemake) as log:
    from unie.energy.partition import check_partition

    df = pd.DataFrame([r for ctx in ("teacher_forced", "masked", "exact") for r in check_partition(ctx)])
    df.to_csv(snakemake.output.csv, index=False)
    summary = df.groupby(["ar_context", "revealed"]).agg(
        fixed_xs=("fixed_xs_max", "max"), derived_xs=("derived_xs", "mean"), V_pow_D=("V_pow_D", "first")).reset_index()
    lines = [r"\begin{tabular}{l|c|c|c|c}", r"\toprule",
             r"AR context & $|D|$ & mass, $x_s$ fixed & mass, $x_s$ from $x_0$ & $3^{|D|}$ \\", r"\midrule"]
    for r in summary.itertuples():
        lines.append(f"{r.ar_context.replace('_', ' ')} & {r.revealed} & {r.fixed_xs:.6f} & {r.derived_xs:.6f} & {r.V_pow_D} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    open(snakemake.output.tex, "w").write("\n".join(lines))
    log(summary.to_string())
