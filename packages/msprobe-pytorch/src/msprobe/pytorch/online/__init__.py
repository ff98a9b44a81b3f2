"""Online run_ut, PyTorch's half (docs/run_ut_online.md): tensors to and from raw bytes, and the
receiver behind ``msprobe -f pytorch run_ut -config cfg.json`` with ``is_online: true``.

Nothing here imports torch at import time.
"""
