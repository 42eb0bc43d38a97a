"""The master load benchmark's parts (``benchmarks.master_load`` runs them): the load model
(:mod:`.model`), its HTTP clients (:mod:`.http`), the harness that drives and measures a run
(:mod:`.harness`) and the figures it reports (:mod:`.figures`)."""
