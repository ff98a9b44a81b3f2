"""The honest empty dump: when a configuration selected nothing that ran, say which key did
(docs/config.md#when-nothing-is-dumped).

A config whose ``rank`` no process has, whose ``step`` never came, whose ``scope`` or ``list`` matched no
call, whose ``dump_enable`` stayed false, or whose ``request_id`` no batch held leaves a silently empty
dump_path — the most common complaint of msprobe's users. :class:`SelectionTally` counts, as the session
runs, what each of those keys let through; when the session ends (``finish``, or the interpreter's exit
for a session never finished) :meth:`SelectionTally.empty_message` gives the one warning line, or ``None``
when something was selected.
"""

from __future__ import annotations

from typing import Any


class SelectionTally:
    """What the selection of one session let through, key by key, in the order the session asks them."""

    def __init__(self) -> None:
        self.last_step: int | None = None  # the last step start() was called in
        self.rank: int | None = None
        self.rank_selected = False  # some start() ran on a selected rank
        self.step_selected = False  # ... and in a selected step
        self.switched_on = False  # ... with dump_enable on: capture began
        self.request_asked = False  # ... with request_id set
        self.request_found = False  # ... and a batch that held the request
        self.reported = False

    def started(self, step: int, rank: int | None, rank_selected: bool, step_selected: bool) -> None:
        self.last_step, self.rank = step, rank
        self.rank_selected |= rank_selected
        self.step_selected |= rank_selected and step_selected

    def switched(self, on: bool) -> None:
        self.switched_on |= on

    def requested(self, in_batch: bool) -> None:
        self.request_asked = True
        self.request_found |= in_batch

    def empty_message(self, config: Any, selector: Any) -> str | None:
        """The warning for a session that selected nothing that ran (once), else None."""
        if self.reported or self.last_step is None:
            return None  # start() never called: the user's code never reached the debugger
        self.reported = True
        reason = self._reason(config, selector)
        return None if reason is None else f"msprobe dumped nothing: {reason}"

    def _reason(self, config: Any, selector: Any) -> str | None:
        if not self.rank_selected:
            if self.rank is not None:  # a process group: the other ranks may hold the list (see docs)
                return None
            return (f"rank {list(config.rank)} selected nothing (this run has no process group, so it is rank 0; "
                    "leave rank [] on a single device)")
        if not self.step_selected:
            return (f"step {list(config.step)} selected nothing (the run called start() in steps 0 to "
                    f"{self.last_step}, counted by debugger.step())")
        if not self.switched_on:
            return f"dump_enable was false in every selected step ({config.config_file})"
        if self.request_asked and not self.request_found:
            return (f"request_id {config.section.request_id!r} was in no selected batch (no scheduled_tokens "
                    "given to start() held it)")
        if selector.selected_any or not selector.filters:
            return None
        section = config.section
        scope, names = list(getattr(section, "scope", ())), list(getattr(section, "api_list", ()))
        if not (scope or names):
            return f"risk_level {config.risk_level!r} kept no call (docs/config.md#risk_level-and-tensor_list)"
        if scope and not selector.scope_opened:
            return f"scope {scope} matched no call (its first name never ran; names as dump.json writes them)"
        if names and not selector.list_matched:
            return f"list {names} matched no call (full names or API/module kinds as dump.json writes them)"
        return f"scope {scope} and list {names} each matched calls, but never the same one"
