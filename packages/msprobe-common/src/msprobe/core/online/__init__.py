"""Online API pre-check (docs/run_ut_online.md), the framework-free half.

A training job (task ``tensor`` with ``online_run_ut: true``) streams every selected API call to a
checking machine, which replays it with run_ut; nothing is dumped to disk on the training side.

- :mod:`.wire` — the message format: a fixed header and a JSON description plus raw tensor bytes; no
  pickle, every size bounded and checked before anything is allocated;
- :mod:`.tcp`, :mod:`.directory` — how messages travel, one transport each: TCP (TLS unless plain
  loopback) or a shared directory; :mod:`.link` — what the two share;
- :mod:`.sender` — the training side's background thread behind a bounded queue, and the collector
  that turns calls into records;
- :mod:`.receiver` — the checking side: accepted ranks, forward/backward pairing, a worker pool.
"""
