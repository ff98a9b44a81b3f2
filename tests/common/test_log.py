"""The msprobe logger has library manners: a NullHandler at import, our console format only when the
application configured nothing, and records that reach the application's own handlers."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


def test_import_adds_only_a_null_handler_and_prints_nothing():
    result = _run("""
        import logging
        from msprobe.core.services.log import logger, set_rank
        assert [type(h).__name__ for h in logger.handlers] == ["NullHandler"], logger.handlers
        assert logger.propagate and not logging.getLogger().handlers
        logger.warning("quiet")
    """)
    assert result.returncode == 0, result.stderr
    assert "[msprobe]" not in result.stderr


def test_console_format_when_the_application_configured_nothing():
    result = _run("""
        from msprobe.core.services.log import logger, set_rank, use_console
        use_console(); use_console()
        set_rank(3)
        logger.info("hello")
    """)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "hello" in line]
    assert len(lines) == 1 and lines[0].startswith("[msprobe] ") and "[rank 3] INFO: hello" in lines[0]


def test_an_application_with_handlers_gets_our_records_its_own_way():
    result = _run("""
        import logging
        logging.basicConfig(format="APP %(name)s%(rank_tag)s %(message)s")
        from msprobe.core.services.log import logger, set_rank, use_console
        use_console()
        set_rank(1)
        logger.warning("hello")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "APP msprobe [rank 1] hello"
