"""heartlm: raw electrocardiograms to a Heart Language Model, trained fast at any scale."""

__version__ = "0.1.0"
