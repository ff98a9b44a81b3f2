"""Collectives: recorded with their inputs before the call and their tensors after it (an asynchronous one
when its work is waited on), restored after disable."""

from __future__ import annotations

import torch
import torch.distributed as dist
from hook_sink import RecordingSink

from msprobe.pytorch.hooks import Interceptor


def test_all_reduce_is_recorded_on_a_single_rank_gloo_group(tmp_path):
    original = dist.all_reduce
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        sink = RecordingSink()
        interceptor = Interceptor(sink, level="L1")
        interceptor.enable()
        t = torch.ones(3)
        dist.all_reduce(t)
        work = dist.all_reduce(t, async_op=True)
        assert isinstance(work, dist.Work)
        assert "Distributed.all_reduce.1.forward" not in sink.outputs  # not before the user waits
        work.wait()
        work.wait()  # recorded once
        interceptor.detach()
        assert sink.forward[-2:] == ["Distributed.all_reduce.0.forward", "Distributed.all_reduce.1.forward"]
        assert sink.inputs["Distributed.all_reduce.0.forward"][0].tolist() == [1.0, 1.0, 1.0]
        assert [v.tolist() for v in sink.outputs["Distributed.all_reduce.1.forward"]] == [[1.0, 1.0, 1.0]]
        assert dist.all_reduce is original
    finally:
        dist.destroy_process_group()
