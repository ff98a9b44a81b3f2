"""Monitor tests share this folder's model helpers and tests/common/monitor's numpy reference and readers."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "monitor"))
