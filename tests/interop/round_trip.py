# SPDX-License-Identifier: MIT
"""PyTorch <-> headwise through tools/export_torch.py, both ways, run by ctest (interop.round_trip).

    python3 tests/interop/round_trip.py --program build/dev/tests/interop_load_exported \\
        --work-dir /tmp/interop

torch -> headwise: an nn.TransformerEncoderLayer in float64 is saved with torch.save, exported
with the tool's command line, loaded by the C++ program into TransformerEncoderLayer<double> and
run on a fixed input (.npy); its output must equal torch's to 1e-12. headwise -> torch: the
program saves a layer of its own initialisation and its output; the tool imports the file into a
torch.save file, which load_state_dict(strict=True) takes, and torch's output must equal
headwise's to 1e-12. Each for post- and pre-norm, relu and gelu. An nn.MultiheadAttention with
kdim, vdim and add_bias_kv goes torch -> headwise the same way. The tool's module functions are
checked too: every dtype kept bit for bit through save_safetensors and load_safetensors, and a
whole pickled module exported with --trust-pickle.

Without torch (`import torch` fails) it prints why and exits 77, which ctest reports as skipped.
"""

import argparse
import ast
import pathlib
import struct
import subprocess
import sys

SKIP = 77
TOLERANCE = 1e-12  # float64 both sides; the same operations in another order
ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "export_torch.py"

try:
    import torch
except ImportError as error:
    print(f"round_trip: skipped, this Python ({sys.executable}) has no torch: {error}")
    sys.exit(SKIP)

sys.path.insert(0, str(TOOL.parent))
import export_torch  # noqa: E402  (after the skip above, which needs no torch)

CASES = [  # d_model, nhead, dim_feedforward, activation, norm
    (8, 2, 16, "relu", "post"),
    (12, 3, 20, "gelu", "pre"),
]


def save_npy(path, tensor):
    """A float64 C-order .npy file (format 1.0), written without NumPy."""
    t = tensor.detach().to(torch.float64).contiguous()
    shape = "(" + "".join(f"{d}, " for d in t.shape).rstrip(" ") + ")"
    if t.dim() != 1:
        shape = shape.replace(",)", ")")
    header = f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}"
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    data = struct.pack(f"<{t.numel()}d", *t.reshape(-1).tolist())
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
                     + data)


def load_npy(path):
    data = path.read_bytes()
    assert data[:8] == b"\x93NUMPY\x01\x00", f"{path}: not a version 1.0 .npy file"
    (length,) = struct.unpack("<H", data[8:10])
    header = ast.literal_eval(data[10:10 + length].decode())
    assert header["descr"] == "<f8" and not header["fortran_order"], header
    shape = header["shape"]
    count = 1
    for d in shape:
        count *= d
    values = struct.unpack(f"<{count}d", data[10 + length:])
    return torch.tensor(values, dtype=torch.float64).reshape(shape)


def run(*command):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"round_trip: {' '.join(map(str, command))} failed "
                         f"({result.returncode}):\n{result.stdout}{result.stderr}")
    return result.stdout


def check_close(what, got, expected):
    difference = (got - expected).abs().max().item()
    print(f"{what}: max |difference| {difference:.3g}")
    if not difference <= TOLERANCE:
        raise SystemExit(f"round_trip: {what}: max |difference| {difference} > {TOLERANCE}")


def make_layer(d_model, nhead, dim_feedforward, activation, norm):
    return torch.nn.TransformerEncoderLayer(
        d_model, nhead, dim_feedforward, dropout=0.0, activation=activation, batch_first=True,
        norm_first=(norm == "pre"), dtype=torch.float64).eval()


