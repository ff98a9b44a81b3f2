"""PyTorch tests share the small models of ``torch_models.py`` (importable by name from here)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
