"""config_check: pack what a run depends on besides its kernels, and compare two packs or two checkpoints
(docs/config_check.md)."""

from msprobe.core.config_check.collect import FrameworkProbe, PackCollector
from msprobe.core.config_check.diff import Difference, diff_packs
from msprobe.core.config_check.pack import PackError, read_pack, write_pack

__all__ = ["Difference", "FrameworkProbe", "PackCollector", "PackError", "diff_packs", "read_pack", "write_pack"]
