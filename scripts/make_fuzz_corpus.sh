#!/usr/bin/env bash
# Writes the fuzzers' seed corpora (fuzz/corpus/NAME), committed: small real files of each format
# a target reads. Run from the repository root after a build (it runs build/reckon):
#   scripts/make_fuzz_corpus.sh [BUILD]
# Sources: a tinycnn run of reckon itself (checkpoint, state dict, ONNX export), the first
# Fashion-MNIST test images (IDX, raw and gzip; PNG and JPEG through Pillow), ONNX's own node-test
# models (libonnx-testdata), this machine's calibration cache. CIFAR has no Debian package, so its
# seed is two records written in the format.
set -euo pipefail
build=${1:-build}
c=fuzz/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$c" && mkdir -p "$c"/{fuzz_safetensors,fuzz_checkpoint,fuzz_idx,fuzz_cifar,fuzz_image,fuzz_device_cache,fuzz_cli,fuzz_onnx}

# A real checkpoint (model, SGD momentum state, metadata) and the ONNX export of the same model.
"$build/reckon" train tinycnn --data synthetic:1x12x12:32:4 --epochs 1 --batch 16 --threads 1 --quiet \
  --out "$tmp/run" >/dev/null
cp "$tmp/run/last.safetensors" "$c/fuzz_checkpoint/tinycnn_sgd.safetensors"
cp "$tmp/run/last.safetensors" "$c/fuzz_safetensors/tinycnn_sgd.safetensors"
"$build/reckon" export tinycnn --input 1x12x12 --out "$c/fuzz_onnx/tinycnn.onnx" >/dev/null
for t in test_conv_with_strides_padding test_relu test_gemm_default_single_elem_vector_bias test_maxpool_2d_pads \
         test_add_bcast test_reshape_negative_dim test_averagepool_2d_pads test_batchnorm_example \
         test_flatten_axis1 test_softmax_axis_1 test_concat_2d_axis_0 test_globalaveragepool; do
  f=/usr/share/libonnx-testdata/data/node/$t/model.onnx
  [ -f "$f" ] && cp "$f" "$c/fuzz_onnx/$t.onnx"
done

python3 - "$c" <<'PY'
import gzip, io, json, struct, sys
from PIL import Image
c = sys.argv[1]
# safetensors: every dtype the reader knows, with metadata, written as the format says.
def st(tensors, meta):
    h, data, off = {}, b"", 0
    for name, (dt, shape, raw) in tensors.items():
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw; off += len(raw)
    if meta: h["__metadata__"] = meta
    hb = json.dumps(h).encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + data
open(f"{c}/fuzz_safetensors/dtypes.safetensors", "wb").write(st({
    "f32": ("F32", [2, 2], struct.pack("<4f", 1, -2, 3.5, 0)), "f64": ("F64", [1], struct.pack("<d", 2.0)),
    "bf16": ("BF16", [2], b"\x80\x3f\x00\x40"), "f16": ("F16", [2], b"\x00\x3c\x00\x40"),
    "i8": ("I8", [3], b"\x01\xff\x7f"), "u8": ("U8", [3], b"\x00\x80\xff"), "i32": ("I32", [1], struct.pack("<i", -7)),
    "i64": ("I64", [1], struct.pack("<q", 1 << 40)), "empty": ("F32", [0, 3], b"")}, {"format": "pt", "note": "seed"}))
open(f"{c}/fuzz_safetensors/empty.safetensors", "wb").write(st({}, {}))
# IDX: the first 4 Fashion-MNIST test images and labels; input = u32 images length | images | labels.
d = "/usr/share/datasets/fashion-mnist"
imgs = gzip.open(f"{d}/t10k-images-idx3-ubyte.gz").read(16 + 4 * 784)
imgs = imgs[:4] + struct.pack(">I", 4) + imgs[8:]
labs = gzip.open(f"{d}/t10k-labels-idx1-ubyte.gz").read(8 + 4)
labs = labs[:4] + struct.pack(">I", 4) + labs[8:]
open(f"{c}/fuzz_idx/raw", "wb").write(struct.pack("<I", len(imgs)) + imgs + labs)
gz = gzip.compress(imgs)
open(f"{c}/fuzz_idx/gzip", "wb").write(struct.pack("<I", len(gz)) + gz + labs)
# CIFAR-10: two records (label, 3x32x32).
open(f"{c}/fuzz_cifar/two_records.bin", "wb").write(bytes([3]) + bytes(range(256)) * 12 + bytes([7]) + bytes(3072))
# Images: Fashion-MNIST's first test image as PNG (gray, RGB, RGBA, palette, 16-bit) and JPEG.
g = Image.frombytes("L", (28, 28), imgs[16:16 + 784])
for name, im, kw in [("gray.png", g, {}), ("rgb.png", g.convert("RGB"), {}), ("rgba.png", g.convert("RGBA"), {}),
                     ("palette.png", g.convert("P"), {}), ("gray16.png", g.convert("I;16"), {}),
                     ("gray.jpg", g, {"quality": 80}), ("rgb.jpg", g.convert("RGB"), {"quality": 80}),
                     ("progressive.jpg", g.convert("RGB"), {"progressive": True})]:
    b = io.BytesIO(); im.save(b, format="PNG" if name.endswith("png") else "JPEG", **kw)
    open(f"{c}/fuzz_image/{name}", "wb").write(b.getvalue())
# CLI values.
for i, s in enumerate(["4GiB", "512MiB", "1.5GB", "100000", "3x224x224", "1,28,28", "0x1", "16EiB",
                       "1 2 3 4", "0123456789abcdef,0,1,18446744073709551615"]):
    open(f"{c}/fuzz_cli/{i}", "w").write(s)
PY

# The calibration cache: this machine's, as `reckon ledger --recalibrate` writes it.
RECKON_CACHE_DIR="$tmp/cache" "$build/reckon" ledger tinycnn --batch 1 --input 1x12x12 >/dev/null
cp "$tmp/cache/devices.json" "$c/fuzz_device_cache/devices.json"
du -sh "$c"; ls "$c"/* | wc -l
