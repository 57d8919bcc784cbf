"""quicack.store.settings: settings changed for a step come back as they were, sizes included."""

import duckdb

from quicack.store import settings


def current(con, name):
    return con.execute(f"SELECT current_setting('{name}')").fetchall()[0][0]


def test_settings_come_back_after_the_block_even_when_it_fails():
    con = duckdb.connect()
    threads = current(con, "threads")
    try:
        with settings.changed(con, threads=1) as saved:
            assert current(con, "threads") == 1 and saved == {"threads": threads}
            raise RuntimeError("step failed")
    except RuntimeError:
        pass
    assert current(con, "threads") == threads


def test_a_memory_limit_does_not_shrink_as_it_is_changed_and_restored_again_and_again():
    # A size reads back rounded down: setting what was read each time would lose ~0.1 GiB a round.
    con = duckdb.connect()
    default = current(con, "memory_limit")
    for _ in range(5):
        with settings.changed(con, memory_limit="96MB"):
            assert current(con, "memory_limit") == "91.5 MiB"
    assert current(con, "memory_limit") == default
    con.execute("SET memory_limit = '3.3GiB'")
    first = None
    for _ in range(5):
        with settings.changed(con, memory_limit="96MB"):
            pass
        first = first or current(con, "memory_limit")
        assert current(con, "memory_limit") == first  # at most the first round's rounding
    assert float(first.split()[0]) >= 3.1
