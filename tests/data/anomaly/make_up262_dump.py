import torch
from msprobe.pytorch import PrecisionDebugger, seed_all
import json, sys
cfg = {"task": "statistics", "dump_path": sys.argv[1], "rank": [], "step": [], "level": "mix",
       "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
open("config.json", "w").write(json.dumps(cfg))
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 2)
    def forward(self, x):
        h = torch.relu(self.a(x))
        h = torch.log(h - 1.0)  # negative -> NaN: the origin
        return self.b(h)
net = Net()
debugger = PrecisionDebugger(config_path="config.json")
debugger.start(model=net)
x = torch.randn(3, 4)
out = net(x).sum()
out.backward()
debugger.stop()
debugger.step()
