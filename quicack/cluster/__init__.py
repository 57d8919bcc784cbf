"""Running quicack's work on a Dask cluster: ``quicack analyze --cluster`` and ``quicack scan
--cluster`` (:mod:`quicack.cluster.connection`, :mod:`quicack.cluster.ingest`,
:mod:`quicack.cluster.vantages`).

Theory of operation: Dask distributed schedules the work (one task per input file, or one per
vantage point); each task writes a store of its own (a shard) and the client appends the finished
shards to ``--db`` with :func:`quicack.store.merge.merge`.  A shard is named as finished only after
its store was closed, so a task on a worker killed half-way leaves nothing that is combined, and
Dask runs the task again on another worker.  Dask is an optional extra (``quicack[cluster]``).
"""
