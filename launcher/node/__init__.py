"""What runs on a node, under submitit or torchrun (the submitter pickles these; nothing here is run
on the submitting machine): `task` (TrainTask: one task trains one rank and bridges the trainer's stop
protocol to submitit's requeue), `placement` (probe_task: where a task landed, what it was given),
`torchrun_command` (the torchrun line of the `launch: torchrun` shape, as data), `torchrun_task` (that
shape's node task and its probe), `torchrun_worker` (each rank under the node's torchrun:
`python -m launcher.node.torchrun_worker SPEC`) and `envcheck` (the node interpreter's packages,
checked before submitit starts: the standard library only)."""
