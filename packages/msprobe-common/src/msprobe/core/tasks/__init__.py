"""Tasks as plugins (docs/architecture.md): each module of this folder is one task — its config
section, how that section is read, its cross-field rules, and what the debugger runs for it — and
registers itself in :mod:`.registry`. :mod:`.builtin` registers the tasks msprobe ships.

Nothing is imported here: the configuration imports :mod:`.registry`, which must not pull in the task
modules (they import the configuration).
"""
