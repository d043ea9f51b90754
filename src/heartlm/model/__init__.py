"""The Heart Language Model: configuration, presets, module and loading exported runs."""

from heartlm.model.config import PRESETS, ModelConfig, model_config
from heartlm.model.hlm import HeartLM, load_pretrained

__all__ = ["PRESETS", "HeartLM", "ModelConfig", "load_pretrained", "model_config"]
