"""Run under torchrun --nproc_per_node=2 (gloo, CPU): a data-parallel step with an all_reduce.

Arguments: DUMP_PATH CONFIG_PATH (the config.json to use; the test writes it).
"""

import sys

import torch
import torch.distributed as dist

from msprobe.pytorch import PrecisionDebugger

dump_path, config_path = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = torch.nn.Linear(4, 2)
debugger = PrecisionDebugger(config_path=config_path, dump_path=dump_path)
debugger.start()
loss = model(torch.randn(3, 4)).sum()
loss.backward()
for parameter in model.parameters():
    dist.all_reduce(parameter.grad)
debugger.stop()
debugger.step()
dist.destroy_process_group()
