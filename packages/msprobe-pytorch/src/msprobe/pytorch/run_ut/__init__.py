"""``msprobe -f pytorch run_ut``: replay the APIs of a dump and judge them (docs/run_ut.md).

Nothing here imports torch at import time (the ``msprobe`` command lists this command without
torch); :func:`msprobe.pytorch.run_ut.replay.run_ut` is the Python API.
"""
