"""The gRPC side of ferromq: the endpoint the RocketMQ 5.x clients (Java, Python, Go, Node.js, Rust SDKs)
talk to, like Apache RocketMQ's proxy (`mqproxy`, `ProxyStartup`).

So far it holds the protocol: `ferromq.proxy.proto` has the `apache.rocketmq.v2` definitions
(MessagingService and its messages) written from the published contract, and the modules generated from
them by scripts/gen_protos.py. Importing this package imports neither grpcio nor protobuf.
"""