def layer_case(program, work, case):
    d_model, nhead, dim_feedforward, activation, norm = case
    name = "_".join(map(str, case))
    torch.manual_seed(sum(case[:3]))
    layer = make_layer(*case)
    with torch.no_grad():  # norms away from ones and zeros, so that a swapped name shows
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    x = torch.randn(2, 5, d_model, dtype=torch.float64)
    with torch.no_grad():
        expected = layer(x)

    # torch -> headwise, through the tool's command line.
    torch.save(layer.state_dict(), work / f"{name}.pt")
    run(sys.executable, TOOL, "export", work / f"{name}.pt", work / f"{name}.safetensors",
        "--quiet", "--metadata", "source=round_trip.py")
    save_npy(work / f"{name}.x.npy", x)
    run(program, "encoder", work / f"{name}.safetensors", work / f"{name}.x.npy", work / f"{name}.out.npy",
        work / f"{name}.own.safetensors", work / f"{name}.own_out.npy", d_model, nhead,
        dim_feedforward, activation, norm)
    check_close(f"{name}: torch -> headwise", load_npy(work / f"{name}.out.npy"), expected)

    # headwise -> torch.
    run(sys.executable, TOOL, "import", work / f"{name}.own.safetensors", work / f"{name}.own.pt")
    own = make_layer(*case)
    own.load_state_dict(torch.load(work / f"{name}.own.pt"), strict=True)
    with torch.no_grad():
        got = own(x)
    check_close(f"{name}: headwise -> torch", got, load_npy(work / f"{name}.own_out.npy"))


def mha_case(program, work):
    """nn.MultiheadAttention with kdim, vdim and add_bias_kv: q/k/v_proj_weight, bias_k, bias_v."""
    torch.manual_seed(3)
    mha = torch.nn.MultiheadAttention(8, 2, kdim=6, vdim=4, add_bias_kv=True, batch_first=True,
                                      dtype=torch.float64).eval()
    with torch.no_grad():  # torch initialises in_proj_bias to zeros; make every parameter count
        for p in mha.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    q, k, v = (torch.randn(2, length, width, dtype=torch.float64)
               for length, width in ((4, 8), (5, 6), (5, 4)))
    with torch.no_grad():
        expected = mha(q, k, v, need_weights=False)[0]
    torch.save(mha.state_dict(), work / "mha.pt")
    run(sys.executable, TOOL, "export", work / "mha.pt", work / "mha_sd.safetensors", "--quiet")
    for name, t in (("q", q), ("k", k), ("v", v)):
        save_npy(work / f"mha.{name}.npy", t)
    run(program, "mha", work / "mha_sd.safetensors", work / "mha.q.npy", work / "mha.k.npy",
        work / "mha.v.npy", work / "mha.out.npy", 8, 2, 6, 4, 1)
    check_close("mha kdim vdim bias_kv: torch -> headwise", load_npy(work / "mha.out.npy"),
                expected)


def tool_checks(work):
    """The module functions keep every dtype; a whole module exports with --trust-pickle."""
    tensors = {"f64": torch.randn(2, 3, dtype=torch.float64), "f32": torch.randn(3),
               "f16": torch.randn(2, 2).half(), "bf16": torch.randn(4).bfloat16(),
               "i64": torch.arange(-3, 3), "bool": torch.tensor([True, False]),
               "u8": torch.arange(4, dtype=torch.uint8), "empty": torch.zeros(0, 3),
               "scalar": torch.tensor(2.5, dtype=torch.float64),
               "transposed": torch.randn(3, 4).t()}
    path = work / "dtypes.safetensors"
    export_torch.save_safetensors(tensors, path, {"k": "v"})
    back = export_torch.load_safetensors(path)
    assert sorted(back) == sorted(tensors), sorted(back)
    for key, t in tensors.items():
        assert back[key].dtype == t.dtype and back[key].shape == t.shape, key
        assert torch.equal(back[key], t), key
    assert export_torch.load_metadata(path) == {"k": "v"}
    header_length = struct.unpack("<Q", path.read_bytes()[:8])[0]
    assert header_length % 8 == 0, header_length

    mha = torch.nn.MultiheadAttention(8, 2, kdim=6, vdim=4, batch_first=True,
                                      dtype=torch.float64)
    torch.save(mha, work / "mha_module.pt")
    run(sys.executable, TOOL, "export", work / "mha_module.pt", work / "mha.safetensors",
        "--trust-pickle", "--quiet")
    exported = export_torch.load_safetensors(work / "mha.safetensors")
    expected = mha.state_dict()
    assert sorted(exported) == sorted(expected), sorted(exported)
    for key, t in expected.items():
        assert torch.equal(exported[key], t), key
    assert "--trust-pickle" in run(sys.executable, TOOL, "export", "--help")
    print("tool: dtypes kept, metadata kept, a pickled module exported")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True, help="the load_exported executable")
    parser.add_argument("--work-dir", required=True, help="where the files go")
    args = parser.parse_args()
    work = pathlib.Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__} ({sys.executable})")
    tool_checks(work)
    for case in CASES:
        layer_case(args.program, work, case)
    mha_case(args.program, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
