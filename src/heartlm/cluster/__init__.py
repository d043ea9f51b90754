"""Running heartlm on a cluster: SLURM batch scripts and an Apptainer image definition."""
