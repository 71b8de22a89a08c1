"""End-to-end proof of kvtier's GPU path on a real GPU (scripts/gpu-e2e.sh runs it; docs/gpu.md).

logic.py is plain Python (tested without torch in python/tests/test_gpu_e2e_logic.py); model.py and
run.py need PyTorch with CUDA.
"""
