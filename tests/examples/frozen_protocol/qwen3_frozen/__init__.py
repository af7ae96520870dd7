"""Qwen3-MoE + PEFT LoRA written against the earlier workload protocol (frozen)."""
