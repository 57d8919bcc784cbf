"""Brackets: JSON text walked without parsing it, for documents cut short.

Theory of operation: a JSON qlog whose writer was killed mid-file ends inside its events, its
brackets left open.  Walking its brackets with strings skipped (a string may hold any bracket)
tells where each complete element ends and which brackets are still open, so the text can be
cut after its last complete event and closed (:func:`closed`, :func:`complete_elements`,
:func:`quicack.qlog.fallback.salvage`).  Used by the cutter of JSON documents
(:mod:`quicack.qlog.document`) and by the parse of a whole one (:mod:`quicack.qlog.fallback`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import orjson

from quicack.qlog.slicing import without_bom

#: the start of an events array, up to its '['
EVENTS_KEY = re.compile(rb'"events"\s*:\s*\[')
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class Irregular(Exception):
    """Text the walk (or the streaming cut) cannot follow; the document is parsed whole instead."""


def tokens(data: bytes) -> Iterator[tuple[re.Match, list[bytes]]]:
    """Each token of ``data`` (a string, or a bracket) with the brackets still open after it;
    raises Irregular at a closing bracket that nothing opened."""
    stack: list[bytes] = []
    for m in _TOKEN.finditer(data):
        tok = m.group()
        if tok in (b"[", b"{"):
            stack.append(tok)
        elif tok in (b"]", b"}"):
            if not stack:
                raise Irregular("a bracket closes what was not opened")
            stack.pop()
        yield m, stack


_MEMBER_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{},:]')


def field_at(data: bytes, pos: int) -> str:
    """The member byte ``pos`` of the JSON text ``data`` is in, as a path (``traces[0].
    configuration.original_uris``; empty at the top): its brackets, keys and commas walked up to
    there, strings skipped (error path only)."""
    stack: list[list] = []  # [bracket, key or index, expecting a key]
    for m in _MEMBER_TOKEN.finditer(data, 0, pos):
        tok = m.group()
        if tok in (b"{", b"["):
            stack.append([tok, None if tok == b"{" else 0, tok == b"{"])
        elif tok in (b"}", b"]"):
            if stack:
                stack.pop()
        elif not stack:
            continue
        elif tok == b",":
            top = stack[-1]
            if top[0] == b"[":
                top[1] += 1
            else:
                top[2] = True
        elif tok == b":":
            stack[-1][2] = False
        elif stack[-1][0] == b"{" and stack[-1][2]:
            try:
                stack[-1][1] = orjson.loads(tok)
            except orjson.JSONDecodeError:
                stack[-1][1] = tok.decode("utf-8", "replace").strip('"')
    path = ""
    for bracket, step, _ in stack:
        if bracket == b"[":
            path += f"[{step}]"
        elif step is not None:
            path += ("." if path else "") + str(step)
    return path


def closers(stack: list[bytes]) -> bytes:
    """The brackets closing those of ``stack``, innermost first."""
    return b"".join(b"]" if t == b"[" else b"}" for t in reversed(stack))


def closed(head: bytes):
    """The document ``head`` begins, every bracket it leaves open closed, or None."""
    stack: list[bytes] = []
    try:
        for _, stack in tokens(head):
            pass
        return orjson.loads(without_bom(head) + closers(stack))
    except (Irregular, orjson.JSONDecodeError):
        return None


def complete_elements(window: bytes) -> tuple[int | None, bool]:
    """Where the last complete element of ``window`` ends (the window begins at an element; None
    if it holds none), and whether the array is closed after it: its brackets walked, strings
    skipped."""
    last = None
    try:
        for m, stack in tokens(window):
            if not stack and m.group() in (b"]", b"}"):
                last = m.end()
    except Irregular:  # the array's own ']'
        return last, True
    return last, False
