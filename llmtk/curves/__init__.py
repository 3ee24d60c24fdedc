"""Training curves: the metrics-log schema that train writes and plot-loss/diagnose read."""
