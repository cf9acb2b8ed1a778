"""The controller: RocketMQ 5.x's automatic failover for master/slave broker groups.

A small Raft group (PySyncObj) keeps, for each broker group, its master, the master's epoch and
the in-sync replica set (SyncStateSet); its leader elects a new master from that set when the
master stops heartbeating. Brokers talk to it with RocketMQ 5.x's controller request codes.
"""
