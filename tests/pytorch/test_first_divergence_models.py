"""The first divergence on a real model: bf16 autocast against fp32, with and without one faulted weight.

The model has the layers whose near-zero statistics used to be named as the first divergence of a
fault-free bf16 run (BatchNorm's and LayerNorm's output means, a conv bias gradient ahead of
BatchNorm) and an AdamW step. One middle weight (the second block's ``fc1``) scaled by 1.05 is the
fault the comparison must find: about 12 units of bf16 rounding in its layer's output, against the
8 the rule allows (docs/compare.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch_models import dump_one_step

from msprobe.pytorch.compare import compare


class Block(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
        x = x + self.proj(torch.softmax(q @ k.transpose(-1, -2) / 4, -1) @ v)
        h = self.fc1(self.ln2(x))  # one layer call per line, so each has its own stack frame
        h = nn.functional.gelu(h)
        return x + self.fc2(h)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.embed = nn.Linear(8, 16)
        self.blocks = nn.Sequential(Block(), Block())
        self.norm, self.head = nn.LayerNorm(16), nn.Linear(16, 10)

    def forward(self, x):
        h = nn.functional.gelu(self.bn(self.conv(x)))
        h = self.blocks(self.embed(h.flatten(2).transpose(1, 2)))
        return self.head(self.norm(h).mean(1))


def dump(root: Path, task: str, level: str, bf16: bool, fault: bool) -> Path:
    """One training step (forward, backward, AdamW) from the same initial weights and batch."""
    torch.manual_seed(0)
    net = Net()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 6, 6, generator=gen), torch.randint(0, 10, (4,), generator=gen)
    directory = dump_one_step(net, lambda m: nn.functional.cross_entropy(m(x), y), root, task=task, level=level,
                              autocast=torch.bfloat16 if bf16 else None, fault="blocks.1.fc1" if fault else None,
                              optimizer=optimizer)
    return directory / "dump.json"


RUNS = {"fp32": (False, False), "bf16": (True, False), "bf16_fault": (True, True), "fp32_fault": (False, True)}
MODES = {"statistics": "mix", "tensor": "L1"}


CASES = [(task, run) for task in MODES for run in RUNS if (task, run) != ("tensor", "fp32_fault")]  # saves 3 s


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("first_divergence")
    return {(task, run): dump(root / task / run, task, MODES[task], *RUNS[run]) for task, run in CASES}


def compared(dumps, task: str, run: str, out: Path):
    return compare({"npu_path": str(dumps[task, run]), "bench_path": str(dumps[task, "fp32"])}, out, workers=1)


@pytest.fixture(scope="module")
def results(dumps, tmp_path_factory):
    """Comparisons against the fp32 run, made once per (task, run) for the tests that only read them."""
    cache: dict = {}

    def get(task: str, run: str):
        if (task, run) not in cache:
            cache[task, run] = compared(dumps, task, run, tmp_path_factory.mktemp(f"{task}_{run}"))
        return cache[task, run]

    return get


def faulted_layer_entries(dumps) -> set[str]:
    """The faulted module's entry and the API call inside it, read from the mix dump: the module's forward
    entry is written when it returns, right after the one linear it ran."""
    names = list(json.loads(dumps["statistics", "fp32"].read_text())["data"])
    module = "Module.blocks.1.fc1.Linear.forward.0"
    api = names[names.index(module) - 1]
    assert api.startswith("Functional.linear.")
    return {module, api}


@pytest.mark.parametrize("task, run", [("statistics", "bf16_fault"), ("tensor", "bf16_fault"),
                                       ("statistics", "fp32_fault")])
def test_a_five_percent_weight_fault_is_named_at_its_layer(dumps, results, task, run):
    found = results(task, run).first_divergence
    assert found is not None and found.entry in faulted_layer_entries(dumps)
    assert found.inputs_pass and found.kind == "forward"
    assert any("h = self.fc1(self.ln2(x))" in frame for frame in found.stack)
    # the weight enters as a diverging parameter; level mix's construct.json names its module, L1 has none
    assert [e.parameter for e in found.entering] == ["blocks.1.fc1.weight" if task == "statistics" else "weight"]


@pytest.mark.parametrize("task", MODES)
def test_bf16_without_a_fault_names_nothing_although_1_1_1_verdicts_fail(dumps, task, tmp_path, msprobe_log):
    result = compared(dumps, task, "bf16", tmp_path)
    optimizer_entries = {d.entry for d in result.optimizer}
    forward_or_backward = [r for r in result.results if r.entry not in optimizer_entries]
    assert any(r.failed for r in forward_or_backward)  # the fixed thresholds fail rows that are bf16 rounding
    assert result.first_divergence is None
    assert "first divergence: none" in msprobe_log.text()
    # AdamW turns a near-zero gradient's rounding into a full-size update: rounding its inputs carry, so
    # no optimizer entry is beyond rounding either; one that were would be reported apart
    assert all(d.kind == "optimizer" for d in result.optimizer)
    assert ("optimizer: " in msprobe_log.text()) == bool(result.optimizer)


def test_near_zero_statistics_that_1_1_1_flags_are_judged_on_the_tensor_rms(results):
    """BatchNorm's output mean is 0 up to rounding: its relative difference is huge, its difference against the
    tensor's RMS (Norm/√numel) is within bf16 rounding."""
    result = results("statistics", "bf16")
    bn_out = next(r for r in result.results if r.npu and r.npu.name == "Functional.batch_norm.0.forward.output.0")
    n, b = bn_out.npu.value, bn_out.bench.value
    assert abs(b["Mean"]) < 1e-6 and bn_out.stat_diffs[2][1] > 0.5 and bn_out.verdict == "Warning"
    rms = max(n["Norm"], b["Norm"]) / np.sqrt(np.prod(b["shape"]))
    assert abs(n["Mean"] - b["Mean"]) / rms < 8 * 2.0**-8
    assert bn_out.excess is not None and bn_out.excess < 1


