"""The `apache.rocketmq.v2` protocol (the RocketMQ 5.x clients' gRPC contract): the .proto files under
apache/rocketmq/v2/ and, beside them, the modules scripts/gen_protos.py generates from them
(`ferromq.proxy.proto.apache.rocketmq.v2.service_pb2`, `..._pb2_grpc`, `definition_pb2`, `admin_pb2`).

The generated modules register the protos under their canonical names in protobuf's default descriptor
pool, like every generated module: a process cannot also import another copy of the same contract (the
official Python client's `rocketmq.grpc_protocol`); protobuf refuses the second definition of each name.
"""
