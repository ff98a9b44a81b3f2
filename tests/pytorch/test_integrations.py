"""Trainer integrations with the real libraries on the CPU (docs/pytorch/trainers.md): a transformers
Trainer, a Lightning Trainer and an Accelerate loop, each with 2 micro-batches per optimizer step.

Each run is made twice, with the debugger and without; the loss of every micro-batch and the final
parameters must be bit-identical. The dump must hold one step directory per selected optimizer step,
and in it both micro-batches: every module's forward counted 0 and 1, the first module's input being
that micro-batch's data (float64 numpy reference).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from msprobe.core.config import ConfigError
from msprobe.pytorch import PrecisionDebugger

sys.path.insert(0, str(Path(__file__).parents[1] / "common"))  # the shared reference (importlib mode)
from stats_reference import close, reference  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ACCUMULATE = 2
SELECTED = [0, 2]  # of 3 optimizer steps
CONFIG = {"task": "statistics", "level": "mix", "step": SELECTED}
_COUNTED = re.compile(r"(Module\..+)\.(forward|backward)\.(\d+)$")


def check_dump(dump_path: Path, micro_batches: dict[int, list[np.ndarray]], first_module: str,
               rank_dir: str = "rank") -> None:
    """One step directory per selected optimizer step, each with every micro-batch of that step."""
    assert sorted(os.listdir(dump_path)) == [f"step{n}" for n in SELECTED]
    for step in SELECTED:
        data = json.loads((dump_path / f"step{step}" / rank_dir / "dump.json").read_text())["data"]
        counters: dict[tuple[str, str], set[int]] = {}
        for name in data:
            match = _COUNTED.match(name)
            if match:
                counters.setdefault((match[1], match[2]), set()).add(int(match[3]))
        forwards = {key: seen for key, seen in counters.items() if key[1] == "forward"}
        assert forwards and all(seen == set(range(ACCUMULATE)) for seen in forwards.values()), forwards
        assert all(seen == set(range(ACCUMULATE)) for key, seen in counters.items() if key[1] == "backward")
        assert len(micro_batches[step]) == ACCUMULATE
        for index, batch in enumerate(micro_batches[step]):
            recorded = data[f"{first_module}.forward.{index}"]["input_args"][0]
            expected = reference(batch)
            assert recorded["shape"] == list(batch.shape)
            for key in ("max", "min", "mean", "norm"):
                assert close(recorded[key.capitalize()], expected[key], rel=1e-6), (step, index, key)


def assert_same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


# ---------------------------------------------------------------------------------------- transformers
def _hf_train(output_dir: Path, callbacks: list, max_steps: int = 3, resume: str | None = None, save: bool = False):
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    class RecordingTrainer(Trainer):
        """Keeps each micro-batch's input_ids under the optimizer step it belongs to."""

        micro_batches: dict[int, list[np.ndarray]] = {}

        def training_step(self, model, inputs, num_items_in_batch=None):
            self.micro_batches.setdefault(self.state.global_step, []).append(inputs["input_ids"].numpy().copy())
            return super().training_step(model, inputs, num_items_in_batch)

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16)
    model = LlamaForCausalLM(config)
    ids = torch.randint(0, 64, (12, 8), generator=torch.Generator().manual_seed(1))
    dataset = [{"input_ids": row, "labels": row} for row in ids]
    args = TrainingArguments(
        output_dir=str(output_dir), per_device_train_batch_size=2, gradient_accumulation_steps=ACCUMULATE,
        max_steps=max_steps, logging_steps=1, save_strategy="steps" if save else "no", save_steps=2,
        report_to=[], use_cpu=True, disable_tqdm=True, seed=0,
    )
    trainer = RecordingTrainer(model=model, args=args, train_dataset=dataset, callbacks=callbacks)
    trainer.micro_batches = {}
    trainer.train(resume_from_checkpoint=resume)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, model, trainer.micro_batches


def test_transformers_trainer_dumps_each_selected_optimizer_step_with_its_micro_batches(tmp_path):
    from msprobe.pytorch.integrations.transformers import MsprobeCallback

    plain_losses, plain_model, _ = _hf_train(tmp_path / "plain", [])
    callback = MsprobeCallback(dump_path=str(tmp_path / "dump"), **CONFIG)
    losses, model, micro_batches = _hf_train(tmp_path / "debugged", [callback])

    assert len(losses) == 3 and losses == plain_losses  # the logged loss curve, exactly
    assert_same_parameters(model, plain_model)
    check_dump(tmp_path / "dump", micro_batches, "Module.model.embed_tokens.Embedding")
    assert callback.debugger.finished


