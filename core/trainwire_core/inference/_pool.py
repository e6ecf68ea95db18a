"""The private descriptor pool behind trainwire's Open Inference Protocol stubs.

tritonclient (and KServe, MLServer, ...) register their own copy of Triton's
``grpc_service.proto`` in protobuf's default pool, under the same ``inference.*``
names as trainwire's. Two different files defining one symbol cannot share a
pool ("duplicate symbol 'inference.ServerLiveRequest'"), and de-duplication by
identical content would tie trainwire to one tritonclient release: each release
adds messages and fields. So the generated ``grpc_service_pb2`` builds its
descriptors here, in a pool of its own, and its message classes with
``message_factory.GetMessageClass``; whatever another package puts in the
default pool, in either import order, does not meet it. The wire format is the
same: a message serialized by one side parses on the other.

``scripts/gen_protos.py`` rewrites protoc's output to call this module.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor, descriptor_pb2, descriptor_pool, message_factory

POOL = descriptor_pool.DescriptorPool()


def _add_file(name: str) -> None:
    """Copies an imported file (a well-known type) from the default pool into POOL, imports first."""
    try:
        POOL.FindFileByName(name)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
    for dependency in proto.dependency:
        _add_file(dependency)
    POOL.AddSerializedFile(proto.SerializeToString())


def AddSerializedFile(serialized: bytes) -> descriptor.FileDescriptor:  # noqa: N802 - the pool method it replaces
    """Adds a generated file to POOL (its imports too, which the stub's own imports have loaded)."""
    for dependency in descriptor_pb2.FileDescriptorProto.FromString(serialized).dependency:
        _add_file(dependency)
    return POOL.AddSerializedFile(serialized)


def _message_class(desc: descriptor.Descriptor, module_name: str, prefix: str) -> type:
    cls = message_factory.GetMessageClass(desc)
    cls.__module__ = module_name
    cls.__qualname__ = prefix + desc.name
    for nested in desc.nested_types:
        _message_class(nested, module_name, f"{cls.__qualname__}.")
    return cls


def BuildTopDescriptorsAndMessages(  # noqa: N802 - mirrors google.protobuf.internal.builder
    file_des: descriptor.FileDescriptor, module_name: str, module: dict[str, Any]
) -> None:
    """What protobuf's builder does for a generated module, without touching the default pool.

    The builder's version registers every class in the default symbol database
    (and, with the pure-Python runtime, its descriptors in the default pool);
    this one only makes the classes, with ``GetMessageClass``.
    """
    from google.protobuf.internal import enum_type_wrapper

    for name, enum_des in file_des.enum_types_by_name.items():
        module["_" + name.upper()] = enum_des
        module[name] = enum_type_wrapper.EnumTypeWrapper(enum_des)
        for value in enum_des.values:
            module[value.name] = value.number
    for name, service in file_des.services_by_name.items():
        module["_" + name.upper()] = service
    for name, msg_des in file_des.message_types_by_name.items():
        module[name] = _message_class(msg_des, module_name, "")
