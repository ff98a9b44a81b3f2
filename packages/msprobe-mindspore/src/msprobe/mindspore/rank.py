"""The one answer to "which rank is this process?" for every MindSpore part of msprobe."""

from __future__ import annotations


def current_rank() -> int | None:
    """The rank of this process when MindSpore's communication is initialised, else ``None``."""
    from mindspore.communication import get_rank
    from mindspore.communication.management import GlobalComm

    # get_rank() answers 0 even without init(); only an initialised job has ranks (dir "rank" otherwise)
    return int(get_rank()) if GlobalComm.INITED else None


def rank_count() -> int:
    """How many ranks the job has: 1 without initialised communication."""
    from mindspore.communication import get_group_size
    from mindspore.communication.management import GlobalComm

    return int(get_group_size()) if GlobalComm.INITED else 1
