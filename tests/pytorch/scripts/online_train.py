"""A tiny training loop that streams its API calls to an online run_ut receiver (tests/pytorch/test_online_*).

``python online_train.py CONFIG STEPS [SLEEP]``: trains STEPS steps (0: until killed), printing
``step N done`` after each, sleeping SLEEP seconds between steps. Under torchrun it joins a gloo
process group first, so each rank streams as its own rank.
"""

import os
import sys
import time

import torch

from msprobe.pytorch import PrecisionDebugger


def main() -> None:
    config, steps = sys.argv[1], int(sys.argv[2])
    pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    if "WORLD_SIZE" in os.environ:
        torch.distributed.init_process_group("gloo")
    torch.manual_seed(int(os.environ.get("RANK", "0")))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    debugger = PrecisionDebugger(config)
    step = 0
    while steps == 0 or step < steps:
        debugger.start(model)
        loss = model(torch.randn(5, 8)).pow(2).mean()
        loss.backward()
        debugger.stop()
        optimizer.step()
        optimizer.zero_grad()
        debugger.step()
        print(f"step {step} done", flush=True)
        step += 1
        time.sleep(pause)
    debugger.finish()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
