"""What msprobe does inside the user's training loop besides its hooks: ``seed_all`` (every random source
fixed), the dropout rule (p = 0 while dumping), ``enable_dataloader`` (the DataLoader drives the steps),
``module_dump`` (one module collected as a unit) and ``load`` (modules fed the inputs of an earlier dump).
The map: docs/architecture.md#three-packages.
"""
