"""Qwen3-MoE with PEFT LoRA, qualified as a third-party workload (no weights download)."""
