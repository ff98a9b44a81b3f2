"""MindSpore monitor tests share tests/common/monitor's numpy reference and readers."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "monitor"))
