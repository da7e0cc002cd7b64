"""The kinds of move, each with its plan and its checks, apart from the switches (``planning.py``), which
move applications between copies of the same topics rather than the data itself:

- a **topic** move (``topic.py``): who moves with a topic — the applications the gateways saw use it,
  and the keys that take them along — or why it must not move; the ``TopicMigration`` saga;
- a **partition** move (``partition.py``): whether a partition may migrate, and from where; what is
  checked of the migrations once in effect — a fault migration's origin end, aging, which origin topics
  may be retired (``partition_aging.py``) — and the schedule that runs those checks
  (``aging_schedule.py``);
- a **cluster** move (``cluster.py``): every topic of a cluster and every application using them, in
  batches an application never spans, or what stops it; the ``ClusterEvacuation`` saga, each batch a
  switchover of its own (docs/runbooks/cluster-move.md).
"""
