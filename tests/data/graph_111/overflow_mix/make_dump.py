import json, os, torch, torch.nn as nn, torch.nn.functional as F
from msprobe.pytorch import PrecisionDebugger
torch.manual_seed(0)
class Tiny(nn.Module):
    def __init__(s):
        super().__init__(); s.conv = nn.Conv2d(1, 2, 3, padding=1); s.fc = nn.Linear(2 * 4 * 4, 3)
    def forward(s, x):
        h = F.relu(s.conv(x)) * 1e38 * 100
        return s.fc(h.flatten(1))
model = Tiny()
cfg = {"task": "statistics", "dump_path": os.path.abspath("dump"), "rank": [], "step": [], "level": "mix", "statistics": {"scope": [], "list": [], "data_mode": ["all"]}}
json.dump(cfg, open("config.json", "w"))
dbg = PrecisionDebugger(config_path="config.json", model=model)
x = torch.randn(2, 1, 4, 4)
dbg.start(model); out = model(x); out.sum().backward(); dbg.stop(); dbg.step()
