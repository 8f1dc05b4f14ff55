#!/usr/bin/env python3
"""Architecture sweep: real PyTorch exports of many architectures, one training step each on
Strait's CPU runtime, checked against PyTorch autograd.

    PYTHONPATH=python python bench/import/zoo.py [--only NAME ...] [--exporter dynamo|torchscript|both]
                                               [--build build] [--out DIR] [--list]
                                               [--train-all-floats]

Needs torch, transformers and onnxscript (all in .venv); the torchvision architectures also
need torchvision, which is NOT a project requirement: install it into a throwaway venv that sees
.venv's packages, e.g.

    python3.11 -m venv /tmp/zoo && echo $PWD/.venv/lib/python3.11/site-packages \\
        > /tmp/zoo/lib/python3.11/site-packages/dotvenv.pth && /tmp/zoo/bin/pip install --no-deps torchvision
    PYTHONPATH=python /tmp/zoo/bin/python bench/import/zoo.py

(without torchvision those rows say "torchvision not installed").

For every architecture (tiny config, random init with seed 0, dropout 0, every parameter
perturbed so that none is equal to another) and exporter:

  1. export: ``torch.onnx.export(dynamo=True, opset 18, optimize=False)`` plus the same
     post-processing as the committed models (``strait.models.export._optimize``: onnxscript's
     optimizer without value de-duplication or folding of parameter reads), or the TorchScript
     exporter (``dynamo=False``, opset 17, no constant folding); weights inline;
  2. import: ``straitc --emit=mlir`` with static input shapes;
  3. train step: ``strait-opt --graph-build-training-step`` (cross-entropy, autodiff, gradients
     returned as results), exported with ``straitc --emit=program`` and run for one step by
     ``strait-run --dump-outputs`` on a batch whose rows are all equal (see
     ``strait.gradcheck.runtime_batch``);
  4. compare: the loss and every parameter gradient against torch autograd in train mode
     (BatchNorm with batch statistics, as Strait's training step does); the error per tensor is
     max|g_strait - g_torch| / max|g_torch|; and the tensors Strait trains are torch's
     parameters: the "trained" column counts Strait's gradients; a gradient for anything else
     (a buffer, an exporter's constant) fails a dynamo row ("extra grads": its file marks the
     parameters) and is a note on a TorchScript row (no marks: every float initializer trains
     unless frozen); a gradient for a parameter with requires_grad=False is a note (no export
     records the flag).

Prints one table row per (architecture, exporter); exit status 1 when any row fails.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

from strait import gradcheck  # noqa: E402

SEED = 0
TOLERANCE = 1e-3  # f32 through up to ~50 layers; the per-tensor worst error is printed
VOCAB, SEQ, BATCH = 64, 8, 2
IMAGE = 32
# torchvision nets downsample by 32: at 64 px their last BatchNorms still see 2x2 values per
# channel (at 32 px one value per channel and a batch of equal rows: zero variance, and the
# gradient through it is ill-conditioned, 1/sqrt(eps))
TV_IMAGE = 64
FLOOR = 1e-3  # see _rel_err


@dataclasses.dataclass
class Arch:
    name: str
    source: str  # what builds it
    build: callable  # () -> (module returning logits, input tensor)
    input_name: str
    classes: int = VOCAB
    # zero-mean perturbation: a net without normalization (SqueezeNet) whose weights all grow
    # by +0.05 on average blows up (logits ~1e17, loss 0, every gradient 0)
    centered: bool = False


# ---------------------------------------------------------------------------------------
# architectures


def _torch():
    import torch

    return torch


def _wrap(model, call):
    torch = _torch()

    class Wrapped(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return call(self.m, x)

    return Wrapped(model)


def _no_dropout_config(cfg):
    for k in list(vars(cfg)):
        if ("dropout" in k or k.endswith("_pdrop") or "drop_path" in k or k == "layerdrop") \
                and isinstance(getattr(cfg, k), float):
            setattr(cfg, k, 0.0)
    return cfg


def _ids():
    torch = _torch()
    g = torch.Generator().manual_seed(SEED + 1)
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)


def _pixels(channels=3, size=IMAGE):
    torch = _torch()
    g = torch.Generator().manual_seed(SEED + 1)
    return torch.randn(BATCH, channels, size, size, generator=g)


def _hf(cls_name, cfg_name, **cfg):
    def build():
        import transformers

        _no_packed_sequences()
        config = _no_dropout_config(getattr(transformers, cfg_name)(**cfg))
        config._attn_implementation = "eager"
        if hasattr(config, "num_local_experts") or hasattr(config, "num_experts"):
            # MoE: each token's k experts' weights gathered and applied by batched matmuls,
            # static shapes (grouped_mm and eager select each expert's tokens with nonzero)
            config._experts_implementation = "batched_mm"
        torch = _torch()
        torch.manual_seed(SEED)
        return getattr(transformers, cls_name)(config)
    return build


def _no_packed_sequences():
    from strait.models import export

    export._no_packed_sequences()


def _causal(cls_name, cfg_name, **cfg):
    make = _hf(cls_name, cfg_name, **cfg)
    return lambda: (_wrap(make(), lambda m, x: m(input_ids=x, use_cache=False,
                                                  return_dict=False)[0]), _ids())


def _encoder(cls_name, cfg_name, **cfg):
    make = _hf(cls_name, cfg_name, **cfg)
    return lambda: (_wrap(make(), lambda m, x: m(input_ids=x, return_dict=False)[0]), _ids())


def _seq2seq(cls_name, cfg_name, **cfg):
    """Encoder-decoder LM: the encoder reads the tokens and the decoder (teacher forcing) the
    same tokens; the loss is the decoder's next-token cross-entropy."""
    make = _hf(cls_name, cfg_name, **cfg)
    return lambda: (_wrap(make(), lambda m, x: m(input_ids=x, decoder_input_ids=x,
                                                  use_cache=False, return_dict=False)[0]),
                    _ids())


