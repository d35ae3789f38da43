"""The run folder: its layout and file names (`layout`), its records (`record`, read through
`record_types`: every field's type and bounds), the code snapshot (`snapshot`, with `snapshot_links`:
unchanged files linked from the previous snapshot), what each task is doing (`task_state`, `states`, `pool_states`: a pool's points, `outcomes`,
`restarts`, and `progress`: a task's epoch, step and speed as `watch` shows them), what it cost (`cost`) and how much of its time its steps kept (`ettr`),
the results drawn from it (`results`, `plots`), what the run is (`signature`: a hash of what decides its
result; `claims`: which run of a runs folder is a signature's, claimed by one submission at a time; `reused`: a sweep's points
that other runs completed), whether a failed attempt comes back by itself (`retries`)
and the nodes the run leaves out (`exclusions`)."""
