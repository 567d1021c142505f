"""Real models' layer shapes: the tables the ``prior`` strategy draws from, one draw, and the reference layers.

The dimensions of transformers and convnets (:data:`TRANSFORMER_HIDDEN`,
:data:`CHANNELS` and the other tables) from which :func:`real_model_shape`
draws one linear layer, forward or backward, for the ``prior`` strategy
(:class:`costlearn.collect.shape_streams.PriorShapes`); and
:data:`REFERENCE_LAYERS`, the fixed layers whose coverage ``train`` reports
(:mod:`costlearn.learn.coverage`).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["REFERENCE_LAYERS", "real_model_shape"]



# Real models' dimensions (the prior). Sources: the model cards and configs of
# BERT (768/1024, FFN 4h, vocab 30522), GPT-2 (768-1600, vocab 50257), LLaMA 1-3
# (4096-8192; FFN 11008, 14336, 28672; vocab 32000, 128256), Mistral (14336),
# ViT (197 tokens; 768/1024/1280), ResNet / EfficientNet / ConvNeXt (channels,
# 7-112 pixel feature maps, a 1000-class head) as timm builds them.
TRANSFORMER_HIDDEN = (256, 384, 512, 640, 768, 1024, 1280, 1536, 1600, 2048, 2560, 3072, 4096, 5120, 6144,
                      7168, 8192)
"""Hidden sizes of transformer models."""
FFN_MULTIPLIERS = (4.0, 8.0 / 3.0, 3.5, 2.0)
"""Intermediate (MLP) size / hidden size: 4 (BERT, GPT, ViT), 8/3 rounded up
to 256 (LLaMA's SwiGLU), 3.5 (Mistral), 2 (small models)."""
VOCABULARY = (1000, 21843, 30522, 32000, 50257, 50304, 128256)
"""Output head widths: ImageNet-1k and -21k classes, BERT, LLaMA 2, GPT-2
(and padded), LLaMA 3."""
SEQUENCE = (1, 1, 64, 77, 128, 197, 256, 384, 512, 1024, 2048, 4096)
"""Tokens per sample (1: decoding, counted twice; 77: CLIP text; 197: ViT-B/16)."""
BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""Samples per batch."""
CHANNELS = (16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 160, 192, 256, 320, 384, 512, 640, 768, 960, 1024, 1280,
            1536, 2048)
"""Convolution channel counts (1x1 convolutions and heads are matmuls)."""
FEATURE_MAP = (7, 14, 28, 56, 112)
"""Side of a convnet's square feature map, pixels."""

REFERENCE_LAYERS = (
    # BERT-base, 8 sequences of 128 tokens (1024 tokens), hidden 768, FFN 3072: forward, and the MLP's backward
    ("BERT-base qkv", 1024, 2304, 768), ("BERT-base attention out", 1024, 768, 768),
    ("BERT-base mlp up", 1024, 3072, 768), ("BERT-base mlp down", 1024, 768, 3072),
    ("BERT-base mlp up, data grad", 1024, 768, 3072), ("BERT-base mlp up, weight grad", 768, 3072, 1024),
    # BERT-large, 1024 tokens, hidden 1024, FFN 4096
    ("BERT-large qkv", 1024, 3072, 1024), ("BERT-large mlp up", 1024, 4096, 1024),
    ("BERT-large mlp down", 1024, 1024, 4096),
    # GPT-2 small decoding one token, hidden 768, vocabulary 50257
    ("GPT-2 decode qkv", 1, 2304, 768), ("GPT-2 decode mlp up", 1, 3072, 768), ("GPT-2 decode mlp down", 1, 768, 3072),
    ("GPT-2 decode lm head", 1, 50257, 768),
    # LLaMA-2-7B: a 2048-token prefill and a batch of 16 decoding, hidden 4096, FFN 11008, vocabulary 32000
    ("LLaMA-7B prefill qkv", 2048, 12288, 4096), ("LLaMA-7B prefill attention out", 2048, 4096, 4096),
    ("LLaMA-7B prefill gate/up", 2048, 11008, 4096), ("LLaMA-7B prefill down", 2048, 4096, 11008),
    ("LLaMA-7B decode qkv", 16, 12288, 4096), ("LLaMA-7B decode down", 16, 4096, 11008),
    ("LLaMA-7B decode lm head", 16, 32000, 4096),
    # ViT-B/16, a batch of 32 images (197 tokens each), hidden 768, FFN 3072, 1000 classes
    ("ViT-B/16 qkv", 6304, 2304, 768), ("ViT-B/16 mlp up", 6304, 3072, 768), ("ViT-B/16 mlp down", 6304, 768, 3072),
    ("ViT-B/16 head", 32, 1000, 768),
    # ResNet-50's 1x1 convolutions at a batch of 32 (feature maps 56, 28, 14, 7), and its classifier
    ("ResNet-50 56x56 1x1 reduce", 100352, 64, 256), ("ResNet-50 56x56 1x1 expand", 100352, 256, 64),
    ("ResNet-50 28x28 1x1 reduce", 25088, 128, 512), ("ResNet-50 28x28 1x1 expand", 25088, 512, 128),
    ("ResNet-50 14x14 1x1 reduce", 6272, 256, 1024), ("ResNet-50 14x14 1x1 expand", 6272, 1024, 256),
    ("ResNet-50 7x7 1x1 reduce", 1568, 512, 2048), ("ResNet-50 7x7 1x1 expand", 1568, 2048, 512),
    ("ResNet-50 classifier", 32, 1000, 2048),
)
"""A fixed set of real models' layer shapes, (name, M, N, K): what ``train``
answers to say how much its data covers (:mod:`costlearn.learn.coverage`).
Forward Y = X W with M tokens, N outputs, K inputs; a data gradient swaps N
and K, a weight gradient reduces over the tokens. Sources: the model cards
and configs named in :data:`TRANSFORMER_HIDDEN`'s comment; the ResNet-50
bottleneck widths of He et al., "Deep Residual Learning for Image
Recognition", CVPR 2016, table 1."""


def _round_up(x: float, to: int) -> int:
    return int(math.ceil(x / to) * to)


def real_model_shape(rng: np.random.Generator) -> tuple[int, int, int]:
    """One (M, N, K) of a real model's linear layer: a transformer's (QKV,
    attention output, MLP up and down, head) or a convnet's (1x1 convolution,
    classifier), forward (M tokens, N out, K in) or backward (data gradient:
    K and N swapped; weight gradient: the tokens are the reduction K).

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draw (its state advances).

    Returns
    -------
    (int, int, int)
        M, N, K, drawn from this module's tables.
    """
    if rng.random() < 0.6:
        h = int(rng.choice(TRANSFORMER_HIDDEN))
        ffn = _round_up(h * float(rng.choice(FFN_MULTIPLIERS)), 256 if h >= 2048 else 64)
        fan_in, fan_out = [(h, 3 * h), (h, h), (h, ffn), (ffn, h), (h, int(rng.choice(VOCABULARY)))][
            int(rng.choice(5, p=[0.25, 0.2, 0.2, 0.2, 0.15]))]
        tokens = int(rng.choice(BATCH)) * int(rng.choice(SEQUENCE))
    else:
        c_in, c_out = (int(x) for x in rng.choice(CHANNELS, 2))
        if rng.random() < 0.15:                               # the classifier
            c_out, tokens = int(rng.choice(VOCABULARY[:2])), int(rng.choice(BATCH))
        else:
            side = int(rng.choice(FEATURE_MAP))
            tokens = int(rng.choice(BATCH[:6])) * side * side
        fan_in, fan_out = c_in, c_out
    u = rng.random()
    if u < 0.5:
        return tokens, fan_out, fan_in                         # forward: Y = X W
    if u < 0.75:
        return tokens, fan_in, fan_out                         # data gradient: dX = dY W^T
    return fan_in, fan_out, tokens                             # weight gradient: dW = X^T dY
