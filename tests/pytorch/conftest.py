"""PyTorch tests share the small models of ``torch_models.py`` (importable by name from here) and the
framework-free helpers of ``tests/common`` (``dump_json``, ``layers``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "common"))
