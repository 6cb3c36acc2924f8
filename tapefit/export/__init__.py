"""Exporting models for serving outside tapefit: ONNX graphs of the forward pass.

``to_onnx(model, path)`` traces the model in inference mode and writes each op it runs as
ONNX nodes; ``Module.export(path, format="onnx")`` calls it. It needs the optional ``onnx``
package (``pip install 'tapefit[onnx]'``). Nothing in tapefit imports this package except
``Module.export`` (lazily) and the CLI.
"""

from tapefit.export.onnx_graph import ExportError, build_model_proto, to_onnx

__all__ = ["ExportError", "build_model_proto", "to_onnx"]
