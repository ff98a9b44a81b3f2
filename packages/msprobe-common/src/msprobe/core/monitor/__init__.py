"""The training-state monitor, framework-free: its configuration, the metric table, alert rules, the
writers and the HTML view. The frameworks' ``TrainerMon`` (``msprobe.pytorch.monitor``) hooks the model
and computes the metrics where the tensors live; docs/monitor.md describes the whole feature.
"""
