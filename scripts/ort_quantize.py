"""ONNX Runtime's own static int8 quantization of an fp32 .onnx file, as its users run it: its
recommended pre-processing (quant_pre_process: its optimizer and shape inference; without it the
Identity nodes torch's exporter puts before shared initializers keep most convolutions out of its
QDQ fusion), then quantize_static in the QDQ format with per-channel s8 weights, u8 activations
and min-max calibration. Used by bench/int8_vs_peers.py and tests/python/test_int8.py."""
import os


def quantize_static_qdq(src, dst, batches, per_channel=True):
    """Writes dst, ONNX Runtime's QDQ model of src, calibrated on `batches` (float32 arrays of the
    input's shape)."""
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process
    pre = dst + ".pre.onnx"
    quant_pre_process(src, pre)
    name = onnx.load(pre).graph.input[0].name

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{name: x} for x in batches])

        def get_next(self):
            return next(self.it, None)

    quantize_static(pre, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax)
    os.remove(pre)


def output_step(path):
    """The scale of the DequantizeLinear that makes the model's output: one step of its logits."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    out = m.graph.output[0].name
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == out:
            return float(inits[n.input[1]])
    return None
