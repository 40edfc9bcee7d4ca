"""The Chakra execution-trace schema (``ChakraProtoMsg`` of MLCommons Chakra's ``et_def.proto``).

What: the message classes ``GlobalMetadata``, ``Node``, ``AttributeProto`` and ``IOInfo``
(:func:`schema`) and the ``NodeType``/``CollectiveCommType`` enum values as integer constants.

Source: field names, numbers and types of ``schema/protobuf/et_def.proto`` in the
``mlcommons/chakra`` repository (MIT licence), checked against commits
``f5124d76bb7c3ba2ad67cb8386ad0f450a88e88e`` and ``6dc63e147b9d115286626cc122459e44d9d08401``,
which agree on every field used here (:data:`SCHEMA_SOURCE`). The descriptors are declared
here and built at run time with the ``protobuf`` runtime only (the ``chakra`` extra,
``protobuf>=4.21``). Only the subset traincast writes is declared (``GlobalMetadata``,
``Node``, ``IOInfo``, ``AttributeProto`` with its scalar and five list values, the two enums);
fields of other producers' files outside it are kept as unknown fields when reading.

Checked too against ``mlc-chakra`` 1.0.0 on PyPI (MLCommons' own package of the schema):
every field declared here has the same number, type and oneof there, and messages of either
serialise to the same bytes; its ``NodeType`` lacks ``STORAGE_NODE``/``BATCH_NODE``/
``CHECKPOINT_NODE`` (8-10), which traincast never writes. It is not used (protobuf runtime
floor 6.31.1, about 40 dependencies through HolisticTraceAnalysis): docs/design/chakra.md.

Errors: :class:`ChakraError` when protobuf is not installed.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

from traincast.errors import TraincastError

#: where the field names and numbers come from (the .proto file is not vendored)
SCHEMA_SOURCE = {
    "repo": "mlcommons/chakra",
    "path": "schema/protobuf/et_def.proto",
    "commits": ["f5124d76bb7c3ba2ad67cb8386ad0f450a88e88e",
                "6dc63e147b9d115286626cc122459e44d9d08401"],
    "licence": "MIT",
    # PyPI release whose et_def_pb2 agrees on every field declared here (not a dependency)
    "checked_package": "mlc-chakra==1.0.0",
}
#: ``GlobalMetadata.version`` written by Chakra's own converters and generators
CHAKRA_VERSION = "0.0.4"

# NodeType
INVALID_NODE, METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE = 0, 1, 2, 3, 4
COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 5, 6, 7
STORAGE_NODE, BATCH_NODE, CHECKPOINT_NODE = 8, 9, 10
NODE_TYPES = {
    "INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3,
    "COMP_NODE": 4, "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7,
    "STORAGE_NODE": 8, "BATCH_NODE": 9, "CHECKPOINT_NODE": 10,
}
#: CollectiveCommType values
COMM_TYPES = {
    "ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
    "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9,
}

#: NodeType value -> name
NODE_TYPE_NAMES = {v: k for k, v in NODE_TYPES.items()}


class ChakraError(TraincastError):
    """A Chakra file cannot be read, or the export cannot run (protobuf missing)."""


@functools.cache
def schema() -> SimpleNamespace:
    """Message classes ``GlobalMetadata``, ``Node``, ``AttributeProto``, ``IOInfo``.

    Built from descriptors declared here (field names and numbers of Chakra's
    ``et_def.proto``, package ``ChakraProtoMsg``) in a private descriptor pool, so they never
    clash with an installed ``et_def_pb2``.

    Raises:
        ChakraError: the ``protobuf`` package is not installed.
    """
    try:  # protobuf is optional (the ``chakra`` extra): imported on first use
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise ChakraError("the Chakra export needs the protobuf package: "
                          "pip install 'traincast[chakra]'") from None
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="traincast/chakra_et_def.proto",
                                            package="ChakraProtoMsg", syntax="proto3")

    def message(name: str, fields: list[tuple], oneof: str | None = None) -> None:
        m = fd.message_type.add(name=name)
        if oneof:
            m.oneof_decl.add(name=oneof)
        for fname, number, ftype, *rest in fields:
            label = F.LABEL_REPEATED if "repeated" in rest else F.LABEL_OPTIONAL
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            for r in rest:
                if r.startswith("."):
                    f.type_name = r
            if "oneof" in rest:
                f.oneof_index = 0

    lists = [("DoubleList", F.TYPE_DOUBLE), ("Int64List", F.TYPE_INT64),
             ("Uint64List", F.TYPE_UINT64), ("BoolList", F.TYPE_BOOL),
             ("StringList", F.TYPE_STRING)]
    for name, t in lists:
        message(name, [("values", 1, t, "repeated")])
    message("AttributeProto", [
        ("name", 1, F.TYPE_STRING), ("doc_string", 2, F.TYPE_STRING),
        ("double_val", 3, F.TYPE_DOUBLE, "oneof"),
        ("double_list", 4, F.TYPE_MESSAGE, "oneof", ".ChakraProtoMsg.DoubleList"),
        ("float_val", 5, F.TYPE_FLOAT, "oneof"), ("int32_val", 7, F.TYPE_INT32, "oneof"),
        ("int64_val", 9, F.TYPE_INT64, "oneof"),
        ("int64_list", 10, F.TYPE_MESSAGE, "oneof", ".ChakraProtoMsg.Int64List"),
        ("uint32_val", 11, F.TYPE_UINT32, "oneof"), ("uint64_val", 13, F.TYPE_UINT64, "oneof"),
        ("uint64_list", 14, F.TYPE_MESSAGE, "oneof", ".ChakraProtoMsg.Uint64List"),
        ("sint32_val", 15, F.TYPE_SINT32, "oneof"), ("sint64_val", 17, F.TYPE_SINT64, "oneof"),
        ("fixed32_val", 19, F.TYPE_FIXED32, "oneof"),
        ("fixed64_val", 21, F.TYPE_FIXED64, "oneof"),
        ("sfixed32_val", 23, F.TYPE_SFIXED32, "oneof"),
        ("sfixed64_val", 25, F.TYPE_SFIXED64, "oneof"), ("bool_val", 27, F.TYPE_BOOL, "oneof"),
        ("bool_list", 28, F.TYPE_MESSAGE, "oneof", ".ChakraProtoMsg.BoolList"),
        ("string_val", 29, F.TYPE_STRING, "oneof"),
        ("string_list", 30, F.TYPE_MESSAGE, "oneof", ".ChakraProtoMsg.StringList"),
        ("bytes_val", 31, F.TYPE_BYTES, "oneof"),
    ], oneof="value")
    message("GlobalMetadata", [
        ("version", 1, F.TYPE_STRING),
        ("attr", 2, F.TYPE_MESSAGE, "repeated", ".ChakraProtoMsg.AttributeProto")])
    message("IOInfo", [("values", 1, F.TYPE_STRING), ("shapes", 2, F.TYPE_STRING),
                       ("types", 3, F.TYPE_STRING)])
    message("Node", [
        ("id", 1, F.TYPE_UINT64), ("name", 2, F.TYPE_STRING),
        ("type", 3, F.TYPE_ENUM, ".ChakraProtoMsg.NodeType"),
        ("ctrl_deps", 4, F.TYPE_UINT64, "repeated"), ("data_deps", 5, F.TYPE_UINT64, "repeated"),
        ("start_time_micros", 6, F.TYPE_UINT64), ("duration_micros", 7, F.TYPE_UINT64),
        ("inputs", 8, F.TYPE_MESSAGE, ".ChakraProtoMsg.IOInfo"),
        ("outputs", 9, F.TYPE_MESSAGE, ".ChakraProtoMsg.IOInfo"),
        ("attr", 10, F.TYPE_MESSAGE, "repeated", ".ChakraProtoMsg.AttributeProto"),
    ])
    for ename, values in (("NodeType", NODE_TYPES), ("CollectiveCommType", COMM_TYPES)):
        e = fd.enum_type.add(name=ename)
        for vname, v in values.items():
            e.value.add(name=vname, number=v)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fd.SerializeToString())

    def cls(name: str) -> type:
        desc = pool.FindMessageTypeByName(f"ChakraProtoMsg.{name}")
        get = getattr(message_factory, "GetMessageClass", None)
        if get is not None:
            return get(desc)
        return message_factory.MessageFactory(pool).GetPrototype(desc)  # protobuf < 4.22

    return SimpleNamespace(GlobalMetadata=cls("GlobalMetadata"), Node=cls("Node"),
                           AttributeProto=cls("AttributeProto"), IOInfo=cls("IOInfo"))
