"""Run with msprobe 26.2.0 (mindstudio-probe, in its own venv, never the project's): a task tensor L0 dump of a
two-layer net at ./dump (26.2.0's step0/proc{pid}/ layout), its weights w.pt, its input x.pt and output y.pt —
the clean run that tests/pytorch/test_module_load.py loads with msprobe's `load`."""

import json

import torch
from torch import nn

from msprobe.pytorch import PrecisionDebugger


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


torch.manual_seed(0)
with open("config.json", "w") as f:
    json.dump({"task": "tensor", "level": "L0", "dump_path": "./dump",
               "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}, f)
net = Net()
x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
debugger = PrecisionDebugger(config_path="config.json")
debugger.start(net)
y = net(x)
debugger.stop()
debugger.step()
torch.save(net.state_dict(), "w.pt")
torch.save(x, "x.pt")
torch.save(y.detach(), "y.pt")
