"""The lifecycle: what every task that watches calls shares, from ``PrecisionDebugger(...)`` to ``finish``.

``debugger`` (construction, take-over), ``session`` (start, stop, step, finish; errors never reach
training), ``calls`` (counting and naming calls), ``select`` (the one selector), ``naming`` (the name
grammar), ``layout`` (step and rank directories), ``gradients`` (the framework-free half of backward
capture), ``risk`` (risk_level's filter) and ``empty_dump`` (the warning of a run that selected nothing).
The map: docs/architecture.md#the-rooms-of-msprobecore.
"""
