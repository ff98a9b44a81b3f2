"""Reading config.json and turning it, with the constructor's overrides, into a DebuggerConfig.

Everything wrong with the file is collected first and raised once, so the user fixes the whole
file in one go instead of discovering one problem per run of a long training job.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from msprobe.core.config.dump_path import dump_path_problem
from msprobe.core.config.errors import MISSING, ConfigError, Problem
from msprobe.core.config.fields import FieldReader, one_of
from msprobe.core.config.frameworks import capabilities_of, framework_names, names_with
from msprobe.core.config.keys import COMMON_KEYS, warn_unused_keys
from msprobe.core.config.model import (
    DEBUG_LEVEL,
    DEFAULT_CUSTOM_OP_NAMESPACES,
    DEFAULT_DUMP_PATH,
    DEFAULT_LEVEL,
    DEFAULT_TASK,
    LEVELS,
    DebuggerConfig,
)
from msprobe.core.config.module_load import read_module_load
from msprobe.core.config.rules import RuleContext, cross_field_problems
from msprobe.core.lifecycle.layout import DEFAULT_DUMP_FORMAT, DUMP_FORMATS
from msprobe.core.lifecycle.risk import RISK_LEVELS
from msprobe.core.services.jsonfile import JsonFileError, MiB, load_json_file
from msprobe.core.services.log import logger
from msprobe.core.tasks.registry import task_named, task_names

CONFIG_MAX_BYTES = 16 * MiB  # a config.json is a few KB; anything this large is not one


def _fail(file: str, detail: str) -> ConfigError:
    return ConfigError(file=file, detail=detail)


def _warn_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            logger.warning("config key %r appears more than once in one object; the last value is used", key)
        result[key] = value
    return result


def read_config_file(file: str) -> dict[str, object]:
    """The top-level JSON object of ``file``; anything else raises a ConfigError naming the file.

    Parsing goes through :func:`msprobe.core.services.jsonfile.load_json_file`, like every JSON file msprobe
    reads, so a deeply nested or oversized file is a ConfigError too, not a raw traceback.
    """
    try:
        data = load_json_file(file, CONFIG_MAX_BYTES, object_pairs_hook=_warn_duplicates)
    except JsonFileError as error:
        raise _fail(file, error.detail) from None
    if not isinstance(data, dict):
        raise _fail(file, f"must hold a JSON object {{...}} at the top level, not a {type(data).__name__}")
    return data


def _section_reader(raw: Mapping[str, object], task: str) -> FieldReader:
    value = raw.get(task)
    reader = FieldReader(value if isinstance(value, Mapping) else {}, prefix=f"{task}.")
    if value is not None and not isinstance(value, Mapping):
        reader.problems.append(Problem(task, value, f"an object {{...}} with the keys of the {task} section"))
    return reader


def build_config(
    config_path: str | os.PathLike[str] | None,
    framework: str,
    overrides: Mapping[str, object],
    *,
    for_debugger: bool,
) -> DebuggerConfig:
    """Validate the file's common keys (or the overriding arguments), then the effective task's section."""
    if framework not in framework_names():
        raise ValueError(f"framework: got {framework!r}; allowed: {one_of(framework_names())}")
    capabilities = capabilities_of(framework)
    file = None if config_path is None else os.path.abspath(os.fspath(config_path))
    raw = {} if file is None else read_config_file(file)
    arguments = {key: value for key, value in overrides.items() if value is not None}
    from_file = FieldReader({key: value for key, value in raw.items() if key not in arguments})
    from_arguments = FieldReader(arguments, suffix=" (argument)")

    def reader_for(key: str) -> FieldReader:
        return from_arguments if key in arguments else from_file

    tasks = task_names()
    task = reader_for("task").choice("task", tasks, DEFAULT_TASK)
    level = reader_for("level").choice("level", LEVELS, DEFAULT_LEVEL)
    dump_path = reader_for("dump_path").text("dump_path", DEFAULT_DUMP_PATH, non_empty=True)
    if for_debugger and "dump_path" not in reader_for("dump_path").invalid:  # the debugger writes there
        problem = dump_path_problem(dump_path)
        if problem is not None:
            reader_for("dump_path").report("dump_path", dump_path, problem)
    if file is not None and task != "run_ut" and not reader_for("dump_path").given("dump_path"):
        from_file.report(
            "dump_path",
            MISSING,
            "a non-empty string (required in a config file unless dump_path is passed as an argument)",
        )
    if for_debugger and task_named(task).build is None:
        reader_for("task").report(
            "task",
            task,
            f"{one_of(tuple(t for t in tasks if task_named(t).build is not None))}; {task} configures the "
            f"`msprobe -f {framework} {task}` command, not the debugger",
        )
    if level == DEBUG_LEVEL and task in tasks and not task_named(task).saves_variables:
        savers = tuple(t for t in tasks if task_named(t).saves_variables)
        reader_for("level").report("level", level, f"{one_of(tuple(v for v in LEVELS if v != DEBUG_LEVEL))} for "
                                   f"task {task} (level 'debug' is for tasks {' and '.join(savers)}: "
                                   "PrecisionDebugger.save)")
    rank = from_file.indices("rank", ())
    step = reader_for("step").indices("step", ())
    enable_dataloader = from_file.flag("enable_dataloader", False)
    dump_enable = from_file.optional_flag("dump_enable")
    risk_level = from_file.choice("risk_level", RISK_LEVELS, "ALL")
    low_risk_apis = from_file.names("low_risk_apis")
    dump_format = from_file.choice("dump_format", DUMP_FORMATS, DEFAULT_DUMP_FORMAT)
    custom_op_namespaces = _namespaces(from_file)
    module_load, load_problems = read_module_load(raw.get("load"))
    if raw.get("load") is not None and not capabilities.module_load:
        load_problems = [Problem("load", "{...}", "no load key: module input replay is "
                                 f"{names_with(lambda c: c.module_load)} only")]
    elif raw.get("load") is not None and capabilities.static_graph_l2 and level == "L2":
        load_problems = [Problem("load", "{...}", f"no load key at level L2 ({capabilities.display} static graph "
                                 "has no cell call to feed; load runs at levels L0, L1 and mix)")]

    warn_unused_keys(raw, task)
    if enable_dataloader and capabilities.dataloader_steps:
        logger.warning(
            "enable_dataloader is deprecated (as announced by msprobe 1.1.1); call start/stop/step instead"
        )
    section_reader = _section_reader(raw, task)
    section = task_named(task).parse(section_reader)
    context = RuleContext(
        capabilities=capabilities,
        task=task,
        level=level,
        enable_dataloader=enable_dataloader,
        section=section,
        paths={key: reader_for(key).path(key) for key in COMMON_KEYS},
        invalid=frozenset(from_file.invalid | from_arguments.invalid | section_reader.invalid),
    )
    problems = (
        from_file.problems
        + from_arguments.problems
        + section_reader.problems
        + load_problems
        + cross_field_problems(context, task_named(task).rules, tuple(t for t in tasks if task_named(t).build is None))
    )
    if problems:
        raise ConfigError(problems, file=file)
    return DebuggerConfig(
        framework=framework,
        task=task,
        dump_path=dump_path,
        rank=rank,
        step=step,
        level=level,
        enable_dataloader=enable_dataloader,
        section=section,
        risk_level=risk_level,
        low_risk_apis=low_risk_apis,
        dump_enable=dump_enable,
        dump_format=dump_format,
        custom_op_namespaces=custom_op_namespaces,
        load=module_load,
        config_file=file,
    )


def _namespaces(reader: FieldReader) -> tuple[str, ...]:
    """custom_op_namespaces: ``torch.ops`` namespaces (identifiers, as ``torch.library`` requires them)."""
    if not reader.given("custom_op_namespaces"):
        return DEFAULT_CUSTOM_OP_NAMESPACES
    names = reader.names("custom_op_namespaces")
    for index, name in enumerate(names):
        if not name.isidentifier():
            reader.report("custom_op_namespaces", name, "an operator namespace such as 'mylib' (a Python identifier, "
                          "as in torch.ops.mylib)", index)
    return DEFAULT_CUSTOM_OP_NAMESPACES if "custom_op_namespaces" in reader.invalid else names


def load_config(
    config_path: str | os.PathLike[str] | None = None,
    *,
    framework: str,
    task: str | None = None,
    dump_path: str | None = None,
    level: str | None = None,
    step: list | None = None,
) -> DebuggerConfig:
    """Load and validate ``config_path`` (``None``: built-in defaults) for ``framework``.

    ``task``, ``dump_path``, ``level`` and ``step`` override the file; the section read is the one
    of the effective task. Raises :class:`ConfigError` listing every problem found.
    """
    overrides = {"task": task, "dump_path": dump_path, "level": level, "step": step}
    return build_config(config_path, framework, overrides, for_debugger=False)


def load_debugger_config(
    config_path: str | os.PathLike[str] | None = None,
    *,
    framework: str,
    task: str | None = None,
    dump_path: str | None = None,
    level: str | None = None,
    step: list | None = None,
) -> DebuggerConfig:
    """Like :func:`load_config`, for PrecisionDebugger: task ``run_ut`` is a problem, since it
    configures the ``msprobe -f pytorch run_ut`` command rather than collection."""
    overrides = {"task": task, "dump_path": dump_path, "level": level, "step": step}
    return build_config(config_path, framework, overrides, for_debugger=True)
