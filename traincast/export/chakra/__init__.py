"""Chakra execution traces (MLCommons Chakra protobuf) of a traincast execution graph.

ASTRA-sim and the other Chakra tools read one file per rank, ``<prefix>.<rank>.et``: a
``GlobalMetadata`` message, then one ``Node`` message per node, each length-prefixed.
:func:`export_chakra` converts a prediction (or a measured TraceSet, replayed) and writes
those files; :func:`read_chakra` reads one back and :func:`check_chakra` checks the DAG and
measures its critical path against the replay.

Modules, by concept:

* :mod:`~traincast.export.chakra.et_def`: the schema (message classes and enum values of
  Chakra's ``et_def.proto``, declared by hand; upstream source stated there).
* :mod:`~traincast.export.chakra.et_file`: the length-delimited file format, reading, file names.
* :mod:`~traincast.export.chakra.nodes`: the graph -> Chakra nodes mapping (:func:`to_chakra`).
* :mod:`~traincast.export.chakra.write`: writing the per-rank files (:func:`write_chakra`).
* :mod:`~traincast.export.chakra.check`: structural checks and critical paths.

Needs the ``protobuf`` package (the ``chakra`` extra) when messages are built or read;
:class:`ChakraError` says so when it is missing.
"""

from traincast.export.chakra.check import check_chakra
from traincast.export.chakra.et_def import (
    BATCH_NODE,
    CHAKRA_VERSION,
    CHECKPOINT_NODE,
    COMM_COLL_NODE,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    COMM_TYPES,
    COMP_NODE,
    INVALID_NODE,
    MEM_LOAD_NODE,
    MEM_STORE_NODE,
    METADATA_NODE,
    NODE_TYPES,
    SCHEMA_SOURCE,
    STORAGE_NODE,
    ChakraError,
    schema,
)
from traincast.export.chakra.et_file import (
    attrs,
    decode_et,
    encode_et,
    et_paths,
    find_et_files,
    read_chakra,
)
from traincast.export.chakra.nodes import (
    COLLECTIVE_ATTR,
    COLLECTIVE_TO_COMM_TYPE,
    DELAY_NAME,
    IDLE_NAME,
    JOIN_NAME,
    ChakraTrace,
    to_chakra,
)
from traincast.export.chakra.write import export_chakra, write_chakra

__all__ = [
    "BATCH_NODE", "CHAKRA_VERSION", "CHECKPOINT_NODE", "COLLECTIVE_ATTR",
    "COLLECTIVE_TO_COMM_TYPE", "COMM_COLL_NODE", "COMM_RECV_NODE", "COMM_SEND_NODE",
    "COMM_TYPES", "COMP_NODE", "DELAY_NAME", "IDLE_NAME", "INVALID_NODE", "JOIN_NAME",
    "MEM_LOAD_NODE", "MEM_STORE_NODE", "METADATA_NODE", "NODE_TYPES", "SCHEMA_SOURCE",
    "STORAGE_NODE", "ChakraError", "ChakraTrace", "attrs", "check_chakra", "decode_et",
    "encode_et", "et_paths", "export_chakra", "find_et_files", "read_chakra", "schema",
    "to_chakra", "write_chakra",
]
