"""Model families the built-in estimator was not developed on, for
`benchmarks/estimator_accuracy.py`: factories, losses and batches a team would write
for the ready adapter's ``module`` route (transformers' ViT, DeiT and BERT from config,
a team-style CNN). Imported by reference (``benchmarks.estimator_families:vit``)."""

from __future__ import annotations

from typing import Any

import torch

from runners.protocol import Shape

PATCH = 16


def _patches(config: Any, model: Any, hidden: int, layers: int, heads: int) -> torch.nn.Module:
    """A transformers vision transformer for image classification, from a config (no
    weights fetched): ``PATCH``-pixel patches, eager attention, 10 labels."""
    # Keyword arguments the config's typed signature leaves to **kwargs (PretrainedConfig).
    extra: dict[str, Any] = {"num_labels": 10, "attn_implementation": "eager"}
    cfg = config(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        image_size=224,
        patch_size=PATCH,
        **extra,
    )
    built: torch.nn.Module = model(cfg)
    return built


def vit(hidden: int, layers: int, heads: int) -> torch.nn.Module:
    """transformers' ViT for image classification, from a config."""
    from transformers import ViTConfig, ViTForImageClassification

    return _patches(ViTConfig, ViTForImageClassification, hidden, layers, heads)


def vit_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    out = model(pixel_values=batch["pixels"], labels=batch["labels"], interpolate_pos_encoding=True)
    loss: torch.Tensor = out.loss
    return loss


def vit_batch(shape: Shape, seed: int) -> dict[str, torch.Tensor]:
    """``seq`` patches in one row (an image ``PATCH`` high, ``seq * PATCH`` wide), so a
    step's tokens are ``batch x seq`` as a language model's are."""
    g = torch.Generator().manual_seed(seed)
    return {
        "pixels": torch.randn(shape.batch, 3, PATCH, shape.seq * PATCH, generator=g),
        "labels": torch.randint(10, (shape.batch,), generator=g),
    }


def deit(hidden: int, layers: int, heads: int) -> torch.nn.Module:
    """transformers' DeiT (a vision transformer with a distillation token), from a config:
    added once method 5 was fixed, to be measured by it unchanged."""
    from transformers import DeiTConfig, DeiTForImageClassification

    return _patches(DeiTConfig, DeiTForImageClassification, hidden, layers, heads)


deit_loss = vit_loss
deit_batch = vit_batch


def cnn(width: int) -> torch.nn.Module:
    """A team's CNN: convolutions with batch norm, pooled to a classifier."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1),
        torch.nn.BatchNorm2d(width),
        torch.nn.ReLU(),
        torch.nn.Conv2d(width, 2 * width, 3, padding=1),
        torch.nn.BatchNorm2d(2 * width),
        torch.nn.ReLU(),
        torch.nn.Conv2d(2 * width, 2 * width, 3, padding=1),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(2 * width, 10),
    )


def cnn_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(model(batch["images"]), batch["labels"])


def cnn_batch(shape: Shape, seed: int) -> dict[str, torch.Tensor]:
    """``seq`` is the image side: a step grows with ``batch x seq**2``."""
    g = torch.Generator().manual_seed(seed)
    return {
        "images": torch.randn(shape.batch, 3, shape.seq, shape.seq, generator=g),
        "labels": torch.randint(10, (shape.batch,), generator=g),
    }


BERT_VOCAB = 512


def bert(hidden: int, layers: int, heads: int) -> torch.nn.Module:
    """transformers' BERT for sequence classification, from a config: an encoder with
    attention over the whole sequence and a pooled classifier (no weights fetched)."""
    from transformers import BertConfig, BertForSequenceClassification

    extra: dict[str, Any] = {"num_labels": 10, "attn_implementation": "eager"}
    cfg = BertConfig(
        vocab_size=BERT_VOCAB,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=8192,
        **extra,
    )
    return BertForSequenceClassification(cfg)


def bert_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    out = model(input_ids=batch["ids"], labels=batch["labels"])
    loss: torch.Tensor = out.loss
    return loss


def bert_batch(shape: Shape, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "ids": torch.randint(BERT_VOCAB, (shape.batch, shape.seq), generator=g),
        "labels": torch.randint(10, (shape.batch,), generator=g),
    }