def test_the_faulted_rows_excess_equals_numpy(dumps, results):
    result = results("tensor", "bf16_fault")
    row = result.first_divergence.failing_rows[0]
    load = [torch.load(dumps["tensor", run].parent / "dump_tensor_data" / row.npu.value["data_name"],
                       weights_only=True).double().numpy().ravel() for run in ("bf16_fault", "fp32")]
    n, b = load
    scale = max(np.linalg.norm(n), np.linalg.norm(b))
    carried = 0.0  # the passing inputs' carries, summed: relative deviation × max(their scale, the output's)
    for inp in (r for r in result.results if r.entry == row.entry and r.part == "input" and r.npu.is_tensor):
        if inp.excess <= 1:
            i_n, i_b = [torch.load(dumps["tensor", run].parent / "dump_tensor_data" / side.value["data_name"],
                                   weights_only=True).double().numpy().ravel()
                        for run, side in (("bf16_fault", inp.npu), ("fp32", inp.bench))]
            in_scale = max(np.linalg.norm(i_n), np.linalg.norm(i_b))
            carried += np.linalg.norm(i_n - i_b) / in_scale * max(in_scale, scale)
    want = np.linalg.norm(n - b) / (8 * 2.0**-8 * scale + carried)
    assert row.excess == pytest.approx(want, rel=1e-9) and 1.1 < want < 2
    assert result.unit == 2.0**-8


