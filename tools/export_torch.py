# SPDX-License-Identifier: MIT
"""PyTorch weights to safetensors files that headwise loads, and back.

    python3 tools/export_torch.py export model.pt model.safetensors
    python3 tools/export_torch.py import model.safetensors model.pt
    python3 tools/export_torch.py import model.safetensors          # prints a summary

`export` reads what torch.save wrote: a state dict (a dict of tensors), a checkpoint holding one
(under "state_dict", "model" or "model_state_dict", or the key given with --key), or a whole
pickled module (nn.Module, whose state_dict() is taken; with --trust-pickle only, as unpickling a
module runs code from the file). Every tensor is written as it is: its dtype kept (F64, F32,
F16, BF16, I64, I32, I16, I8, U8, BOOL, ...), contiguous, little-endian, in name order, the header
JSON with sorted keys and padded with spaces to a multiple of 8 bytes. The names are PyTorch's
state_dict() names, which headwise's modules use as they are (nn.Linear, nn.LayerNorm,
nn.Embedding, nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer);
the prefixes that wrappers add ("module." from DataParallel and DistributedDataParallel,
"_orig_mod." from torch.compile) are removed, and --strip-prefix removes another.

`import` reads a safetensors file (one headwise saved, or any other) into a dict of tensors and
saves it with torch.save, so that module.load_state_dict(torch.load(path)) takes it.

As a module, with the standard library and torch only:

    from export_torch import save_safetensors, load_safetensors
    save_safetensors(model.state_dict(), "model.safetensors")
    state = load_safetensors("model.safetensors")
"""

import argparse
import json
import os
import struct
import sys
import tempfile

try:
    import torch
except ImportError as _error:
    raise SystemExit(f"export_torch.py needs PyTorch, which this Python ({sys.executable}) does not "
                     f"have ({_error}); install it (pip install torch) or run another Python")

__all__ = ["save_safetensors", "load_safetensors", "load_metadata", "export", "import_"]

# safetensors dtype names and torch dtypes; the unsigned and float8 types exist in newer torch only.
_DTYPES = [("F64", "float64"), ("F32", "float32"), ("F16", "float16"), ("BF16", "bfloat16"),
           ("I64", "int64"), ("I32", "int32"), ("I16", "int16"), ("I8", "int8"),
           ("U8", "uint8"), ("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"),
           ("BOOL", "bool"), ("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2")]
TO_TORCH = {name: getattr(torch, attr) for name, attr in _DTYPES if hasattr(torch, attr)}
FROM_TORCH = {dtype: name for name, dtype in TO_TORCH.items()}

# The safetensors reference implementation's header limit, which headwise applies as well.
MAX_HEADER = 100_000_000

# Prefixes that wrapping a module adds to every name of its state dict.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


class FormatError(ValueError):
    """A file that is not what the operation reads, with the file named in the message."""


# ---- safetensors ------------------------------------------------------------------------------

def _tensor_bytes(tensor):
    """The tensor's elements as little-endian bytes, in row-major order."""
    t = tensor.detach().cpu().contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    raw = t.view(torch.uint8)  # reinterprets the bytes; bf16 and bool included
    if sys.byteorder == "big" and t.element_size() > 1:
        raw = raw.reshape(-1, t.element_size()).flip(1).reshape(-1)
    try:
        return raw.numpy().tobytes()
    except (ImportError, RuntimeError):  # torch without numpy
        return bytes(raw.tolist())


