"""Access control as RocketMQ 4.9.7's plain ACL: accounts and global white addresses from
`plain_acl.yml`, HmacSHA1 request signatures, per-request topic/group permissions."""