def test_transformers_resumed_run_numbers_steps_as_the_trainer_does(tmp_path):
    """After resuming at optimizer step 2, ``step=[3]`` is the trainer's fourth optimizer step."""
    from msprobe.pytorch.integrations.transformers import MsprobeCallback

    _hf_train(tmp_path / "out", [], max_steps=2, save=True)
    callback = MsprobeCallback(dump_path=str(tmp_path / "dump"), task="statistics", level="L0", step=[3])
    resume = str(tmp_path / "out" / "checkpoint-2")
    _, _, micro_batches = _hf_train(tmp_path / "out", [callback], max_steps=4, resume=resume)

    assert sorted(micro_batches) == [2, 3]
    assert sorted(os.listdir(tmp_path / "dump")) == ["step3"]
    data = json.loads((tmp_path / "dump/step3/rank/dump.json").read_text())["data"]
    for index, batch in enumerate(micro_batches[3]):
        recorded = data[f"Module.model.embed_tokens.Embedding.forward.{index}"]["input_args"][0]
        assert recorded["Max"] == batch.max() and recorded["Min"] == batch.min()


def test_callbacks_check_their_arguments_before_training(tmp_path):
    from msprobe.pytorch.integrations.lightning import MsprobeCallback as LightningCallback
    from msprobe.pytorch.integrations.transformers import MsprobeCallback

    with pytest.raises(ConfigError, match="level"):
        MsprobeCallback(dump_path=str(tmp_path / "a"), task="statistics", level="L7")
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "b"), task="statistics", level="L1")
    with pytest.raises(TypeError, match="not both"):
        LightningCallback(debugger, step=[0])
    assert LightningCallback(debugger).debugger is debugger


# ------------------------------------------------------------------------------------------- Lightning
def _regression_data(rows: int) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(torch.randn(rows, 4, generator=generator),
                                          torch.randn(rows, 1, generator=generator))


def _small_net() -> torch.nn.Module:
    """Seeded: both runs of a comparison start from the same weights."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _lightning_train(callbacks: list, fail_at_batch: int | None = None):
    import pytorch_lightning as pl

    class Regressor(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _small_net()
            self.losses: list[torch.Tensor] = []
            self.micro_batches: dict[int, list[np.ndarray]] = {}

        def training_step(self, batch, batch_idx):
            x, y = batch
            if batch_idx == fail_at_batch:
                raise RuntimeError("the training fails")
            self.micro_batches.setdefault(self.trainer.global_step, []).append(x.numpy().copy())
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.losses.append(loss.detach().clone())
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=0.05)

    data = _regression_data(16)
    module = Regressor()
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_steps=3, accumulate_grad_batches=ACCUMULATE, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
    )
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=2))
    return [loss.item() for loss in module.losses], module


def test_lightning_trainer_dumps_each_selected_optimizer_step_with_its_micro_batches(tmp_path):
    from msprobe.pytorch.integrations.lightning import MsprobeCallback

    plain_losses, plain_module = _lightning_train([])
    callback = MsprobeCallback(dump_path=str(tmp_path / "dump"), **CONFIG)
    losses, module = _lightning_train([callback])

    assert len(losses) == 3 * ACCUMULATE and losses == plain_losses
    assert_same_parameters(module, plain_module)
    check_dump(tmp_path / "dump", module.micro_batches, "Module.net.0.Linear")
    assert callback.debugger.finished


def test_lightning_training_that_raises_leaves_its_open_step_written(tmp_path):
    from msprobe.pytorch.integrations.lightning import MsprobeCallback

    callback = MsprobeCallback(dump_path=str(tmp_path / "dump"), task="statistics", level="L0", step=[1])
    with pytest.raises(RuntimeError, match="the training fails"):
        _lightning_train([callback], fail_at_batch=3)  # the second micro-batch of optimizer step 1
    data = json.loads((tmp_path / "dump" / "step1" / "rank" / "dump.json").read_text())["data"]
    assert "Module.net.0.Linear.forward.0" in data and "Module.net.0.Linear.forward.1" not in data
    assert callback.debugger.finished


def test_lightning_leaves_a_debugger_of_yours_running(tmp_path):
    from msprobe.pytorch.integrations.lightning import MsprobeCallback

    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), task="statistics", level="L0", step=[2, 5])
    _lightning_train([MsprobeCallback(debugger)])
    assert (tmp_path / "dump" / "step2" / "rank" / "dump.json").is_file()
    assert not debugger.finished and PrecisionDebugger.running() is debugger


class _BrokenDebugger:
    """A debugger whose start fails, as a bug inside msprobe would."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self, model=None):
        self.calls.append("start")
        raise RuntimeError("a bug inside msprobe")

    def stop(self):
        self.calls.append("stop")

    def step(self):
        self.calls.append("step")

    def finish(self):
        self.calls.append("finish")