class MobileNetLike(nn.Module):
    """mobilenet_v3's tail in small: conv-BN-hardswish stages down to 1x1, so the last BatchNorm normalises 8
    values per channel (the batch) whose mean is large against their spread, and hardswish cuts its negative half."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.bn0 = nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8)
        self.dw, self.bn1 = nn.Conv2d(8, 8, 3, 2, 1, groups=8, bias=False), nn.BatchNorm2d(8)
        self.pw, self.bn2 = nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        h = nn.functional.hardswish(self.bn0(self.stem(x)))
        h = nn.functional.adaptive_avg_pool2d(nn.functional.hardswish(self.bn1(self.dw(h))), 1)
        return self.head(nn.functional.hardswish(self.bn2(self.pw(h))).flatten(1))


def _mobile(root: Path, bf16: bool, fault: str | None = None, seed: int = 2, batch: int = 8,
            task: str = "statistics") -> Path:
    torch.manual_seed(seed)
    x = torch.rand(batch, 3, 8, 8, generator=torch.Generator().manual_seed(seed + 1)) + 8
    labels = torch.arange(batch) % 5
    directory = dump_one_step(MobileNetLike(), lambda m: nn.functional.cross_entropy(m(x), labels), root, task=task,
                              level="mix" if task == "statistics" else "L1",
                              autocast=torch.bfloat16 if bf16 else None, fault=fault)
    return directory / "dump.json"


def _scales(value: dict) -> dict[str, float]:
    norm, count = value["Norm"], int(np.prod(value["shape"]))
    rms = norm / np.sqrt(count)
    peak = max(abs(value["Max"]), abs(value["Min"]), rms)
    return {"Max": peak, "Min": peak, "Mean": rms, "Norm": norm}


def test_rounding_a_hardswish_inherits_from_batch_norm_is_not_a_divergence(tmp_path):
    """Issue 27: the BatchNorm output moves within its own slack; hardswish passes the same absolute change on to
    a smaller output, which the rule without the carry called 1.3 times rounding. A 5% fault still fires."""
    bench = _mobile(tmp_path / "fp32", False)
    clean = compare({"npu_path": str(_mobile(tmp_path / "bf16", True)), "bench_path": str(bench)}, tmp_path / "c1",
                    workers=1)
    assert clean.first_divergence is None
    rows = {r.npu.name: r for r in clean.results if r.npu is not None}
    out, inp = rows["Functional.hardswish.2.forward.output.0"], rows["Functional.hardswish.2.forward.input.0"]
    u8 = 8 * 2.0**-8
    o_n, o_b, i_n, i_b = out.npu.value, out.bench.value, inp.npu.value, inp.bench.value
    o_s, i_s = ({k: max(a[k], b[k]) for k in a}
                for a, b in ((_scales(o_n), _scales(o_b)), (_scales(i_n), _scales(i_b))))
    keys, extremes = ("Max", "Min", "Mean", "Norm"), ("Max", "Min")
    without_carry = max(abs(o_n[k] - o_b[k]) / (u8 * o_s[k]) for k in keys)  # the rule before issue 27
    moved = {k: abs(i_n[k] - i_b[k]) / i_s[k] for k in keys}
    rho = {k: max(moved.values()) if k in extremes else max(moved["Mean"], moved["Norm"]) for k in keys}
    slack = {k: u8 * (8 if k in extremes else 1) for k in keys}  # an extreme is one element: 8 times the slack
    with_carry = max(abs(o_n[k] - o_b[k]) / (slack[k] * o_s[k] + rho[k] * max(i_s[k], o_s[k])) for k in keys)
    assert without_carry > 1 and inp.excess <= 1  # the false alarm is real: its input passes, its output did not
    assert out.excess == pytest.approx(with_carry, rel=1e-9) and with_carry < 1
    faulted = compare({"npu_path": str(_mobile(tmp_path / "bf16_fault", True, "pw")), "bench_path": str(bench)},
                      tmp_path / "c2", workers=1)
    found = faulted.first_divergence
    assert found is not None and found.entry.startswith(("Functional.conv2d.", "Module.pw."))
    assert [e.parameter for e in found.entering] == ["pw.weight"]


# Of seeds 0 to 29 of the mobilenet tail, the rule before issue 27 named an entry in 10 fault-free bf16 runs (a
# BatchNorm over 32 or 8 values per channel, or the head after one), and names none now. Each time a Max or Min
# moved 5 to 30 units while Norm and Mean stayed within 4: single elements that a BatchNorm over a few closely
# spaced values amplified. Four of those seeds, one per place it named:
@pytest.mark.parametrize("seed", [0, 6, 13, 20])
def test_fault_free_mobilenet_tails_name_nothing(tmp_path, seed):
    bench = _mobile(tmp_path / "fp32", False, seed=seed)
    clean = compare({"npu_path": str(_mobile(tmp_path / "bf16", True, seed=seed)), "bench_path": str(bench)},
                    tmp_path / "c", workers=1)
    assert clean.first_divergence is None and clean.amplified is None  # 8 values per channel: not ill-conditioned


def test_after_a_batch_norm_over_two_values_rounding_is_amplified_and_faults_are_named_by_their_weight(
        tmp_path, msprobe_log):
    """Batch 2: the last BatchNorm normalises 2 values per channel, the sign of their difference, which bf16 and
    fp32 choose differently where the two are closer than rounding. The head after it then differs beyond rounding
    with nothing wrong (the rule before issue 27 named it); a 5% fault in the head's weight is still named."""
    bench = _mobile(tmp_path / "fp32", False, seed=5, batch=2)
    clean = compare({"npu_path": str(_mobile(tmp_path / "bf16", True, seed=5, batch=2)), "bench_path": str(bench)},
                    tmp_path / "c1", workers=1)
    assert clean.first_divergence is None
    origin = "Functional.batch_norm.2.forward (normalises 2 values per channel)"
    assert clean.amplified is not None and clean.amplified.origin == origin and clean.amplified.worst > 1
    head = [r for r in clean.results if r.entry.startswith("Functional.linear.") and r.part == "output"]
    assert head and all(r.amplified_by == origin for r in head) and max(r.excess for r in head) > 1
    assert f"rounding amplified: {clean.amplified.rows} rows computed from {origin}" in msprobe_log.text()
    html = clean.reports["html"].read_text()
    assert "<h2>Rounding amplified</h2>" in html and origin in html
    for fault, parameter in (("head", "head.weight"), ("pw", "pw.weight")):  # after the BatchNorm, and before it
        faulted = compare({"npu_path": str(_mobile(tmp_path / fault, True, fault, seed=5, batch=2)),
                           "bench_path": str(bench)}, tmp_path / f"c_{fault}", workers=1)
        assert [e.parameter for e in faulted.first_divergence.entering] == [parameter]