def _hf_vision(cls_name, cfg_name, channels=3, size=IMAGE, **cfg):
    make = _hf(cls_name, cfg_name, **cfg)
    return lambda: (_wrap(make(), lambda m, x: m(pixel_values=x, return_dict=False)[0]),
                    _pixels(channels, size))


def _whisper_encoder():
    import transformers

    config = _no_dropout_config(transformers.WhisperConfig(
        d_model=32, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=64, num_mel_bins=16,
        max_source_positions=8, vocab_size=VOCAB, num_labels=10, classifier_proj_size=16))
    config._attn_implementation = "eager"
    torch = _torch()
    torch.manual_seed(SEED)
    model = transformers.WhisperForAudioClassification(config)
    g = torch.Generator().manual_seed(SEED + 1)
    feats = torch.randn(BATCH, 16, 16, generator=g)  # 2 * max_source_positions frames
    return _wrap(model, lambda m, x: m(input_features=x, return_dict=False)[0]), feats


def _tv(ctor):
    def build():
        try:
            import torchvision  # noqa: F401
        except ImportError as e:
            raise MissingDependency("torchvision not installed") from e
        torch = _torch()
        torch.manual_seed(SEED)
        return ctor(), _pixels(3, TV_IMAGE)
    return build


class MissingDependency(RuntimeError):
    pass


def _tv_resnet():
    from torchvision.models.resnet import BasicBlock, ResNet

    return ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)


def _tv_mobilenet_v2():
    from torchvision.models import mobilenet_v2

    return mobilenet_v2(num_classes=10, width_mult=0.25)


def _tv_mobilenet_v3():
    from torchvision.models.mobilenetv3 import MobileNetV3, _mobilenet_v3_conf

    setting, last = _mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.25)
    return MobileNetV3(setting, last, num_classes=10)


def _tv_efficientnet():
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

    setting, last = _efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.25)
    return EfficientNet(setting, dropout=0.0, stochastic_depth_prob=0.0, num_classes=10,
                        last_channel=last)


def _tv_densenet():
    from torchvision.models import DenseNet

    return DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, bn_size=2,
                    num_classes=10)


def _tv_regnet():
    from torchvision.models.regnet import BlockParams, RegNet

    return RegNet(BlockParams.from_init_params(depth=4, w_0=8, w_a=8.0, w_m=2.0,
                                               group_width=8), num_classes=10)


def _tv_convnext():
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    return ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)],
                    stochastic_depth_prob=0.0, num_classes=10)


def _tv_swin():
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                           window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10)


def _tv_shufflenet():
    from torchvision.models import ShuffleNetV2

    return ShuffleNetV2([1, 1, 1], [8, 16, 32, 64, 64], num_classes=10)


def _tv_squeezenet():
    from torchvision.models import SqueezeNet

    m = SqueezeNet("1_1", num_classes=10)
    return m


def _tv_googlenet():
    from torchvision.models import GoogLeNet

    return GoogLeNet(num_classes=10, aux_logits=False, transform_input=False,
                     init_weights=True, dropout=0.0)


def _tv_mnasnet():
    from torchvision.models import MNASNet

    return MNASNet(0.25, num_classes=10, dropout=0.0)


def _tv_resnext():
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, [1, 1, 1, 1], groups=4, width_per_group=4, num_classes=10)


