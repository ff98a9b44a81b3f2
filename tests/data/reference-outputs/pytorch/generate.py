import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from msprobe.pytorch import PrecisionDebugger

task, level, out, prec = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
torch.manual_seed(0)
class Tiny(nn.Module):
    def __init__(s):
        super().__init__(); s.conv = nn.Conv2d(1, 2, 3, padding=1); s.fc = nn.Linear(2 * 4 * 4, 3)
    def forward(s, x):
        h = F.relu(s.conv(x))
        if task == "overflow_check":
            h = h * 1e38 * 100
        return s.fc(h.flatten(1))
model = Tiny()
sec = {"grad_level": "L2", "param_list": [], "bounds": [-0.01, 0, 0.01]} if task == "grad_probe" else {"scope": [], "list": [], "data_mode": ["all"], **extra}
cfg = {"task": task, "dump_path": os.path.abspath(out), "rank": [], "step": [], "level": level, task: sec}
os.makedirs(out, exist_ok=True)
json.dump(cfg, open(out + "/config.json", "w"), indent=1)
dbg = PrecisionDebugger(config_path=out + "/config.json", model=model) if level in ("L0", "mix") else PrecisionDebugger(config_path=out + "/config.json")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
if task == "grad_probe":
    dbg.monitor(model)
torch.manual_seed(1)
x = torch.randn(2, 1, 4, 4); y = torch.tensor([0, 2])
for step in range(2 if task == "grad_probe" else 1):
    if task != "grad_probe": dbg.start(model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=(prec == "bf16")):
        out_ = model(x)
    loss = F.cross_entropy(out_.float(), y)
    if torch.isfinite(loss): loss.backward()
    if task != "grad_probe": dbg.stop(); dbg.step()
    opt.step(); opt.zero_grad()