@pytest.mark.parametrize("seed", [0, 7])
def test_a_tensor_compare_carries_a_batch_norm_s_amplification_of_its_input_rounding(tmp_path, seed):
    """The last BatchNorm normalises 8 values per channel whose mean stands far from their spread: it multiplies
    the bf16 rounding its input carries by each channel's RMS over its spread. A tensor compare measures that
    factor on the bench's input; the rule before it named this BatchNorm in 11 of 12 fault-free seeds (1.03 to
    2.01 times rounding). A 5% fault in the conv before it is still named, through its weight."""
    bench = _mobile(tmp_path / "fp32", False, seed=seed, task="tensor")
    clean = compare({"npu_path": str(_mobile(tmp_path / "bf16", True, seed=seed, task="tensor")),
                     "bench_path": str(bench)}, tmp_path / "c1", workers=1)
    assert clean.first_divergence is None
    bn_input = next(r for r in clean.results if r.npu.name == "Functional.batch_norm.2.forward.input.0")
    values = torch.load(bench.parent / "dump_tensor_data" / bn_input.bench.value["data_name"],
                        weights_only=True).double().numpy()
    channels = values.transpose(1, 0, 2, 3).reshape(values.shape[1], -1)
    ratios = np.sqrt((channels**2).mean(axis=1) / (channels.var(axis=1) + 1e-5))
    assert bn_input.tensor.amplification == pytest.approx(np.sqrt(np.mean(ratios**2)), rel=1e-9)
    assert bn_input.tensor.amplification > 3
    faulted = compare({"npu_path": str(_mobile(tmp_path / "pw", True, "pw", seed=seed, task="tensor")),
                       "bench_path": str(bench)}, tmp_path / "c2", workers=1)
    assert faulted.first_divergence.entry == "Functional.conv2d.2.forward"
    assert [e.suffix for e in faulted.first_divergence.entering] == ["input.1"]
