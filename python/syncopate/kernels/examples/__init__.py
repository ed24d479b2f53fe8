"""Annotated local Triton kernels: inputs of the transformer's golden tests and of its docs.

Each file holds one ordinary single-GPU kernel with `# @sy.` comments (docs/ANNOTATIONS.md).
The transformed versions live in tests/golden/transform/.
"""
