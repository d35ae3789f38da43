"""The run folder: its layout and file names (`layout`), its records (`record`), what each task is
doing (`states`, `outcomes`, `restarts`), and the results drawn from it (`results`, `plots`)."""