def _tv_vgg():
    from torchvision.models.vgg import VGG, make_layers

    m = VGG(make_layers([8, "M", 16, "M", 32, 32, "M"], batch_norm=True), num_classes=10,
            dropout=0.0)
    torch = _torch()
    m.avgpool = torch.nn.AdaptiveAvgPool2d((1, 1))  # 32 features instead of 32 * 7 * 7
    m.classifier = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 10))
    return m


def _tv_vit():
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=TV_IMAGE, patch_size=16, num_layers=2, num_heads=2,
                             hidden_dim=32, mlp_dim=64, num_classes=10)


def _tv_maxvit():
    from torchvision.models.maxvit import MaxVit

    return MaxVit(input_size=(TV_IMAGE, TV_IMAGE), stem_channels=8, partition_size=2,
                  block_channels=[16, 32], block_layers=[1, 1], head_dim=8,
                  stochastic_depth_prob=0.0, num_classes=10)


def _levit(build):
    """LeViT caches its attention biases (a gather of the bias parameter) in eval mode, and
    the export (eval mode) would make the cached tensor a constant: the biases would get no
    gradient. The exported module computes them as in train mode."""
    import types

    def make():
        module, x = build()
        for m in module.modules():
            if hasattr(m, "get_attention_biases"):
                m.get_attention_biases = types.MethodType(
                    lambda self, device: self.attention_biases[:, self.attention_bias_idxs], m)
        return module, x
    return make


def _segformer():
    """Semantic segmentation: logits [B, classes, H/4, W/4] as per-pixel rows."""
    make = _hf("SegformerForSemanticSegmentation", "SegformerConfig", num_channels=3,
               num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
               patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2],
               mlp_ratios=[2, 2], decoder_hidden_size=32, num_labels=4)
    return (_wrap(make(), lambda m, x: m(pixel_values=x, return_dict=False)[0]
                  .flatten(2).transpose(1, 2)), _pixels())


def _wav2vec2():
    import transformers

    config = _no_dropout_config(transformers.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=4, num_labels=10, classifier_proj_size=16,
        vocab_size=VOCAB, mask_time_prob=0.0, apply_spec_augment=False))
    config._attn_implementation = "eager"
    torch = _torch()
    torch.manual_seed(SEED)
    model = transformers.Wav2Vec2ForSequenceClassification(config)
    g = torch.Generator().manual_seed(SEED + 1)
    audio = torch.randn(BATCH, 160, generator=g)
    return _wrap(model, lambda m, x: m(input_values=x, return_dict=False)[0]), audio


def _unet():
    """A two-level U-Net (Conv/BatchNorm/ReLU, MaxPool down, ConvTranspose up, skip
    concatenation) classifying every pixel into 4 classes."""
    torch = _torch()
    from torch import nn

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.down1, self.down2 = block(3, 8), block(8, 16)
            self.pool = nn.MaxPool2d(2)
            self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
            self.dec = block(16, 8)
            self.head = nn.Conv2d(8, 4, 1)

        def forward(self, x):
            a = self.down1(x)
            b = self.down2(self.pool(a))
            y = self.dec(torch.cat([a, self.up(b)], dim=1))
            # [B, 4, H, W] -> [B, H*W, 4]: per-pixel logits
            return self.head(y).flatten(2).transpose(1, 2)

    torch.manual_seed(SEED)
    return UNet(), _pixels(3, 16)


