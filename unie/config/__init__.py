"""The configuration of a run, before any job: the experiment grid and a profile merged (:mod:`.profile`), checked
against the schema (:mod:`.schema`, :mod:`.validate`) and across keys (:mod:`.checks`), expanded to the runs it
implies (:mod:`.expand`), read as settings (:mod:`.settings`), named targets (:mod:`.targets`), the run's directory
(:mod:`.rundir`) and how its sampling runs are cut into jobs (:mod:`.sampling_jobs`).  Nothing here reads or writes a
result file."""
