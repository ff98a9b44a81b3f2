"""``msprobe -f mindspore run_ut`` / ``multi_run_ut``: replay the Mint, MintFunctional and supported
Tensor APIs of a MindSpore dump against a high-precision bench (docs/mindspore/run_ut.md).

Nothing here imports mindspore or torch at import time; :func:`msprobe.mindspore.run_ut.replay.run_ut`
is the Python API.
"""