def _rnn_lm(kind):
    def build():
        torch = _torch()
        from torch import nn

        class RNNLM(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(VOCAB, 16)
                self.rnn = getattr(nn, kind)(16, 24, num_layers=1, batch_first=True)
                self.head = nn.Linear(24, VOCAB)

            def forward(self, x):
                return self.head(self.rnn(self.emb(x))[0])

        torch.manual_seed(SEED)
        return RNNLM(), _ids()
    return build


def _small_text(**kw):
    base = dict(vocab_size=VOCAB)
    base.update(kw)
    return base


ARCHS = [
    Arch("bert", "transformers.BertForMaskedLM", _encoder(
        "BertForMaskedLM", "BertConfig", **_small_text(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=32)), "input_ids"),
    Arch("roberta", "transformers.RobertaForMaskedLM", _encoder(
        "RobertaForMaskedLM", "RobertaConfig", **_small_text(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=40, pad_token_id=1)), "input_ids"),
    Arch("distilbert", "transformers.DistilBertForMaskedLM", _encoder(
        "DistilBertForMaskedLM", "DistilBertConfig", **_small_text(
            dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=32)),
        "input_ids"),
    Arch("gpt-neox", "transformers.GPTNeoXForCausalLM", _causal(
        "GPTNeoXForCausalLM", "GPTNeoXConfig", **_small_text(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=32, rotary_pct=0.5)), "input_ids"),
    Arch("mistral-gqa", "transformers.MistralForCausalLM", _causal(
        "MistralForCausalLM", "MistralConfig", **_small_text(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=64, max_position_embeddings=32, head_dim=8)), "input_ids"),
    Arch("qwen2-gqa", "transformers.Qwen2ForCausalLM", _causal(
        "Qwen2ForCausalLM", "Qwen2Config", **_small_text(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=64, max_position_embeddings=32)), "input_ids"),
    Arch("phi", "transformers.PhiForCausalLM", _causal(
        "PhiForCausalLM", "PhiConfig", **_small_text(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=32, partial_rotary_factor=0.5)), "input_ids"),
    Arch("opt", "transformers.OPTForCausalLM", _causal(
        "OPTForCausalLM", "OPTConfig", **_small_text(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, ffn_dim=64,
            max_position_embeddings=32, word_embed_proj_dim=32)), "input_ids"),
    Arch("t5", "transformers.T5ForConditionalGeneration", _seq2seq(
        "T5ForConditionalGeneration", "T5Config", **_small_text(
            d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
            decoder_start_token_id=0)), "input_ids"),
    Arch("bart", "transformers.BartForConditionalGeneration", _seq2seq(
        "BartForConditionalGeneration", "BartConfig", **_small_text(
            d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
            max_position_embeddings=32)), "input_ids"),
    Arch("whisper-encoder", "transformers.WhisperForAudioClassification", _whisper_encoder,
         "input_features", 10),
    Arch("vit", "transformers.ViTForImageClassification", _hf_vision(
        "ViTForImageClassification", "ViTConfig", image_size=IMAGE, patch_size=8,
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        num_labels=10), "pixel_values", 10),
    Arch("deit", "transformers.DeiTForImageClassification", _hf_vision(
        "DeiTForImageClassification", "DeiTConfig", image_size=IMAGE, patch_size=8,
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        num_labels=10), "pixel_values", 10),
    Arch("swin-hf", "transformers.SwinForImageClassification", _hf_vision(
        "SwinForImageClassification", "SwinConfig", image_size=IMAGE, patch_size=4,
        embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4, num_labels=10),
        "pixel_values", 10),
    Arch("convnext-hf", "transformers.ConvNextForImageClassification", _hf_vision(
        "ConvNextForImageClassification", "ConvNextConfig", hidden_sizes=[16, 32], num_stages=2,
        depths=[1, 1], num_labels=10, image_size=IMAGE), "pixel_values", 10),
    Arch("gpt2", "transformers.GPT2LMHeadModel", _causal(
        "GPT2LMHeadModel", "GPT2Config", **_small_text(
            n_embd=32, n_layer=2, n_head=2, n_positions=32)), "input_ids"),
    Arch("gpt-j", "transformers.GPTJForCausalLM", _causal(
        "GPTJForCausalLM", "GPTJConfig", **_small_text(
            n_embd=32, n_layer=2, n_head=2, n_positions=32, rotary_dim=8)), "input_ids"),
    Arch("falcon", "transformers.FalconForCausalLM", _causal(
        "FalconForCausalLM", "FalconConfig", **_small_text(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_kv_heads=1,
            new_decoder_architecture=False, multi_query=True, parallel_attn=True,
            alibi=False, bias=False)), "input_ids"),
    Arch("bloom-alibi", "transformers.BloomForCausalLM", _causal(
        "BloomForCausalLM", "BloomConfig", **_small_text(
            hidden_size=32, n_layer=2, n_head=4)), "input_ids"),
    Arch("gemma", "transformers.GemmaForCausalLM", _causal(
        "GemmaForCausalLM", "GemmaConfig", **_small_text(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
            head_dim=8, intermediate_size=64, max_position_embeddings=32)), "input_ids"),
    Arch("mamba", "transformers.MambaForCausalLM (slow path: unrolled selective scan)",
         _causal("MambaForCausalLM", "MambaConfig", **_small_text(
             hidden_size=16, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4,
             use_mambapy=False)), "input_ids"),
    Arch("mixtral-moe", "transformers.MixtralForCausalLM (4 experts, top-2 routing)", _causal(
        "MixtralForCausalLM", "MixtralConfig", **_small_text(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, intermediate_size=32, max_position_embeddings=32, num_local_experts=4,
            num_experts_per_tok=2)), "input_ids",
         # zero-mean perturbation: + 0.1 U(0, 1) routes every token to the same 2 experts
         centered=True),
    Arch("qwen2-moe", "transformers.Qwen2MoeForCausalLM (4 experts, top-2, gated shared expert)",
         _causal("Qwen2MoeForCausalLM", "Qwen2MoeConfig", **_small_text(
             hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=32, moe_intermediate_size=16, shared_expert_intermediate_size=32,
             max_position_embeddings=32, num_experts=4, num_experts_per_tok=2,
             norm_topk_prob=True)), "input_ids", centered=True),
    Arch("gpt-oss", "transformers.GptOssForCausalLM (4 experts, top-2, transposed experts, sinks)",
         _causal("GptOssForCausalLM", "GptOssConfig", **_small_text(
             hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, intermediate_size=32, max_position_embeddings=32, num_local_experts=4,
             num_experts_per_tok=2, sliding_window=4,
             layer_types=["sliding_attention", "full_attention"])), "input_ids", centered=True),
    Arch("olmoe", "transformers.OlmoeForCausalLM (4 experts, top-2, QK-norm)",
         _causal("OlmoeForCausalLM", "OlmoeConfig", **_small_text(
             hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=16, max_position_embeddings=32, num_experts=4,
             num_experts_per_tok=2)), "input_ids", centered=True),
    Arch("electra", "transformers.ElectraForMaskedLM", _encoder(
        "ElectraForMaskedLM", "ElectraConfig", **_small_text(
            embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=32)), "input_ids"),
    Arch("albert", "transformers.AlbertForMaskedLM (one layer's weights shared by 2)",
         _encoder("AlbertForMaskedLM", "AlbertConfig", **_small_text(
             embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=64, max_position_embeddings=32)), "input_ids"),
    Arch("deberta-v2", "transformers.DebertaV2ForMaskedLM (disentangled rel. attention)",
         _encoder("DebertaV2ForMaskedLM", "DebertaV2Config", **_small_text(
             hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=32, relative_attention=True, position_buckets=8,
             pos_att_type=["p2c", "c2p"])), "input_ids"),
    Arch("mobilebert", "transformers.MobileBertForMaskedLM", _encoder(
        "MobileBertForMaskedLM", "MobileBertConfig", **_small_text(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16,
            num_feedforward_networks=2, max_position_embeddings=32)), "input_ids"),
    Arch("wav2vec2", "transformers.Wav2Vec2ForSequenceClassification", _wav2vec2,
         "input_values", 10),
    Arch("beit", "transformers.BeitForImageClassification (relative position bias)",
         _hf_vision("BeitForImageClassification", "BeitConfig", image_size=IMAGE,
                    patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, use_relative_position_bias=True, num_labels=10),
         "pixel_values", 10),
    Arch("dinov2", "transformers.Dinov2ForImageClassification", _hf_vision(
        "Dinov2ForImageClassification", "Dinov2Config", image_size=IMAGE, patch_size=8,
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
        num_labels=10), "pixel_values", 10),
    Arch("clip-vision", "transformers.CLIPForImageClassification", _hf_vision(
        "CLIPForImageClassification", "CLIPConfig", vision_config=dict(
            image_size=IMAGE, patch_size=8, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=64),
        text_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, vocab_size=VOCAB), num_labels=10),
        "pixel_values", 10),
    Arch("mobilevit", "transformers.MobileViTForImageClassification", _hf_vision(
        "MobileViTForImageClassification", "MobileViTConfig", image_size=TV_IMAGE,
        hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
        num_attention_heads=2, num_labels=10, size=TV_IMAGE), "pixel_values", 10),
    Arch("levit", "transformers.LevitForImageClassification (bias cache off)", _levit(_hf_vision(
        "LevitForImageClassification", "LevitConfig", image_size=IMAGE, hidden_sizes=[32, 48],
        num_attention_heads=[2, 3], depths=[1, 1], key_dim=[8, 8], down_ops=[
            ["Subsample", 8, 32 // 8, 4, 2, 2]], mlp_ratio=[2, 2], attention_ratio=[2, 2],
        num_labels=10)), "pixel_values", 10),
    Arch("poolformer", "transformers.PoolFormerForImageClassification", _hf_vision(
        "PoolFormerForImageClassification", "PoolFormerConfig", hidden_sizes=[16, 32],
        depths=[1, 1], num_encoder_blocks=2, patch_sizes=[7, 3], strides=[4, 2],
        padding=[2, 1], num_labels=10), "pixel_values", 10),
    Arch("segformer", "transformers.SegformerForSemanticSegmentation (per-pixel loss)",
         _segformer, "pixel_values", 4),
    Arch("resnet", "torchvision ResNet(BasicBlock, [1,1,1,1])", _tv(_tv_resnet),
         "pixel_values", 10),
    Arch("mobilenet-v2", "torchvision mobilenet_v2(width_mult=0.25)", _tv(_tv_mobilenet_v2),
         "pixel_values", 10),
    Arch("mobilenet-v3", "torchvision MobileNetV3 small, width 0.25", _tv(_tv_mobilenet_v3),
         "pixel_values", 10),
    Arch("efficientnet", "torchvision EfficientNet-B0 conf, width/depth 0.25",
         _tv(_tv_efficientnet), "pixel_values", 10),
    Arch("densenet", "torchvision DenseNet(growth 8, blocks (2,2))", _tv(_tv_densenet),
         "pixel_values", 10),
    Arch("regnet", "torchvision RegNet(depth 4, w_0 8, groups of 8)", _tv(_tv_regnet),
         "pixel_values", 10),
    Arch("convnext", "torchvision ConvNeXt(16/32 wide, 1+1 blocks)", _tv(_tv_convnext),
         "pixel_values", 10),
    Arch("swin", "torchvision SwinTransformer(embed 16, depths 1,1, window 4)", _tv(_tv_swin),
         "pixel_values", 10),
    Arch("shufflenet-v2", "torchvision ShuffleNetV2([1,1,1], [8,16,32,64,64])",
         _tv(_tv_shufflenet), "pixel_values", 10),
    Arch("squeezenet", "torchvision SqueezeNet 1.1", _tv(_tv_squeezenet), "pixel_values", 10,
         centered=True),
    Arch("resnext", "torchvision ResNet(Bottleneck, [1,1,1,1], groups 4)", _tv(_tv_resnext),
         "pixel_values", 10),
    Arch("googlenet", "torchvision GoogLeNet (no aux heads)", _tv(_tv_googlenet),
         "pixel_values", 10),
    Arch("mnasnet", "torchvision MNASNet(0.25)", _tv(_tv_mnasnet), "pixel_values", 10),
    Arch("vgg-bn", "torchvision VGG(make_layers(8,M,16,M,32,32,M), bn), small head",
         _tv(_tv_vgg), "pixel_values", 10),
    Arch("vit-tv", "torchvision VisionTransformer(64px, patch 16, 2 layers)", _tv(_tv_vit),
         "pixel_values", 10),
    Arch("maxvit", "torchvision MaxVit(stem 8, blocks 16/32, partition 2)", _tv(_tv_maxvit),
         "pixel_values", 10),
    Arch("unet", "torch: 2-level U-Net with ConvTranspose", _unet, "pixel_values", 4),
    Arch("lstm-lm", "torch: Embedding + nn.LSTM + Linear", _rnn_lm("LSTM"), "input_ids"),
    Arch("gru-lm", "torch: Embedding + nn.GRU + Linear", _rnn_lm("GRU"), "input_ids"),
]


# ---------------------------------------------------------------------------------------
# export


def _prepare(module, centered: bool = False):
    """Dropout off, every float parameter/buffer distinct (gradcheck._perturb: + 0.1 U(0, 1);
    `centered`: + 0.1 (U(0, 1) - 0.5) instead)."""
    torch = _torch()
    for m in module.modules():
        if isinstance(m, torch.nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0
    if centered:
        gen = torch.Generator().manual_seed(SEED + 2)
        with torch.no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                if t.is_floating_point():
                    t.add_(0.1 * (torch.rand(t.shape, generator=gen) - 0.5))
    else:
        gradcheck._perturb(module, SEED + 2)
    return module.eval()


def _labels(arch: Arch, module, x):
    torch = _torch()
    with torch.no_grad():
        logits = module(x)
    g = torch.Generator().manual_seed(SEED + 3)
    return torch.randint(0, logits.shape[-1], logits.shape[:-1], generator=g), logits


def export(module, x, arch: Arch, exporter: str, path: str) -> None:
    torch = _torch()
    import onnx

    module.eval()
    if exporter == "dynamo":
        from strait.models import export as ex
        import onnx_ir as ir

        program = torch.onnx.export(module, (x,), dynamo=True, opset_version=ex.OPSET,
                                    optimize=False, input_names=[arch.input_name],
                                    output_names=["logits"], verify=False, report=False)
        model = program.model
        ex._optimize(model, set(model.graph.initializers.keys()))
        proto = ir.serde.serialize_model(model)
        ex._strip_node_metadata(proto)
    else:
        import io

        buf = io.BytesIO()
        torch.onnx.export(module, (x,), buf, dynamo=False, opset_version=17,
                          do_constant_folding=False, input_names=[arch.input_name],
                          output_names=["logits"])
        proto = onnx.load_from_string(buf.getvalue())
    mapping = {t.name: t.name[2:] for t in proto.graph.initializer if t.name.startswith("m.")}
    from strait.models.export import _rename

    _rename(proto, mapping)
    onnx.save_model(proto, path)


def op_histogram(path: str) -> dict:
    import onnx

    hist = {}
    for n in onnx.load(path, load_external_data=False).graph.node:
        hist[n.op_type] = hist.get(n.op_type, 0) + 1
    return hist


# ---------------------------------------------------------------------------------------
# one row


@dataclasses.dataclass
class Row:
    arch: str
    exporter: str
    nodes: int = 0
    op_types: int = 0
    params: int = 0
    import_ok: str = "-"
    step_ok: str = "-"
    loss_err: float | None = None
    grad_err: float | None = None
    grads: str = ""
    trained: int = 0  # gradients Strait computed (torch's: len(reference))
    status: str = "?"
    note: str = ""
    seconds: float = 0.0


def _short(text: str, n: int = 160) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    pick = [ln for ln in lines if "error" in ln.lower()] or lines
    return re.sub(r"\x1b\[[0-9;]*m", "", pick[0] if pick else "")[:n].replace("|", "/")


def run_one(arch: Arch, exporter: str, build: str, out: str) -> Row:
    torch = _torch()
    row = Row(arch.name, exporter)
    t0 = time.time()
    try:
        module, x = arch.build()
    except MissingDependency as e:
        row.status, row.note = "skipped", str(e)
        return row
    module = _prepare(module, arch.centered)
    labels, _ = _labels(arch, module, x)
    row.params = sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())
    shape = "x".join(str(d) for d in x.shape)
    case = gradcheck.Case(arch.name, module, {arch.input_name: x}, labels,
                          f"{arch.input_name}={shape}")
    case = gradcheck.runtime_batch(case)
    if x.dtype == torch.int64 and labels.dim() == 2:
        pass  # runtime_batch made the labels the next tokens (what strait-run feeds)
    path = os.path.join(out, f"{arch.name}.{exporter}.onnx")
    try:
        export(module, case.inputs[arch.input_name], arch, exporter, path)
    except Exception as e:  # noqa: BLE001 - the table reports every failure
        while e.__cause__ is not None:  # the exporter wraps the reason
            e = e.__cause__
        first = next((ln for ln in str(e).splitlines() if ln.strip()), "")
        row.status, row.note = "export failed", _short(f"{type(e).__name__}: {first}")
        row.seconds = time.time() - t0
        return row
    hist = op_histogram(path)
    row.nodes, row.op_types = sum(hist.values()), len(hist)

    straitc = gradcheck._tool(build, "straitc")
    imp = subprocess.run([straitc, path, "--input-shape", case.input_shapes, "--emit=mlir",
                          "--print-weights"], capture_output=True, text=True)
    if imp.returncode != 0:
        row.import_ok, row.status = "no", "import failed"
        row.note = _short(imp.stderr)
        row.seconds = time.time() - t0
        return row
    row.import_ok = "yes"
    step = subprocess.run([gradcheck._tool(build, "strait-opt"),
                           f"--graph-build-training-step={gradcheck.GRADIENTS_ONLY}"],
                          input=imp.stdout, capture_output=True, text=True)
    if step.returncode != 0:
        row.step_ok, row.status = "no", "autodiff failed"
        row.note = _short(step.stderr)
        row.seconds = time.time() - t0
        return row
    try:
        _, files = gradcheck._export_and_run(step.stdout, case, build, ["--steps", "1"])
    except gradcheck.RuntimeUnavailable as e:
        row.step_ok, row.status, row.note = "no", "runtime failed", _short(str(e))
        row.seconds = time.time() - t0
        return row
    row.step_ok = "yes"
    computed = {f[len("grad."):-len(".rank0.npy")]: v for f, v in files.items()
                if f.startswith("grad.") and f.endswith(".rank0.npy")}
    loss, reference = gradcheck.torch_gradients(case)
    got_loss = files.get("loss.rank0.npy")
    if got_loss is not None:
        row.loss_err = abs(float(got_loss.reshape(-1)[0]) - loss) / max(abs(loss), 1e-12)
    # tied parameters (BERT's MLM decoder and word embedding) have one torch name but the
    # exporter may keep another of their names
    aliases = {}
    for n, p in module.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(p), []).append(n.removeprefix("m."))
    # tensors Strait trains that torch does not: buffers and the exporter's constants (not
    # parameters at all), and parameters with requires_grad=False (Whisper's sinusoidal
    # positions), which an export marks as parameters like any other
    names = {a for group in aliases.values() for a in group}
    trained = {a for p in module.parameters() if p.requires_grad for a in aliases[id(p)]}
    extra = sorted(k for k in computed if k not in names)
    frozen = sorted(k for k in computed if k in names and k not in trained)
    row.trained = len(computed)
    for n, p in module.named_parameters():
        n = n.removeprefix("m.")
        for alias in aliases[id(p)]:
            if n in reference and n not in computed and alias in computed:
                computed[n] = computed[alias]
    errs = {k: _rel_err(v, computed[k], reference) if k in computed else float("inf")
            for k, v in reference.items()}
    missing = [k for k in reference if k not in computed]
    row.grad_err = max(errs.values(), default=float("inf"))
    good = sum(e <= TOLERANCE for e in errs.values())
    row.grads = f"{good}/{len(reference)}"
    worst = max(errs, key=errs.get) if errs else ""
    top = max((float(abs(v).max()) for v in reference.values()), default=0.0)
    if not (top > 0 and abs(loss) < float("inf") and loss > 0):
        row.status = "vacuous"
        row.note = f"torch's loss {loss:.3g}, largest gradient {top:.3g}: nothing to compare"
    elif missing:
        row.status = "grads missing"
        row.note = f"no gradient for {len(missing)} parameters, e.g. {missing[0]}"
    elif extra and exporter == "dynamo":  # the export marks its parameters: a Strait bug
        row.status = "extra grads"
        row.note = f"gradients for {len(extra)} tensors torch does not train: {', '.join(extra[:3])}"
    elif row.grad_err > TOLERANCE or (row.loss_err or 0) > TOLERANCE:
        row.status = "mismatch"
        row.note = f"worst: {worst} ({errs[worst]:.2g})"
    else:
        row.status = "ok"
        if extra:  # no parameter marks in a TorchScript export: every float initializer trains
            row.note = f"also trains {len(extra)} non-parameters: {', '.join(extra[:3])}"
        if frozen:
            row.note += ("; " if row.note else "") + \
                f"also trains {len(frozen)} requires_grad=False parameters: {', '.join(frozen[:3])}"
    row.seconds = time.time() - t0
    return row


def _rel_err(ref, got, reference: dict) -> float:
    """max|got - ref| / max|ref|, with max|ref| floored at FLOOR times the largest gradient
    entry of the model: some gradients are zero in exact arithmetic and only rounding noise in
    f32 (an attention key bias: softmax is invariant to adding q.b to every score of a row),
    and their relative error would compare noise with noise."""
    import numpy as np

    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    if ref.shape != got.shape:
        return float("inf")
    top = max(float(np.max(np.abs(v))) for v in reference.values())
    scale = max(float(np.max(np.abs(ref))), FLOOR * top, 1e-30)
    return float(np.max(np.abs(ref - got)) / scale)


def _fmt(v):
    return "-" if v is None else ("inf" if v == float("inf") else f"{v:.1e}")


def print_table(rows, stream=sys.stdout):
    print("| architecture | exporter | nodes | op types | params | import | train step | "
          "loss rel. err | max grad rel. err | grads within 1e-3 | trained | status | note |",
          file=stream)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|", file=stream)
    for r in rows:
        print(f"| {r.arch} | {r.exporter} | {r.nodes or '-'} | {r.op_types or '-'} | "
              f"{r.params or '-'} | {r.import_ok} | {r.step_ok} | {_fmt(r.loss_err)} | "
              f"{_fmt(r.grad_err)} | {r.grads or '-'} | {r.trained or '-'} | {r.status} | "
              f"{r.note} |", file=stream)
    stream.flush()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--exporter", choices=["dynamo", "torchscript", "both"], default="both")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=None, help="keep the ONNX files here")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--train-all-floats", action="store_true",
                    help="train every float initializer (trainable=*), ignoring the parameter "
                         "marks of dynamo exports: what Strait did before it read them")
    args = ap.parse_args(argv)
    if args.train_all_floats:
        gradcheck.GRADIENTS_ONLY += " trainable=*"
    if args.list:
        for a in ARCHS:
            print(f"{a.name}: {a.source}")
        return 0
    archs = [a for a in ARCHS if args.only is None or a.name in args.only]
    exporters = ["dynamo", "torchscript"] if args.exporter == "both" else [args.exporter]
    import warnings

    warnings.filterwarnings("ignore")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or tmp
        os.makedirs(out, exist_ok=True)
        for a in archs:
            for e in exporters:
                try:
                    row = run_one(a, e, args.build, out)
                except Exception as ex:  # noqa: BLE001
                    row = Row(a.name, e, status="harness error",
                              note=_short(f"{type(ex).__name__}: {ex}"))
                    traceback.print_exc()
                print(f"# {row.arch} {row.exporter}: {row.status} ({row.seconds:.0f} s) "
                      f"{row.note}", file=sys.stderr, flush=True)
                rows.append(row)
    print_table(rows)
    return 0 if all(r.status in ("ok", "skipped") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
