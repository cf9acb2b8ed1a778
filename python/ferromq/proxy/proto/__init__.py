"""The `apache.rocketmq.v2` protocol (the RocketMQ 5.x clients' gRPC contract): the .proto files under
apache/rocketmq/v2/ and, beside them, the modules scripts/gen_protos.py generates from them
(`ferromq.proxy.proto.apache.rocketmq.v2.service_pb2`, `..._pb2_grpc`, `definition_pb2`, `admin_pb2`).

The generated modules register the protos in protobuf's default descriptor pool as `definition.proto`,
`service.proto` and `admin.proto`, the names and the exact serialized descriptors of the official Python
5.x client's copy (`rocketmq.grpc_protocol`): the pool accepts a byte-identical second registration, so
both load in one process, in either order, and share their descriptors (tests/unit/test_proto_coexist.py).
A copy that differs in any byte (another client version, an edited .proto) fails the second import with
"duplicate file name" instead.
"""
