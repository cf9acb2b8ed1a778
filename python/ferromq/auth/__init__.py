"""ACL 2.0: users and access rules as RocketMQ 5.3 manages them (the plain ACL of 4.x is
`ferromq.acl`)."""
