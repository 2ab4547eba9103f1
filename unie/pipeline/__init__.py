"""The rules' jobs: what each rule's script (``workflow/scripts/``) calls, and the only code that reads and writes
the workflow's files (models, token files, samples, result JSONs, tables and figures, logs).  The configuration a
job runs with is :mod:`unie.config`'s; the numbers it computes come from the layers below."""
