"""Trains with the debugger on; in the step given on the command line it makes many API calls, prints
MID-STEP and waits to be killed (a crash mid-step)."""

import sys
import time

import torch

from msprobe.pytorch import PrecisionDebugger

dump_path, crash_step = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
debugger = PrecisionDebugger(dump_path=dump_path, task="statistics", level="mix", model=model)
for step in range(crash_step + 1):
    debugger.start()
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    if step == crash_step:
        x = torch.randn(16)
        for _ in range(3000):  # enough entries that part of the step is already streamed to disk
            x = x * 1.0001
        print("MID-STEP", flush=True)
        time.sleep(600)
    debugger.stop()
    debugger.step()
