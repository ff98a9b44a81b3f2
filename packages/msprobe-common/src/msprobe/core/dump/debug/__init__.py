"""Level ``debug``: ``PrecisionDebugger.save(variable, name, save_backward=True)`` writes any variable, and its
gradient, to the step's ``debug.json`` through the dump wing's one encoder and writer
(docs/pytorch/dump.md#level-debug-save).

A sub-room of :mod:`msprobe.core.dump` (that room holds twelve modules)."""
