"""RocketMQ 5.x's POP consumption: the broker tracks what each consumer holds, with an invisible
time, instead of the client rebalancing queues (see `service`)."""
