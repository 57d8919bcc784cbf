"""PTO expiries in aioquic's qlog, for the testbed's own endpoints.

Theory of operation: aioquic 1.7.2 logs neither its loss detection timer nor its PTO count; a
PTO shows in its qlog only as ``packet_lost`` events (it declares the CRYPTO packets it
retransmits lost, without saying why) and the packets sent after them, which threshold-based
loss detection produces too.  :class:`LoggedPto` is a mixin for an aioquic ``QuicConnection``
(the testbed's client, quicack's servers) that writes one qlog event when the timer fires as a
PTO, the event qlog 0.3 defines for it:

    recovery:loss_timer_updated {"timer_type": "pto", "event_type": "expired"}

The store keeps it in ``timers``; the RFC 9002 replay then knows the PTO count at each sample,
and ``testbed_runs`` counts the expiries per side.  What is a PTO is aioquic's own decision,
read here from its state just before it acts: RFC 9002 §6.2.1 (A.9 ``OnLossDetectionTimeout``):
"earliest_loss_time, pn_space = GetLossTimeAndSpace() / if (earliest_loss_time != 0): // Time
threshold loss Detection ... return" — the timer is a loss timer when some space has a loss
time, and a PTO otherwise (``pto_count++``).
"""

from __future__ import annotations

PTO_EXPIRED = {"timer_type": "pto", "event_type": "expired"}


class LoggedPto:
    """Mixin (before ``QuicConnection`` in the bases): logs each PTO expiry (module docstring)."""

    def handle_timer(self, now: float) -> None:
        logger = self._quic_logger
        # the condition under which aioquic's handle_timer calls on_loss_detection_timeout
        if (logger is not None and self._close_at is not None and now < self._close_at
                and self._loss_at is not None and now >= self._loss_at
                and self._loss._get_loss_space() is None):
            logger.log_event(category="recovery", event="loss_timer_updated", data=dict(PTO_EXPIRED))
        super().handle_timer(now)