def save_safetensors(tensors, path, metadata=None):
    """Writes `tensors` (a dict of name -> torch.Tensor) as a safetensors file at `path`.

    Entries in name order, dtypes kept, little-endian, the header JSON with sorted keys padded
    with spaces to a multiple of 8 bytes; `metadata`, a dict of strings, goes under
    "__metadata__". The file is written under a temporary name and renamed over `path`.
    """
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        tensor = tensors[name]
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise ValueError(f"save_safetensors: {path}: {name!r} is not a valid tensor name")
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"save_safetensors: {path}: entry '{name}' is a "
                            f"{type(tensor).__name__}, not a torch.Tensor")
        if tensor.layout != torch.strided or tensor.is_quantized:
            raise ValueError(f"save_safetensors: {path}: entry '{name}' is a {tensor.layout} "
                             f"{'quantized ' if tensor.is_quantized else ''}tensor; "
                             "only dense tensors are written (call .to_dense() or dequantize())")
        if tensor.dtype not in FROM_TORCH:
            raise ValueError(f"save_safetensors: {path}: entry '{name}' has dtype {tensor.dtype}, "
                             f"which safetensors does not hold")
        data = _tensor_bytes(tensor)
        header[name] = {"dtype": FROM_TORCH[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"save_safetensors: {path}: metadata must map strings to strings, "
                                f"not {key!r}: {value!r}")
        header["__metadata__"] = dict(metadata)
    text = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned

    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=".export_torch.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(struct.pack("<Q", len(text)))
            out.write(text)
            for data in blobs:
                out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def _read_header(path, data):
    if len(data) < 8:
        raise FormatError(f"{path}: file of {len(data)} bytes is too short for a safetensors file")
    kind = file_kind(data)
    if kind not in ("safetensors", "unknown"):
        raise FormatError(f"{path} is {KIND_NAMES[kind]}, not a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER or n > len(data) - 8:
        raise FormatError(f"{path}: header length {n} does not fit in the file "
                          f"({len(data)} bytes); not a safetensors file")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{path}: header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise FormatError(f"{path}: header is not a JSON object")
    return header, 8 + n


def load_metadata(path):
    """The "__metadata__" of a safetensors file (a dict of strings, empty when there is none)."""
    with open(path, "rb") as f:
        data = f.read()
    return dict(_read_header(path, data)[0].get("__metadata__", {}))


def load_safetensors(path):
    """Reads a safetensors file into a dict of name -> torch.Tensor (on the CPU, dtypes kept)."""
    with open(path, "rb") as f:
        data = f.read()
    header, start = _read_header(path, data)
    tensors, covered = {}, []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = TO_TORCH[entry["dtype"]]
            shape = [int(d) for d in entry["shape"]]
            begin, end = (int(o) for o in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(f"{path}: entry '{name}': malformed ({e!r})") from None
        numel = 1
        for d in shape:
            numel *= d
        itemsize = torch.empty((), dtype=dtype).element_size()
        if not 0 <= begin <= end <= len(data) - start or end - begin != numel * itemsize:
            raise FormatError(f"{path}: entry '{name}': data_offsets [{begin}, {end}] do not hold "
                              f"{entry['dtype']} {shape} in the {len(data) - start} bytes of data")
        covered.append((begin, end))
        if numel == 0:
            tensors[name] = torch.empty(shape, dtype=dtype)
            continue
        raw = torch.frombuffer(bytearray(data[start + begin:start + end]), dtype=torch.uint8)
        if sys.byteorder == "big" and itemsize > 1:
            raw = raw.reshape(-1, itemsize).flip(1).reshape(-1).contiguous()
        tensors[name] = raw.view(dtype).reshape(shape).clone()
    covered.sort()
    position = 0
    for begin, end in covered:
        if begin != position:
            raise FormatError(f"{path}: the entries' data overlap or leave a gap at byte {begin}")
        position = end
    return tensors


# ---- what a file is -----------------------------------------------------------------------------

KIND_NAMES = {
    "safetensors": "a safetensors file",
    "npy": "a NumPy .npy file",
    "npz": "a NumPy .npz archive",
    "torch_zip": "a PyTorch checkpoint (a torch.save zip archive)",
    "torch_legacy": "a PyTorch checkpoint in the legacy format",
    "pickle": "a Python pickle",
    "hdf5": "an HDF5 file",
    "zip": "a zip archive",
    "unknown": "a file of unknown kind",
}

_TORCH_MAGIC = bytes([0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8,
                      0x50, 0x19])


def file_kind(data):
    """What the first bytes `data` of a file say it is (the same rules as headwise's loaders)."""
    if len(data) >= 9 and data[8:9] == b"{" and struct.unpack("<Q", data[:8])[0] <= len(data) - 8:
        return "safetensors"
    if data.startswith(b"\x93NUMPY"):
        return "npy"
    if data.startswith(b"\x89HDF\r\n\x1a\n"):
        return "hdf5"
    if data.startswith(b"PK\x03\x04"):
        name_length = struct.unpack("<H", data[26:28])[0] if len(data) >= 30 else 0
        name = data[30:30 + name_length]
        if name == b"data.pkl" or name.endswith(b"/data.pkl"):
            return "torch_zip"
        return "npz" if name.endswith(b".npy") else "zip"
    if len(data) >= 3 and data[0] == 0x80 and 2 <= data[1] <= 5:
        return "torch_legacy" if data.startswith(_TORCH_MAGIC) else "pickle"
    return "unknown"


# ---- export and import ----------------------------------------------------------------------------

def _torch_load(path, trust_pickle):
    """torch.load on the CPU, refusing to run code from the file unless `trust_pickle`."""
    try:
        return torch.load(path, map_location="cpu", weights_only=not trust_pickle)
    except TypeError:  # a torch before weights_only (1.12 and older)
        if not trust_pickle:
            raise SystemExit(f"export: {path}: this torch ({torch.__version__}) cannot load "
                             "without running code from the file; rerun with --trust-pickle if "
                             "you trust it") from None
        return torch.load(path, map_location="cpu")
    except Exception as e:  # weights_only refuses what is not tensors and containers
        if trust_pickle:
            raise
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SystemExit(f"export: {path}: holds objects other than tensors (a pickled module?), "
                         f"which torch.load(weights_only=True) refuses ({first_line}).\n"
                         "Unpickling them runs code from the file; if you trust the file, rerun "
                         "with --trust-pickle") from None


def _flatten(obj, prefix, out, skipped):
    for key, value in obj.items():
        name = prefix + str(key)
        if isinstance(value, torch.Tensor):
            out[name] = value
        elif isinstance(value, dict):
            _flatten(value, name + ".", out, skipped)
        else:
            skipped.append(name)


def state_dict_of(obj, key=None, source="<input>"):
    """The tensors of what torch.load returned: a module's state_dict(), a dict of tensors, or
    the dict of tensors a checkpoint holds under `key` (default: "state_dict", "model" or
    "model_state_dict"). Nested dicts are flattened with '.', as module names are."""
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if not isinstance(obj, dict):
        raise SystemExit(f"export: {source}: holds a {type(obj).__name__}, not a state dict or a "
                         "module")
    if key is not None:
        if key not in obj:
            raise SystemExit(f"export: {source}: no key '{key}' (keys: {sorted(map(str, obj))})")
        return state_dict_of(obj[key], None, source)
    if not any(isinstance(v, torch.Tensor) for v in obj.values()):
        for candidate in ("state_dict", "model", "model_state_dict"):
            if candidate in obj:
                return state_dict_of(obj[candidate], None, source)
    tensors, skipped = {}, []
    _flatten(obj, "", tensors, skipped)
    if skipped:
        print(f"export: {source}: skipped entries that are not tensors: {', '.join(skipped)}",
              file=sys.stderr)
    if not tensors:
        raise SystemExit(f"export: {source}: no tensors found (keys: {sorted(map(str, obj))}); "
                         "name the dict to export with --key")
    return tensors


def rename(tensors, strip_prefix=None):
    """Removes `strip_prefix` and the prefixes wrappers add from every name that has them."""
    prefixes = ([strip_prefix] if strip_prefix else []) + list(WRAPPER_PREFIXES)
    for prefix in prefixes:
        if tensors and all(name.startswith(prefix) for name in tensors):
            tensors = {name[len(prefix):]: t for name, t in tensors.items()}
    return tensors


def export(source, destination, key=None, strip_prefix=None, metadata=None, trust_pickle=False):
    """torch.save file (state dict, checkpoint or whole module) -> safetensors file."""
    with open(source, "rb") as f:
        kind = file_kind(f.read(4096))
    if kind in ("safetensors", "npy", "npz", "hdf5"):
        raise SystemExit(f"export: {source} is {KIND_NAMES[kind]}, not a torch.save file")
    tensors = rename(state_dict_of(_torch_load(source, trust_pickle), key, source), strip_prefix)
    save_safetensors(tensors, destination, metadata)
    return tensors


def import_(source, destination=None):
    """safetensors file -> torch.save file of a dict of tensors (or, without `destination`, the
    dict only)."""
    tensors = load_safetensors(source)
    if destination is not None:
        torch.save(tensors, destination)
    return tensors


def summary(tensors):
    lines = []
    for name in sorted(tensors):
        t = tensors[name]
        lines.append(f"{name}\t{FROM_TORCH.get(t.dtype, t.dtype)}\t{list(t.shape)}")
    total = sum(t.numel() for t in tensors.values())
    lines.append(f"{len(tensors)} tensors, {total} elements")
    return "\n".join(lines)


def _metadata_arg(text):
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    return tuple(text.split("=", 1))


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="PyTorch weights to safetensors files that headwise loads, and back.",
        epilog="Examples:\n"
               "  export_torch.py export model.pt model.safetensors\n"
               "  export_torch.py export checkpoint.pt model.safetensors --key model\n"
               "  export_torch.py import model.safetensors model.pt\n"
               "  export_torch.py import model.safetensors        (prints a summary)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    e = commands.add_parser("export", help="torch.save file -> safetensors")
    e.add_argument("source", help="a torch.save file: a state dict, a checkpoint or a module")
    e.add_argument("destination", help="the safetensors file to write")
    e.add_argument("--key", help="the entry of a checkpoint dict that holds the state dict")
    e.add_argument("--strip-prefix", metavar="PREFIX",
                   help="remove PREFIX from every name (e.g. 'encoder.layers.0.')")
    e.add_argument("--metadata", metavar="KEY=VALUE", type=_metadata_arg, action="append",
                   default=[], help="a string for the header's __metadata__ (repeatable)")
    e.add_argument("--trust-pickle", action="store_true",
                   help="allow unpickling objects other than tensors (a whole pickled module): "
                        "this runs code from the file")
    e.add_argument("--quiet", action="store_true", help="print nothing on success")
    i = commands.add_parser("import", help="safetensors -> torch.save file, or a summary")
    i.add_argument("source", help="a safetensors file (e.g. one headwise saved)")
    i.add_argument("destination", nargs="?",
                   help="the torch.save file to write; without it, print a summary")
    args = parser.parse_args(argv)

    try:
        if args.command == "export":
            tensors = export(args.source, args.destination, args.key, args.strip_prefix,
                             dict(args.metadata), args.trust_pickle)
            if not args.quiet:
                print(summary(tensors))
        else:
            tensors = import_(args.source, args.destination)
            if args.destination is None:
                print(summary(tensors))
    except (FormatError, OSError) as error:
        print(f"{args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
