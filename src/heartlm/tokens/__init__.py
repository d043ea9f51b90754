"""Beats become tokens: morphology codebook, rhythm bins, token shards and their reader."""

from heartlm.tokens.codebook import Codebook
from heartlm.tokens.pipeline import TokenizeConfig, tokenize
from heartlm.tokens.tokenset import TokenSet

__all__ = ["Codebook", "TokenSet", "TokenizeConfig", "tokenize"]
