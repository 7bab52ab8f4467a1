"""Applications over the library for experiments: the shared pipeline (vocabulary -> shards ->
pre-training -> fine-tuning, cached), the results store, reports and plots, probes, the paper's
ablations and the demo."""
