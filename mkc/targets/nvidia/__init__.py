"""NVIDIA targets (H100/H200 sm_90a, A100 sm_80, B200 sm_100a): CUDA through the shared kernel template.

    backend.py   NvidiaBackend: capabilities, launch limits, and the three parts below
    dialect.py   NvidiaDialect: the CUDA spellings the template prints
    compiler.py  nvcc -> cubin, cached by a hash of source, flags and nvcc version
    driver.py    CudaDriver: torch for memory and streams, cuda.core to load and launch
"""
