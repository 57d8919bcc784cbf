"""Plain-text views for the terminal: the ingest summary, aligned tables, compared connections.

Theory of operation: each function turns a result of the Python API into lines of text and
prints nothing; :mod:`quicack.cli` prints them (warnings and errors to stderr, the rest to
stdout), and tests read them without a terminal.
"""

from __future__ import annotations

from quicack.model import Summary


def table(title: str, columns: list[str], rows: list[tuple]) -> list[str]:
    """A plain, aligned text table (numbers with 3 decimals, NULL as '-')."""
    cells = [list(columns)]
    for row in rows:
        cells.append(["-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v) for v in row])
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return [title] + ["  " + "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
                      for r in cells]


#: Space a store's file holds beyond its rows from which the summary suggests `quicack vacuum`.
UNUSED_HINT_BYTES = 32 << 20


def summary_problems(summary: Summary) -> list[str]:
    """Each file's warnings and error, for stderr."""
    lines = []
    for f in summary.files:
        lines.extend(f"warning: {w}" for w in f.warnings)
        if f.error:
            lines.append(f"error: {f.error}")
    return lines


def summary_lines(summary: Summary, db: str) -> list[str]:
    """What ``quicack analyze`` prints after the files: counts, events kept aside, failures, and
    the files' connections by handshake class."""
    ingested, unchanged, refused = (summary.count(s) for s in ("ingested", "unchanged", "refused"))
    lines = [f"files: {len(summary.files)} ({ingested} ingested, {unchanged} unchanged, "
             f"{refused} refused) into {db}",
             f"connections: {summary.connections}  packets: {summary.packets}  events: {summary.events}"]
    skipped = summary.skipped_events
    if skipped:
        listed = ", ".join(f"{name or '(no name)'} {n}" for name, n in list(skipped.items())[:12])
        more = f", … {len(skipped) - 12} more names" if len(skipped) > 12 else ""
        lines.append(f"events kept in other_events: {sum(skipped.values())} ({listed}{more})")
    if summary.skipped:
        lines.append(f"skipped in the folders: {sum(summary.skipped.values())} "
                     f"({', '.join(f'{n} {why}' for why, n in sorted(summary.skipped.items(), key=lambda kv: -kv[1]))})")
    if refused:
        lines.append(f"failures: {refused}")
    if summary.store_unused_bytes > UNUSED_HINT_BYTES:
        lines.append(f"the store's file holds {summary.store_unused_bytes / 1e6:.0f} MB beyond its rows (ingests killed "
                     f"while committing?): `quicack vacuum --db {db}` gives them back")
    if summary.file_ids:
        lines.extend(table("handshakes by class:", *summary.handshake_classes))
    return lines


def compared_lines(pairs, limit: int) -> list[str]:
    """``quicack compare``'s report of paired connections (quicack.store.compare.PairResult)."""
    lines = []
    for pair in pairs:
        lines.append(f"connection {pair.odcid or '?'}: A {pair.a_vantage}, B {pair.b_vantage}: "
                     f"{pair.matched} packets in both, {pair.only_a} only in A, {pair.only_b} only in B")
        for sender, (n, med_abs, max_abs, med) in pair.time_stats.items():
            lines.append(f"  {sender}-sent packets: time B − A median {med:+.3f} ms, "
                         f"|B − A| median {med_abs:.3f} ms, max {max_abs:.3f} ms ({n} packets)")
        if pair.ok:
            lines.append("  no differences")
            continue
        lines.append(f"  {len(pair.differences)} differences:")
        lines.extend(f"    {d.sender} {d.space or '-'} pn {d.packet_number}: {d.detail}"
                     for d in pair.differences[:limit])
        if len(pair.differences) > limit:
            lines.append(f"    … {len(pair.differences) - limit} more (--limit)")
    return lines
