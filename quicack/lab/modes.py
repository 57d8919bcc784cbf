"""The ACK behaviours quicack's own servers can have, by name.

Theory of operation: ``quicack serve --mode`` and the demo's and testbed's server configurations
name a behaviour; :mod:`quicack.lab.serve` implements each.  The names live here, in a module
that imports nothing, because the command line shows them in ``--help`` without loading aioquic.
``wfc`` waits for the certificate and sends its ACK with the ServerHello; ``iack`` sends an
ACK-only Initial first; ``iack-ping`` adds a PING to it (an RTT sample for the server);
``iack-uncounted`` is ``iack`` whose instant ACK does not count against the anti-amplification
budget (breaking RFC 9000 §8.1 on purpose, :mod:`quicack.lab.iackbudget`); the others misbehave
on purpose, for testing scanners.  The congestion controllers a listener can use
(``quicack serve --congestion``) are named here for the same reason: aioquic's ``reno`` (its slow
start) and ``cubic``, and ``careful-resume`` (:mod:`quicack.lab.carefulcc`).
"""

SERVE_MODES = ("wfc", "iack", "iack-ping", "iack-uncounted", "silent", "garbage", "close", "alert", "retry", "vn")

CONGESTION_CONTROLLERS = ("reno", "cubic", "careful-resume")
