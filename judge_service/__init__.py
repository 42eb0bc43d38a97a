"""Judge service: trajectory verdicts with voting@k, multi-resolution and ensembles."""
