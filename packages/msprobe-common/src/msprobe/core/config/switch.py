"""``dump_enable``: capture switched on and off without a restart, by editing config.json
(docs/config.md#switching-capture-on-and-off-while-training-runs).

When config.json holds ``dump_enable``, the session asks :meth:`DumpSwitch.enabled` at the first
``start()`` of every step. Asking costs one ``os.stat`` of the file, no thread and no read: only when the
file's modification time, size or inode changed is it read again, and only its ``dump_enable`` is taken
from it (every other key keeps the value the debugger was built with). So a flip made while step N runs
starts or stops capture at step N+1, and a step that started capturing finishes as it started.

A file that cannot be read, is no JSON object or gives ``dump_enable`` a value other than a JSON boolean
changes nothing: one warning line says so, and the file is read again at its next change. Deleting the
key keeps the current state.
"""

from __future__ import annotations

import os

from msprobe.core.config.fields import FieldReader
from msprobe.core.config.load import CONFIG_MAX_BYTES
from msprobe.core.services.jsonfile import JsonFileError, load_json_file
from msprobe.core.services.log import logger

KEY = "dump_enable"


class DumpSwitch:
    """Whether capture is on: ``enabled`` as config.json gave it at construction (``None``: the key is absent,
    capture is on and the file is not watched), then as the file says whenever it changes."""

    def __init__(self, file: str | None, enabled: bool | None) -> None:
        self.file = file if enabled is not None else None  # watched only when the file holds the key
        self._enabled = enabled is not False
        self._signature = self._stat() if self.file is not None else None

    @property
    def watched(self) -> bool:
        return self.file is not None

    def enabled(self) -> bool:
        """Capture is on; with a watched file, its current ``dump_enable`` (one ``os.stat``)."""
        if self.file is not None:
            signature = self._stat()
            if signature != self._signature:
                self._signature = signature
                self._reread()
        return self._enabled

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            status = os.stat(self.file)
        except OSError:
            return None
        return status.st_mtime_ns, status.st_size, status.st_ino

    def _reread(self) -> None:
        state = "on" if self._enabled else "off"
        try:
            raw = load_json_file(self.file, CONFIG_MAX_BYTES)
            if not isinstance(raw, dict):
                raise JsonFileError(self.file, "holds no JSON object {...} at the top level")
        except JsonFileError as error:
            logger.warning(f"config file {self.file} changed but cannot be read ({error.detail}); capture stays "
                           f"{state} until the file changes again")
            return
        reader = FieldReader(raw)
        value = reader.optional_flag(KEY)
        if reader.problems:
            logger.warning(f"config file {self.file}: {reader.problems[0]}; capture stays {state} until the file "
                           "changes again")
            return
        if value is not None and value != self._enabled:
            self._enabled = value
            logger.info(f"config file {self.file}: {KEY} is now {str(value).lower()}; capture is "
                        f"{'on' if value else 'off'} from this step on")