def test_a_failure_inside_msprobe_is_logged_once_and_training_goes_on(msprobe_log):
    from msprobe.pytorch.integrations.lightning import MsprobeCallback

    plain_losses, _ = _lightning_train([])
    broken = _BrokenDebugger()
    losses, _ = _lightning_train([MsprobeCallback(broken)])

    assert losses == plain_losses
    assert broken.calls == ["start", "finish"]  # nothing more is asked of it after the failure
    failures = [r for r in msprobe_log.records if r.levelno >= logging.ERROR]
    assert len(failures) == 1 and "training goes on" in failures[0].getMessage()


# ------------------------------------------------------------------------------------------ Accelerate
def _accelerate_train(debugger: PrecisionDebugger | None):
    """The loop of docs/pytorch/trainers.md ("Accelerate")."""
    from accelerate import Accelerator

    data = _regression_data(12)
    model = _small_net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATE, cpu=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, torch.utils.data.DataLoader(data, batch_size=2))
    losses, micro_batches, optimizer_step = [], {}, 0
    for x, y in loader:
        with accelerator.accumulate(model):
            if debugger is not None:
                debugger.start(accelerator.unwrap_model(model))  # does nothing while the step is open
            micro_batches.setdefault(optimizer_step, []).append(x.numpy().copy())
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        losses.append(loss.item())
        if accelerator.sync_gradients:  # this micro-batch ended an optimizer step
            optimizer_step += 1
            if debugger is not None:
                debugger.stop()
                debugger.step()
    return losses, accelerator.unwrap_model(model), micro_batches


def test_accelerate_loop_pattern(tmp_path):
    plain_losses, plain_model, _ = _accelerate_train(None)
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), **CONFIG)
    losses, model, micro_batches = _accelerate_train(debugger)

    assert len(losses) == 6 and losses == plain_losses
    assert_same_parameters(model, plain_model)
    check_dump(tmp_path / "dump", micro_batches, "Module.0.Linear")


# ------------------------------------------------------------------------------------------- DeepSpeed
def test_deepspeed_zero_stages_1_2_3_loop_pattern(tmp_path):
    """Two ranks on gloo, ZeRO 1, 2 and 3 in one launch (scripts/integ_deepspeed.py); ZeRO-3 gathers and
    frees each parameter around every use, so the hooks see parameters replaced between calls."""
    pytest.importorskip("deepspeed")
    script = Path(__file__).parent / "scripts" / "integ_deepspeed.py"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
               str(tmp_path)]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, env=environment)
    assert result.returncode == 0, result.stderr[-4000:]
    for stage in (1, 2, 3):
        for rank in (0, 1):
            runs = json.loads((tmp_path / f"stage{stage}.rank{rank}.json").read_text())
            assert runs["debugged"]["losses"] == runs["plain"]["losses"], (stage, rank)
            assert runs["debugged"]["parameters"] == runs["plain"]["parameters"], (stage, rank)
            inputs = [np.array(batch, dtype=np.float32) for batch in runs["debugged"]["inputs"]]
            by_step = {n: inputs[n * ACCUMULATE:(n + 1) * ACCUMULATE] for n in SELECTED}
            check_dump(tmp_path / f"dump{stage}", by_step, "Module.0.Linear", rank_dir=f"rank{rank}")


def test_docs_trainer_and_lightning_examples_run_as_written(tmp_path):
    page = (Path(__file__).parents[2] / "docs" / "pytorch" / "trainers.md").read_text()
    hf_example, lightning_example = re.findall(r"```python\n(.*?)```", page, flags=re.S)[:2]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", hf_example + lightning_example], cwd=tmp_path, env=environment,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    dumps = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("dump.json"))
    assert dumps == [f"dump_{name}/step{n}/rank/dump.json" for name in ("hf", "lightning") for n in SELECTED]


def test_importing_msprobe_pytorch_and_its_integrations_package_imports_no_trainer_library():
    code = (
        "import sys, msprobe.pytorch, msprobe.pytorch.integrations\n"
        "from msprobe.pytorch import PrecisionDebugger\n"
        "print(sorted(m for m in ('transformers', 'pytorch_lightning', 'lightning', 'accelerate') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
