"""`heartlm finetune`: a pretrained encoder fine-tuned for AAMI beat classes or AFIB windows."""
