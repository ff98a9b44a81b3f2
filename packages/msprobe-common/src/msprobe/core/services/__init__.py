"""Shared services every room of msprobe uses and none owns.

File and JSON I/O (``fileio``, ``jsonfile``), the logger (``log``), ``MSPROBE_*`` settings, the one undo
type (``handles``), keeping collections off the user's heap (``heap``), lazy package exports (``lazy``),
walking nested arguments (``tree``) and finding framework packages and their commands (``plugin``).
The map: docs/architecture.md#the-rooms-of-msprobecore.
"""
