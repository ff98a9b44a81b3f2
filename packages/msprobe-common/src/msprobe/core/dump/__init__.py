"""The dump wing: what turns the calls a framework reports into a dump on disk.

The collector keeps selected calls (:mod:`.collector`), encodes their values (:mod:`.encode`) into
records (:mod:`.records`) whose statistics are computed in host memory (:mod:`.host_stats`) or left on a
device and fetched in batches (:mod:`.device_stats`), and writes dump.json, stack.json, construct.json
(:mod:`.json_files`, with the user's stack from :mod:`.user_stack`) and tensor files
(:mod:`.tensor_writer`). What every task that watches calls shares (the call contract, the session,
the selector, entry names) stays in ``msprobe.core``; see docs/architecture.md.
"""
