"""What the nodes and ranks leave for the submitter and the retry step, and what a failure means; nothing
here asks a scheduler: `root_cause` (a failure shortened to one line, and which failed rank is the cause),
`fault_origin` (whose fault a failed attempt was: a node's, to leave out of later attempts, or the code's),
`rank_notes` (what the ranks under a node's torchrun leave in the job's folder: named and read once) and
`pool_claims` (who runs which point of a pool: named and read once likewise)."""
