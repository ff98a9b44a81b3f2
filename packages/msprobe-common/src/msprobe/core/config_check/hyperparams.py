"""Hyperparameters from a launch command or a shell script (docs/config_check.md#hyperparameters).

argparse-style flags: ``--key value``, ``--key=value``, ``-k value`` and flags without a value (``--bf16``,
recorded as ``true``). A token is a flag's value only when it is not itself a flag; a negative number
(``--beta -0.5``) is a value. So ``--bf16 --weight-decay 0.1`` reads ``bf16 = true`` and
``weight_decay = 0.1``. Names are normalised (dashes to underscores, lower case) and common aliases map to
one name (``lr`` → ``learning_rate``), so that two launchers spelling the same flag differently agree.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from msprobe.core.services.jsonfile import MiB

FLAG_ONLY = "true"
SCRIPT_MAX_BYTES = 4 * MiB
ALIASES = {
    "lr": "learning_rate", "learningrate": "learning_rate",
    "bs": "batch_size", "batch": "batch_size",
    "wd": "weight_decay", "weightdecay": "weight_decay",
    "epoch": "epochs", "num_epochs": "epochs", "max_epochs": "epochs",
    "dropout": "dropout_rate", "drop_rate": "dropout_rate",
    "seed": "seed", "random_seed": "seed",
}
_NUMBER = re.compile(r"^-\d|^-\.\d|^-inf$|^-nan$", re.IGNORECASE)


def normalise(name: str) -> str:
    key = name.lstrip("-").replace("-", "_").lower()
    return ALIASES.get(key, key)


def _is_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _NUMBER.match(token)


def parse_flags(tokens: Sequence[str]) -> dict[str, str]:
    """Flags of one command line (argv without the program): name → value (``"true"`` for a bare flag)."""
    found: dict[str, str] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token == "--" or not _is_flag(token):
            continue
        name, sep, value = token.partition("=")
        if not sep:
            if index < len(tokens) and not _is_flag(tokens[index]):
                value = tokens[index]
                index += 1
            else:
                value = FLAG_ONLY
        found[normalise(name)] = value
    return found


def script_commands(text: str) -> list[list[str]]:
    """The commands of a shell script as token lists: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\r?\n", " ", text)
    commands = []
    for line in joined.splitlines():
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:  # an unbalanced quote: read what splits on whitespace
            tokens = line.split("#", 1)[0].split()
        if tokens:
            commands.append(tokens)
    return commands


def from_script(path: str | os.PathLike) -> dict[str, str]:
    """Every flag of every command of a launch script (a later command's value wins), plus its
    ``NAME=value`` shell assignments as ``$NAME`` substitutions."""
    source = Path(path)
    if not source.is_file():
        raise ValueError(f"-d {str(source)!r} is not a file: pass the launch script(s) of the run")
    if source.stat().st_size > SCRIPT_MAX_BYTES:
        raise ValueError(f"-d {str(source)!r} is larger than {SCRIPT_MAX_BYTES} bytes: is it a launch script?")
    text = source.read_text(encoding="utf-8", errors="replace")
    variables = dict(re.findall(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=(\S*)", text, flags=re.M))
    found: dict[str, str] = {}
    for tokens in script_commands(text):
        found.update(parse_flags([_substitute(t, variables) for t in tokens]))
    return found


def _substitute(token: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{?([A-Za-z_]\w*)\}?", lambda m: variables.get(m.group(1), m.group(0)).strip("'\""), token)
