"""Reading the inputs of a comparison: where a step's process directories are (every layout, 1.1.1's and
26.2.0's), dump.json and its tensor files (``.npy``, ``.pt`` without torch), the
ranks of a sharded run merged into one, the user's mapping files, and each entry flattened into rows (with what
the two generations record differently read in common terms, :mod:`.generations`).

The first room of the pipeline (reader -> matcher -> metrics -> report): it imports no other room of
:mod:`msprobe.core.compare`. Other rooms and :mod:`msprobe.core.graph` import what they use from here.
"""

from msprobe.core.compare.read.generations import comparable_dumps, comparable_rows, gradients_in_place
from msprobe.core.compare.read.mapfiles import TOP_LAYER, UserMaps, read_user_maps
from msprobe.core.compare.read.processes import process_dirs, process_rank
from msprobe.core.compare.read.ptfile import NotPlain, check_archive, read_plain_pt
from msprobe.core.compare.read.reader import (
    INPUT_MAX_BYTES,
    CompareError,
    DumpFile,
    load_json_file,
    read_construct,
    read_dump,
    read_mapping,
    read_stack,
    tensor_path,
)
from msprobe.core.compare.read.rows import STAT_KEYS, Row, flatten_entry, is_tensor, structure
from msprobe.core.compare.read.shards import (
    NO_LAYOUT,
    SHARDS,
    SOURCE,
    Layout,
    Source,
    SourceError,
    load_source,
    merge_constructs,
    merge_note,
    read_merged,
    tensor_source,
)
from msprobe.core.compare.read.tensorfile import (
    NO_SPEC,
    TensorFileError,
    TensorSpec,
    canonical_dtype,
    check_tensor,
    load_npy,
)

__all__ = [
    "INPUT_MAX_BYTES", "NO_LAYOUT", "NO_SPEC", "SHARDS", "SOURCE", "STAT_KEYS", "TOP_LAYER", "CompareError",
    "DumpFile", "Layout", "NotPlain", "Row", "Source", "SourceError", "TensorFileError", "TensorSpec", "UserMaps",
    "canonical_dtype", "check_archive", "check_tensor", "comparable_dumps", "comparable_rows", "flatten_entry",
    "gradients_in_place", "is_tensor", "load_json_file", "load_npy",
    "load_source", "merge_constructs", "merge_note", "process_dirs", "process_rank",
    "read_construct", "read_dump", "read_mapping", "read_merged",
    "read_plain_pt", "read_stack", "read_user_maps", "structure", "tensor_path", "tensor_source",
]
