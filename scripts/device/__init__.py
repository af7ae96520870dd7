"""Scripts for GPU hosts: run the checks there, write results as JSON plus artifacts.

Run from the repository root as modules (``python -m scripts.device.gpu_smoke
--out DIR``); the signing happens later, from the JSON, wherever the keys are.
"""
